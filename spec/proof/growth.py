"""Violations an edit adds inside classes its baseline already has.

A class is identified by its view values and the route of its smallest counterexample
(:mod:`spec.proof.classes`), so an edit that only sends further shapes into a class the baseline had adds
no NEW class.  Measured: 0.34.0 with the persistent schedule gated by head count alone (the ``not causal``
operand dropped) sends non-causal bf16 verify of 1-15 heads at qlen 5-16 on gfx950 from asm_persistent
to asm_nonpersistent, where no kernel serves it; the baseline's kernel-exists already has that no-kernel
class at other shapes, so class by class check said nothing.

This asks z3 the question itself, per registry and invariant: is there a shape the file's gates accept
and violate the invariant at, where the baseline's gates refuse the shape or hold it?  Both revisions'
decisions share the prover's shape variables, and one incremental solver asks first whether any
invariant grows at all (the usual answer for a behaviour-preserving edit: unsat, in hundredths of a
second), then which.  The least such shape (:func:`spec.proof.prover.canonical_model`) is run again
through both revisions' Python interpretation, as every counterexample is; a z3 timeout is UNKNOWN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3

from mla_model.decision import decide
from mla_model.registry import load_registry
from mla_model.revisions.base import Revision
from mla_model.shape import Shape
from spec.proof.invariants import Invariant
from spec.proof.prover import ProverDisagreement, canonical_model, problem
from spec.proof.terms import as_z3
from spec.proof.verdict import DEFAULT_TIMEOUT_MS


@dataclass(frozen=True)
class Growth:
    """One invariant the file violates at a shape where its baseline does not: the least such shape, the
    file's route and what breaks there, and what the baseline does with the shape.  ``unknown``: z3's
    reason where it could not answer (then nothing else is set)."""

    registry: str
    invariant: str
    shape: Shape | None = None
    route: dict[str, Any] | None = None
    detail: str = ""
    baseline: str = ""
    unknown: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.unknown:
            return {"unknown": self.unknown}
        return {
            "shape": self.shape.to_json() if self.shape else None,
            "route": self.route,
            "detail": self.detail,
            "baseline": self.baseline,
        }


def growth(
    revision: Revision,
    baseline: Revision,
    registry_id: str,
    invariants: list[Invariant],
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> dict[str, Growth]:
    """Per invariant of ``invariants`` that ``revision`` violates where ``baseline`` does not (with
    ``registry_id``'s AITER): its :class:`Growth`.  Invariants that grow nowhere are left out."""
    registry = load_registry(registry_id)
    p, b = problem(revision, registry), problem(baseline, registry)
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*p.constraints)
    baseline_accepts = z3.And(*b.constraints)
    grows = {
        inv.id: z3.And(
            z3.Not(as_z3(inv.holds(p.decision))),
            z3.Not(z3.And(baseline_accepts, z3.Not(as_z3(inv.holds(b.decision))))),
        )
        for inv in invariants
    }
    by_id = {inv.id: inv for inv in invariants}
    answer = solver.check(z3.Or(*grows.values()))
    if answer == z3.unsat:
        return {}
    if answer == z3.unknown:
        reason = f"z3: {solver.reason_unknown()}"
        return {i: Growth(registry_id, i, unknown=reason) for i in grows}
    out: dict[str, Growth] = {}
    for inv_id, grown in grows.items():
        solver.push()
        try:
            solver.add(grown)
            answer = solver.check()
            if answer == z3.unsat:
                continue
            model = canonical_model(solver, p.symbolic.variables) if answer == z3.sat else None
            if model is None:
                out[inv_id] = Growth(registry_id, inv_id, unknown=f"z3: {solver.reason_unknown()}")
                continue
            out[inv_id] = _confirmed(revision, baseline, registry, by_id[inv_id], p.symbolic.to_shape(model))
        finally:
            solver.pop()
    return out


def _confirmed(revision: Revision, baseline: Revision, registry: Any, inv: Invariant, shape: Shape) -> Growth:
    """The witness run again through both revisions' Python interpretation: the file must accept and
    violate it, the baseline refuse or hold it (else z3 and the interpretation disagree: an error)."""
    where = f"{revision.id}/{registry.id}/{inv.id}: z3's new violation {shape}"
    broken = [name for name, ok in revision.validity(shape, registry) if not ok]
    d = decide(revision, registry, shape)
    if broken or inv.holds(d):
        raise ProverDisagreement(f"{where} is {'invalid' if broken else 'no violation'} when run")
    refused = [name for name, ok in baseline.validity(shape, registry) if not ok]
    if refused:
        was = f"{baseline.id} refuses the shape ({'; '.join(refused)})"
    elif inv.holds(decide(baseline, registry, shape)):
        was = f"{baseline.id} holds there"
    else:
        raise ProverDisagreement(f"{where} is violated by {baseline.id} too when run")
    return Growth(registry.id, inv.id, shape, d.route.to_json(), inv.describe(d, registry), was)


def with_growth(
    outcomes: list[Any], revisions: dict[str, Revision], baselines: dict[str, Revision], timeout_ms: int
) -> list[Any]:
    """``outcomes`` with :attr:`~spec.proof.classes.BaselineOutcome.grown` set where a VIOLATED result of a
    revision in ``revisions`` adds no NEW class but violates shapes its baseline (``baselines``, by the
    revision's id) does not."""
    from dataclasses import replace

    from spec.proof.classes import BaselineOutcome
    from spec.proof.invariants import INVARIANT_BY_ID
    from spec.proof.verdict import VIOLATED

    asked: dict[tuple[str, str], list[int]] = {}
    for n, o in enumerate(outcomes):
        r = o.result
        if isinstance(o, BaselineOutcome) and r.verdict == VIOLATED and not o.new and r.revision in baselines:
            asked.setdefault((r.revision, r.registry), []).append(n)
    out = list(outcomes)
    for (rev_id, registry_id), positions in asked.items():
        invariants = [INVARIANT_BY_ID[outcomes[n].result.invariant] for n in positions]
        grown = growth(revisions[rev_id], baselines[rev_id], registry_id, invariants, timeout_ms)
        for n in positions:
            g = grown.get(outcomes[n].result.invariant)
            if g is not None:
                out[n] = replace(outcomes[n], grown=g)
    return out
