"""Gate revision ``vllm-0.30``: vLLM 0.30.0 (release family d2, 2026-09-22).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.30.0
(88,757 B, md5 d2ff8ef6): ``use_gluon_verify`` L1496 takes ``causal``; the
persistent gate L1134 adds ``not causal or``; non-causal fp8 two-token blocks
without a folded kernel raise (L1153-1170; sources §29).  Threshold as 0.29.
"""

from mla_model.derived import reorder_batch_threshold
from mla_model.revisions.dcp_era import Features, make_revision

REVISION = make_revision(
    "vllm-0.30",
    "vLLM 0.30.0 (non-causal draft blocks), DCP routes included",
    "vllm==0.30.0 rocm_aiter_mla.py (md5 d2ff8ef6), L512, L1134, L1474, L1496",
    Features(
        causal=True,
        kv_bound=False,
        triton_verify=False,
        v_scale_fix=False,
        reorder_batch_threshold=reorder_batch_threshold,
    ),
)
