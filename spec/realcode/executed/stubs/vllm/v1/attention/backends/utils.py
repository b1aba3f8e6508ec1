"""Stub ``vllm.v1.attention.backends.utils``: the release's own ``get_dcp_local_seq_lens``.

Imported by rocm_aiter_mla.py from 0.29.0 (L32; 0.34.0 L45); executed from the
release's vllm/v1/attention/backends/utils.py (0.29.0 L1091, 0.34.0 L1171).
"""

import torch  # noqa: F401  (read by the release's definition)
from mla_spec_stub import release_defs, strict

__getattr__ = strict("vllm.v1.attention.backends.utils")

release_defs("vllm/v1/attention/backends/utils.py", ("get_dcp_local_seq_lens",), globals())
