"""Stub ``aiter.jit.core.AITER_CSRC_DIR``: AITER's shipped JIT sources, as the native-H24 probe reads them.

rocm_aiter_mla.py (0.29.0 L104-141; 0.34.0 L204-243) decides native 24-head
decode by reading two files under ``AITER_CSRC_DIR``:
``kernels/mla/reduce.cu`` for ``MLA_REDUCE_CASE_EF(NUM_HEAD,24,HEAD_DIM,512,``
and ``kernels/mla/metadata/v1_2_device.cuh`` for ``num_heads==24``.  The
release only uses the two answers together (``_aiter_mla_native_h24_supported``),
so the directory served here holds both markers exactly when the registry in
force says ``native_h24``, and neither otherwise.  It is written under the
child's scratch working directory, one per registry.
"""

from pathlib import Path

from mla_spec_stub import STATE, strict

_strict = strict("aiter.jit.core")

_FILES = {
    ("kernels", "mla", "reduce.cu"): "MLA_REDUCE_CASE_EF(NUM_HEAD, 24, HEAD_DIM, 512, ...)",
    ("kernels", "mla", "metadata", "v1_2_device.cuh"): "if (num_heads == 24) { ... }",
}


def _csrc_dir() -> str:
    reg = STATE.registry
    root = Path.cwd() / f"aiter-csrc-{reg.id}"
    if not root.exists():
        for parts, marker in _FILES.items():
            path = root.joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                f"// mla-spec harness: {reg.id} native_h24={reg.native_h24}\n"
                + (marker + "\n" if reg.native_h24 else "")
            )
    return str(root)


def __getattr__(name: str):
    if name == "AITER_CSRC_DIR":
        return _csrc_dir()
    return _strict(name)
