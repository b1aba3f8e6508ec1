"""Stub ``vllm.v1.kv_cache_interface``: ``AttentionSpec`` and the release's own ``is_quantized_kv_cache``.

``is_quantized_kv_cache`` (and ``get_kv_quant_mode``/``KVQuantMode`` where the
release has them) are the release's definitions, executed from its tree.
"""

import ast as _ast
from dataclasses import dataclass
from enum import Enum, IntEnum  # noqa: F401  (read by the release's definitions)

import torch  # noqa: F401
from mla_spec_stub import STATE, release_defs, strict

__getattr__ = strict("vllm.v1.kv_cache_interface")


@dataclass
class AttentionSpec:
    """The fields of vLLM's AttentionSpec/MLAAttentionSpec the backend reads."""

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: "torch.dtype"
    dcp_sharded: bool = False
    non_causal_multi_token_decode: bool = False

    @property
    def page_size_bytes(self) -> int:
        """MLAAttentionSpec's page: ``block_size`` tokens of one latent head (0.34.0 L598-612, unpadded)."""
        return self.block_size * self.num_kv_heads * self.head_size * self.dtype.itemsize


KVCacheSpec = AttentionSpec


@dataclass
class MLAAttentionSpec(AttentionSpec):
    """vLLM's MLAAttentionSpec (0.34.0 L741-755), as far as 0.34.0's shipped DCP tests build one."""

    cache_dtype_str: "str | None" = None


def _load() -> None:
    text = (STATE.tree / "vllm/v1/kv_cache_interface.py").read_text()
    defined = {getattr(n, "name", None) for n in _ast.parse(text).body}
    names = tuple(n for n in ("KVQuantMode", "get_kv_quant_mode", "is_quantized_kv_cache") if n in defined)
    if "is_quantized_kv_cache" in names:
        release_defs("vllm/v1/kv_cache_interface.py", names, globals())
    else:  # older releases keep it in vllm/utils/torch_utils.py
        from vllm.utils.torch_utils import is_quantized_kv_cache

        globals()["is_quantized_kv_cache"] = is_quantized_kv_cache


_load()
