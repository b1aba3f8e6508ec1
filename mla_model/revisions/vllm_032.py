"""Gate revision ``vllm-0.32``: vLLM 0.32.0 (release family d3, 2026-10-18).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.32.0
(105,627 B, md5 a6e0ac30): the gates of 0.31.0 (``use_gluon_decode`` L1805,
``use_gluon_verify`` L1834, the persistent gate L1425, ``_mtp_decode_qlen``
L677), but DCP verify takes the round-robin ASM decode (CPRR) by default:
``VLLM_ROCM_AITER_MLA_DCP_VERIFY`` defaults to ``auto`` (vllm/envs.py L149) and
CPRR is configured unless it says ``segmented`` (L617-625), where 0.31.0 needed
``asm``.  Found by the executed differential (docs/fidelity.md): 0.32.0 had
been held to 0.31's revision, whose DCP verify is segmented.  Threshold as 0.31.
"""

from mla_model.derived import reorder_batch_threshold_031
from mla_model.revisions.dcp_era import Features, make_revision

REVISION = make_revision(
    "vllm-0.32",
    "vLLM 0.32.0 (CPRR DCP verify by default), DCP routes included",
    "vllm==0.32.0 rocm_aiter_mla.py (md5 a6e0ac30), L617-625, L677, L1425, L1805, L1834",
    Features(
        causal=True,
        kv_bound=True,
        triton_verify=False,
        v_scale_fix=False,
        reorder_batch_threshold=reorder_batch_threshold_031,
        dcp_route_enum=True,
        cprr_default=True,
        non_causal_dcp=True,
    ),
)
