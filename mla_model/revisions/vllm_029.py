"""Gate revision ``vllm-0.29``: vLLM 0.29.0 (release family d1, 2026-09-09).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.29.0
(82,322 B, md5 65caab10): ``use_gluon_decode`` L1334, ``use_gluon_verify``
L1356 (DCP-aware, no ``causal``), ``_mtp_decode_qlen`` L422, the persistent
gate L1037 on ``_decode_num_heads``.  Every decode block is causal (the
common MLA builder refuses non-causal ones, mla_attention.py L2395-2404;
sources §13).  The threshold is 0.28's ``1 + k``, ``1 + 2k`` for parallel
drafters (vllm/v1/attention/backend.py L639-647).
"""

from mla_model.derived import reorder_batch_threshold
from mla_model.revisions.dcp_era import Features, make_revision

REVISION = make_revision(
    "vllm-0.29",
    "vLLM 0.29.0 (DCP-aware gates), DCP routes included",
    "vllm==0.29.0 rocm_aiter_mla.py (md5 65caab10), L422, L1037, L1334, L1356",
    Features(
        causal=False,
        kv_bound=False,
        triton_verify=False,
        v_scale_fix=False,
        reorder_batch_threshold=reorder_batch_threshold,
    ),
)
