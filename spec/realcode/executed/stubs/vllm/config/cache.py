"""Stub ``vllm.config.cache``: ``CacheDType`` and, 0.33.0+, the release's own kv-cache dtype handler lookup.

* ``CacheDType`` (imported by rocm_aiter_mla.py, 0.28.0 L12, 0.34.0 L16) is a
  ``Literal`` of dtype strings; the backend only annotates with it.
* ``get_kv_cache_dtype_handler`` (vllm/config/cache.py 0.33.0/0.34.0 L161) is
  read by the release's ``get_kv_quant_mode`` (vllm/v1/kv_cache_interface.py
  0.33.0 L123, 0.34.0 L112), i.e. by ``is_quantized_kv_cache``.  It and the
  handler table it reads (L111, filled only by plugins' ``register_kv_cache_dtype``)
  are executed from the release's tree, with the handler ``Protocol`` (L77).
"""

from typing import Any, ClassVar, Protocol, runtime_checkable  # noqa: F401  (read by the release's definitions)

import torch  # noqa: F401
from mla_spec_stub import STATE, release_defs, strict

__getattr__ = strict("vllm.config.cache")

CacheDType = str

_RELPATH = "vllm/config/cache.py"
if "def get_kv_cache_dtype_handler" in (STATE.tree / _RELPATH).read_text():
    from vllm.v1.kv_cache_interface import KVQuantMode  # noqa: F401  (read by the handler Protocol)

    release_defs(
        _RELPATH, ("KVCacheDTypeHandler", "_KV_CACHE_DTYPE_HANDLERS", "get_kv_cache_dtype_handler"), globals()
    )
