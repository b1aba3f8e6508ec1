"""z3 and brute force agree on every (revision, registry, invariant).

The numpy interpretation sweeps every valid shape of the bounded box (heads
1..256, qlen 1..32, k 0..15, every enum value, DCP 1/2/4/8, requests 1/2/32,
KV bytes on both sides of 2 GiB).  The prover restricted to the same box must
report exactly the same counterexample classes with the same smallest
(heads, qlen, k) in each, and an unbounded PROVED must have no violation in
the box.  A disagreement means one of the two interpretations is wrong.
"""

from __future__ import annotations

import pytest

from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS
from spec.proof.bruteforce import sweep
from spec.proof.invariants import INVARIANTS
from spec.proof.prover import PROVED, check


def _key(view: dict) -> tuple:
    return tuple(sorted(view.items()))


@pytest.mark.slow
@pytest.mark.parametrize("registry_id", REGISTRY_IDS)
@pytest.mark.parametrize("revision_id", list(REVISIONS))
def test_z3_and_brute_force_agree(revision_id, registry_id):
    box = sweep(revision_id, registry_id, INVARIANTS)
    assert box.valid > 100_000  # the box is not vacuous
    for inv in INVARIANTS:
        brute = {_key(dict(k)): v for k, v in box.classes[inv.id].items()}
        boxed = check(revision_id, registry_id, inv, within_box=True)
        assert boxed.complete, boxed.reason
        z3_classes = {
            _key(c.view): (c.shape.num_heads, c.shape.max_qo_len, c.shape.num_spec_tokens)
            for c in boxed.counterexamples
        }
        assert z3_classes == brute, inv.id
        unbounded = check(revision_id, registry_id, inv)
        if unbounded.verdict == PROVED:
            assert not brute, inv.id
        else:
            assert set(brute) <= {_key(c.view) for c in unbounded.counterexamples}, inv.id
