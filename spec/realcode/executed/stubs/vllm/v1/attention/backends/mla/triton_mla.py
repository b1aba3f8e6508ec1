"""Stub ``vllm.v1.attention.backends.mla.triton_mla._compute_num_kv_splits``
(rocm_aiter_mla.py 0.33.0 L40, 0.34.0 L44).

The release's own definition and its two constants (vllm/v1/attention/
backends/mla/triton_mla.py 0.34.0 L43-53), executed from its tree; it sizes the
gfx942 DCP Triton verify split count (rocm_aiter_mla.py 0.34.0 L472-482).
"""

from mla_spec_stub import release_defs, strict

from vllm.triton_utils import triton  # noqa: F401  (read by the release's definition)

__getattr__ = strict("vllm.v1.attention.backends.mla.triton_mla")

release_defs(
    "vllm/v1/attention/backends/mla/triton_mla.py",
    ("_MIN_WORK_PER_SPLIT", "_SPLIT_OCCUPANCY_MULTIPLIER", "_compute_num_kv_splits"),
    globals(),
)
