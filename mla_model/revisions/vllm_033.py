"""Gate revision ``vllm-0.33``: vLLM 0.33.0 (release family d4, 2026-11-02).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.33.0
(126,987 B, md5 6aeae043): the gates of 0.31 (L2129, L2158); the persistent
gate L1694 tests the row-view DCP routes, PLAIN at dcp 1.  Threshold as 0.31.
"""

from mla_model.derived import reorder_batch_threshold_031
from mla_model.revisions.dcp_era import Features, make_revision

REVISION = make_revision(
    "vllm-0.33",
    "vLLM 0.33.0 (row-view DCP verify), DCP routes included",
    "vllm==0.33.0 rocm_aiter_mla.py (md5 6aeae043), L871, L1694, L2129, L2158",
    Features(
        causal=True,
        kv_bound=True,
        triton_verify=False,
        v_scale_fix=False,
        reorder_batch_threshold=reorder_batch_threshold_031,
        dcp_route_enum=True,
        cprr_default=True,
        dcp_row_view=True,
        non_causal_dcp=True,
    ),
)
