"""Gate revision ``vllm-0.34``: vLLM 0.34.0, the newest release (family d5, 2026-11-16).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.34.0
(152,929 B, md5 f39fa31e): the gates of 0.33 (L2555, L2584), plus the CDNA3
Triton causal verify past qlen 4 (``_asm_causal_verify_unsupported`` L485-506)
that the persistent gate excludes (L2044).  The threshold is
``1 + k + max_num_new_slots_for_drafting``
(:func:`mla_model.derived.reorder_batch_threshold_034`).
"""

from mla_model.derived import reorder_batch_threshold_034
from mla_model.revisions.dcp_era import Features, make_revision

REVISION = make_revision(
    "vllm-0.34",
    "vLLM 0.34.0 (newest release), DCP routes included",
    "vllm==0.34.0 rocm_aiter_mla.py (md5 f39fa31e), L1122, L2044, L2555, L2584",
    Features(
        causal=True,
        kv_bound=True,
        triton_verify=True,
        v_scale_fix=True,
        reorder_batch_threshold=reorder_batch_threshold_034,
        dcp_route_enum=True,
        cprr_default=True,
        dcp_row_view=True,
        non_causal_dcp=True,
    ),
)
