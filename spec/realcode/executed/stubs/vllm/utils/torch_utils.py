"""Stub ``vllm.utils.torch_utils``: the release's own ``is_quantized_kv_cache`` where it lives here."""

import ast as _ast

import torch  # noqa: F401
from mla_spec_stub import STATE, release_defs, strict

__getattr__ = strict("vllm.utils.torch_utils")

_text = (STATE.tree / "vllm/utils/torch_utils.py").read_text()
if "is_quantized_kv_cache" in {getattr(n, "name", None) for n in _ast.parse(_text).body}:
    release_defs("vllm/utils/torch_utils.py", ("is_quantized_kv_cache",), globals())
