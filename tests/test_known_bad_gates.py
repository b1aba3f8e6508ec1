"""Every invariant ships with a known-bad gate that must fail it (tlaplus/Examples' manifest idea).

Several invariants hold on every shipped revision, so without these gates
nothing would show they can fail at all.  Each known-bad gate is a one-line
edit to a shipped revision of the kind a maintainer could make; the prover
must report it VIOLATED, while the unedited revision stays as it is.
"""

from __future__ import annotations

import dataclasses

import pytest

from mla_model.logic import choose, eq
from mla_model.revisions import dcp_era, main_pre_51011, vllm_027, vllm_028, vllm_031, vllm_034
from mla_model.revisions.base import whitelist_mtp_decode_qlen
from mla_model.shape import KV_CACHE_DTYPES
from spec.proof.invariants import INVARIANT_BY_ID, INVARIANTS
from spec.proof.prover import PROVED, VIOLATED, check

_verify_028 = vllm_028.use_gluon_verify
_verify_dcp = dcp_era.use_gluon_verify
_dcp_route = dcp_era.dcp_route

# invariant -> (module, attribute, replacement[, the revision's module when the gate lives in a shared
# module]): the one-line edit that breaks it
KNOWN_BAD = {
    # A warning: every revision that builds persistent metadata for gfx950 bf16 batches already hits it.
    "persistent-metadata-used": (vllm_028, "ASM_PADDED_MAX_PS_QLEN", 8),
    "no-known-wrong-kernel": (
        dcp_era,
        "_asm_causal_verify_unsupported",  # 0.34 without its CDNA3 Triton verify: aiter #5679's kernel
        lambda *args: False,
        vllm_034,
    ),
    "kv-scale-applied": (
        dcp_era,
        "fp8_v_scale_fix",  # 0.34 without its V-scale correction: aiter #6732's kernel left as it is
        lambda *args: False,
        vllm_034,
    ),
    "gluon-kv-in-bounds": (
        dcp_era,
        "_gluon_kv_cache_in_bounds",  # 0.31's 2 GiB guard dropped
        lambda f, kv_cache_bytes: True,
        vllm_031,
    ),
    "fp8-never-reaches-gluon": (
        vllm_028,
        "use_gluon_decode",  # the #51011 dtype guard dropped
        lambda h, q, dt, s: main_pre_51011.use_gluon_decode(h, q, s),
    ),
    "gluon-fp8-batch-one": (
        vllm_028,
        "use_gluon_decode",
        lambda h, q, dt, s: main_pre_51011.use_gluon_decode(h, q, s),
    ),
    "gluon-only-where-built": (vllm_028, "on_gfx950", lambda s: True),  # arch guard dropped
    "kernel-exists": (vllm_028, "ASM_PADDED_MAX_PS_QLEN", 8),  # off by one past the bf16 qlen-4 kernels
    "total": (vllm_028, "ASM_PADDED_MAX_PS_QLEN", 8),
    "block-n-key-exists": (
        vllm_028,
        "reorder_batch_threshold",
        whitelist_mtp_decode_qlen,
    ),  # whitelist restored
    "metadata-covers-qlen": (vllm_028, "reorder_batch_threshold", whitelist_mtp_decode_qlen),
    "builder-impl-agree": (
        vllm_028,
        "builder_kv_cache_dtype",  # builder only normalises the "fp8" spelling
        lambda s: choose(KV_CACHE_DTYPES, [(eq(s.kv_cache_dtype, "fp8"), "fp8")], "auto"),
    ),
    "decode-verify-disjoint": (
        vllm_028,
        "use_gluon_verify",  # verify forgets its qlen > 1 test
        lambda h, q, dt, s: _verify_028(h, 2, dt, s),
    ),
    "head-padding-round-trips": (
        vllm_027,
        "use_gluon_verify",  # 0.27 sends small-head verify to ASM
        lambda h, q: False,
    ),
    # DCP (0.34): each already violated where the bundled tables lack LSE kernels or Gluon decode ignores DCP
    "dcp-lse-kernel": (dcp_era, "_asm_dcp_verify_heads", lambda h: h, vllm_034),  # cprr heads not padded
    "dcp-returns-lse": (  # Gluon verify forgets its dcp_world_size <= 1 test
        dcp_era,
        "use_gluon_verify",
        lambda f, h, q, dt, dcp, causal, kv, s: _verify_dcp(f, h, q, dt, 1, causal, kv, s),
        vllm_034,
    ),
    "dcp-verify-routed": (dcp_era, "AITER_HAS_SEGMENTED_MLA", False, vllm_034),  # no segmented MLA: qlen 2
    "dcp-causal-window": (dcp_era, "dcp_route", lambda f, s, c, causal: ("plain", False), vllm_034),
    "dcp-verify-supported": (dcp_era, "_segmented_mla_fits_lds", lambda s, h: True, vllm_034),  # 0.31's gate
    "non-causal-not-causal-only": (  # the DCP route ignores the block's causality
        dcp_era,
        "dcp_route",
        lambda f, s, c, causal: _dcp_route(f, s, c, True),
        vllm_034,
    ),
}


# Non-causal blocks are in scope only where AITER's lookup takes causal= (aiter 0.1.20 on).
KNOWN_BAD_REGISTRY = {"non-causal-not-causal-only": "aiter-0.1.20"}


def test_every_invariant_has_a_known_bad_gate():
    assert set(KNOWN_BAD) == {inv.id for inv in INVARIANTS}


@pytest.mark.parametrize("invariant_id", sorted(KNOWN_BAD))
def test_known_bad_gate_is_violated(invariant_id, monkeypatch):
    module, attribute, replacement, *owner = KNOWN_BAD[invariant_id]
    monkeypatch.setattr(module, attribute, replacement)
    bad = dataclasses.replace((owner or [module])[0].REVISION, id=f"known-bad:{invariant_id}")
    registry = KNOWN_BAD_REGISTRY.get(invariant_id, "aiter-0.1.19")
    result = check(bad, registry, INVARIANT_BY_ID[invariant_id], max_classes=2)
    assert result.verdict == VIOLATED, invariant_id


@pytest.mark.parametrize("invariant_id", sorted(i for i in KNOWN_BAD if INVARIANT_BY_ID[i].pr_51011))
def test_the_unedited_revision_proves_it(invariant_id):
    module = KNOWN_BAD[invariant_id][0]
    assert check(module.REVISION, "aiter-0.1.19", INVARIANT_BY_ID[invariant_id]).verdict == PROVED
