"""The prover: PROVED, VIOLATED (with counterexample classes) or UNKNOWN.

For one (revision, registry, invariant) the question is whether some shape
that the engine accepts (the validity rules) breaks the invariant.  z3 answers
over unbounded integers:

* unsat: PROVED.
* sat: VIOLATED.  Counterexamples are then enumerated as distinct classes
  (blocking clauses projected on the class view, see :mod:`spec.proof.views`), and
  within each class z3's Optimize picks the smallest heads, then qlen, then
  speculative tokens.  Every counterexample is re-executed through the plain
  Python interpretation before it is reported; a disagreement is a bug in
  mla-spec and raises :class:`ProverDisagreement`.
* unknown (timeout, or the solver gives up): UNKNOWN.  Never a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import z3

from mla_model.decision import Decision, decide
from mla_model.failures import symptom_of
from mla_model.logic import EnumTerm, Term
from mla_model.registry import Registry, load_registry
from mla_model.revisions import get_revision
from mla_model.revisions.base import Revision
from mla_model.shape import (
    ARCHS,
    FIELD_BY_NAME,
    FIELDS,
    FP8_KV_CACHE_DTYPES,
    KV_CACHE_DTYPES,
    Q_DTYPES,
    Shape,
)
from spec.proof.invariants import Invariant
from spec.proof.terms import SymbolicShape, as_z3, box_constraints, symbolic_shape
from spec.proof.verdict import DEFAULT_TIMEOUT_MS, PROVED, UNKNOWN, VIOLATED, Verdict
from spec.proof.views import view_terms

# Within a class, minimise these in order (the smallest shape a maintainer can read).
# Enums last: their first spelling within the class (fp8 before fp8_e4m3, mtp before deepseek_mtp).
SMALLEST_FIRST = (
    "num_heads",
    "max_qo_len",
    "num_spec_tokens",
    "num_reqs",
    "dcp_world_size",
)  # the int fields
MINIMISE_ORDER = (*SMALLEST_FIRST, "kv_cache_dtype", "spec_method", "asm_padding_mode")


class ProverDisagreement(AssertionError):
    """z3 produced a counterexample that the Python interpretation does not confirm."""


@dataclass(frozen=True)
class Counterexample:
    shape: Shape
    route: dict[str, Any]
    symptom: str
    view: dict[str, Any]
    symptom_kind: dict[str, Any] = field(default_factory=dict)  # mla_model.failures.Symptom.to_json

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": self.shape.to_json(),
            "route": self.route,
            "symptom": self.symptom,
            **self.symptom_kind,
        }


@dataclass
class CheckResult:
    revision: str
    registry: str
    invariant: str
    verdict: Verdict
    seconds: float
    counterexamples: list[Counterexample] = field(default_factory=list)
    classes: int = 0  # counterexample classes found
    complete: bool = True  # every class was enumerated (False when --max-classes cut it short)
    reason: str = ""  # why UNKNOWN

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "registry": self.registry,
            "invariant": self.invariant,
            "verdict": self.verdict,
            "seconds": round(self.seconds, 4),
            "class_count": self.classes,
            "complete": self.complete,
            **({"reason": self.reason} if self.reason else {}),
            "counterexamples": [c.to_json() for c in self.counterexamples],
        }


@dataclass(frozen=True)
class Problem:
    """The symbolic decision of one (revision, registry), shared by all invariants."""

    revision: Revision
    registry: Registry
    symbolic: SymbolicShape
    decision: Decision
    constraints: tuple[Any, ...]  # field domains and validity rules


def _resolve(revision: str | Revision, registry: str | Registry) -> tuple[Revision, Registry]:
    return (
        get_revision(revision) if isinstance(revision, str) else revision,
        load_registry(registry) if isinstance(registry, str) else registry,
    )


@cache
def _problem(revision: Revision, registry: Registry) -> Problem:
    sym = symbolic_shape()
    d = decide(revision, registry, sym.view)
    validity = [term for _, term in revision.validity(sym.view, registry)]
    return Problem(revision, registry, sym, d, tuple(sym.domain + [as_z3(t) for t in validity]))


def problem(revision: str | Revision, registry: str | Registry) -> Problem:
    """The symbolic decision of a revision (id or object) against a registry (id or object)."""
    return _problem(*_resolve(revision, registry))


def _view_key(view: dict[str, Term], model: z3.ModelRef) -> tuple:
    key = []
    for name, term in view.items():
        value = model.eval(as_z3(term), model_completion=True)
        if isinstance(term, EnumTerm):
            key.append((name, term.values[value.as_long()]))
        else:
            key.append((name, z3.is_true(value)))
    return tuple(key)


def _view_equals(view: dict[str, Term], key: tuple) -> Term:
    terms = []
    for name, value in key:
        term = view[name]
        if isinstance(term, EnumTerm):
            terms.append(term.term == term.code(value))
        else:
            terms.append(as_z3(term) == z3.BoolVal(value))
    return z3.And(*terms)


def _minimal_model(p: Problem, base: z3.Solver, class_is: Term) -> z3.ModelRef | None:
    """The smallest counterexample of a class: lexicographic descent on MINIMISE_ORDER.

    Each objective is bisected with an incremental solver and then pinned, which
    is several times faster here than z3's Optimize.  Remaining fields then take
    their defaults where the class allows it (fewest surprises for a reader), else
    their least value, so the same problem gives the same counterexample every run.
    ``base`` holds the constraints and the violation; the class is pinned inside a push/pop.
    """
    s = base
    s.push()
    try:
        s.add(class_is)
        if s.check() != z3.sat:
            return None
        v = p.symbolic.variables
        model = minimise_in_order(s, [(v[name], FIELD_BY_NAME[name].minimum) for name in MINIMISE_ORDER])
        if model is None:
            return None
        return canonical_model(s, v)
    finally:
        s.pop()


def canonical_model(s: z3.Solver, variables: dict[str, Any]) -> z3.ModelRef | None:
    """Pin every field still free to one value: the Shape default where allowed, else the least.

    After this the model is unique, so the same problem gives the same shapes on every run and machine.
    """
    defaults = Shape().to_json()
    fp8_cache = z3.Or(*[variables["kv_cache_dtype"] == KV_CACHE_DTYPES.index(d) for d in FP8_KV_CACHE_DTYPES])
    derived = {  # the defaults that depend on other fields (Shape.__post_init__)
        "q_dtype": z3.If(fp8_cache, Q_DTYPES.index("fp8"), Q_DTYPES.index("bf16")),
        "gluon_build": variables["arch"] == ARCHS.index("gfx950"),
    }
    wanted_all = [
        variables[spec.name]
        == (
            derived[spec.name]
            if spec.name in derived
            else spec.values.index(defaults[spec.name])
            if spec.kind == "enum"
            else defaults[spec.name]
        )
        for spec in FIELDS
    ]
    if s.check(*wanted_all) == z3.sat:  # the common case: every default fits, one call instead of fourteen
        model = s.model()
        s.add(*wanted_all)
        return model
    for spec, wanted in zip(FIELDS, wanted_all):
        var = variables[spec.name]
        default = defaults[spec.name]
        answer = s.check(wanted)
        if answer == z3.unknown:
            return None
        if answer == z3.sat:
            s.add(wanted)
        elif spec.kind == "bool":
            s.add(var == z3.Not(derived[spec.name]) if spec.name in derived else var == (not default))
        else:
            if (
                s.check() != z3.sat
                or minimise_in_order(s, [(var, 0 if spec.kind == "enum" else spec.minimum)]) is None
            ):
                return None
    return s.model() if s.check() == z3.sat else None


def minimise_in_order(s: z3.Solver, objectives: list[tuple[Any, int]]) -> z3.ModelRef | None:
    """Pin each (term, lower bound) in turn to its least value, by bisection on a satisfiable solver.

    The pins stay on ``s``; the last model is returned (None when z3 answers unknown).
    """
    model = s.model()
    for term, lo in objectives:
        hi = model.eval(term, model_completion=True).as_long()
        while lo < hi:
            mid = (lo + hi) // 2
            s.push()
            s.add(term <= mid)
            answer = s.check()
            if answer == z3.sat:
                model = s.model()
                hi = model.eval(term, model_completion=True).as_long()
            s.pop()
            if answer == z3.unknown:
                return None
            if answer == z3.unsat:
                lo = mid + 1
        s.add(term == hi)
    return model


def _confirm(p: Problem, inv: Invariant, shape: Shape) -> Decision:
    """Re-run a counterexample through the Python interpretation; it must be valid and violating."""
    d = decide(p.revision, p.registry, shape)
    if not p.revision.is_valid(shape, p.registry):
        broken = [name for name, ok in p.revision.validity(shape, p.registry) if not ok]
        raise ProverDisagreement(
            f"{p.revision.id}/{p.registry.id}/{inv.id}: z3 counterexample {shape} is invalid ({broken})"
        )
    if inv.holds(d):
        raise ProverDisagreement(
            f"{p.revision.id}/{p.registry.id}/{inv.id}: z3 counterexample {shape} satisfies the invariant"
        )
    return d


def check(
    revision: str | Revision,
    registry: str | Registry,
    inv: Invariant,
    max_classes: int | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    within_box: bool = False,
) -> CheckResult:
    """Prove or refute one invariant for one gate revision against one AITER registry.

    ``within_box`` restricts the search to the brute-force box (for the cross-check).
    """
    start = time.perf_counter()
    p = problem(revision, registry)
    violated = z3.Not(as_z3(inv.holds(p.decision)))
    if within_box:
        violated = z3.And(violated, *box_constraints(p.symbolic.variables))
    view = view_terms(p.decision, inv.view)
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*p.constraints, violated)
    result = CheckResult(p.revision.id, p.registry.id, inv.id, PROVED, 0.0)

    keys: list[tuple] = []
    while True:
        answer = solver.check()
        if answer == z3.unsat:
            break
        if answer == z3.unknown:
            result.complete = False
            result.reason = f"z3: {solver.reason_unknown()}"
            if not keys:
                result.verdict = UNKNOWN
            break
        if max_classes is not None and len(keys) >= max_classes:
            result.complete = False  # at least one more class exists
            break
        key = _view_key(view, solver.model())
        keys.append(key)
        solver.add(z3.Not(_view_equals(view, key)))

    if keys:
        result.verdict = VIOLATED
        result.classes = len(keys)
        base = z3.Solver()
        base.set("timeout", timeout_ms)
        base.add(*p.constraints, violated)
        for key in keys:
            model = _minimal_model(p, base, _view_equals(view, key))
            if model is None:
                result.complete = False
                result.reason = "z3 could not minimise a counterexample within the time limit"
                continue
            shape = p.symbolic.to_shape(model)
            d = _confirm(p, inv, shape)
            result.counterexamples.append(
                Counterexample(
                    shape,
                    d.route.to_json(),
                    inv.describe(d, p.registry),
                    dict(key),
                    symptom_of(d, p.registry).to_json(),
                )
            )
        result.counterexamples.sort(
            key=lambda c: (
                c.shape.num_heads,
                c.shape.max_qo_len,
                c.shape.num_spec_tokens,
                sorted(c.view.items(), key=str),
            )
        )
    result.seconds = time.perf_counter() - start
    return result
