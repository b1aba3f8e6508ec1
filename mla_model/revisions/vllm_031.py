"""Gate revision ``vllm-0.31``: vLLM 0.31.0 (release family d3, 2026-10-05).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.31.0
(102,052 B, md5 dc21e273): both Gluon
predicates take ``kv_cache_bytes`` and refuse Gluon above 2 GiB per layer
(L1727, L1756, ``_gluon_kv_cache_in_bounds``); the persistent gate L1360.
The threshold is ``max_decode_query_len`` on the V2 model runner: ``1 + k``
for every drafter (:func:`mla_model.derived.reorder_batch_threshold_031`).
"""

from mla_model.derived import reorder_batch_threshold_031
from mla_model.revisions.dcp_era import Features, make_revision

REVISION = make_revision(
    "vllm-0.31",
    "vLLM 0.31.0 (2 GiB Gluon bound), DCP routes included",
    "vllm==0.31.0 rocm_aiter_mla.py (md5 dc21e273), L657, L1360, L1727, L1756",
    Features(
        causal=True,
        kv_bound=True,
        triton_verify=False,
        v_scale_fix=False,
        reorder_batch_threshold=reorder_batch_threshold_031,
        dcp_route_enum=True,
        non_causal_dcp=True,
    ),
)
