"""The prover: PROVED, VIOLATED (with counterexample classes) or UNKNOWN.

For one (revision, registry, invariant) the question is whether some shape
that the engine accepts (the validity rules) breaks the invariant.  z3 answers
over unbounded integers:

* unsat: PROVED.
* sat: VIOLATED.  Counterexamples are then enumerated as distinct classes
  (blocking clauses projected on the class view, see :mod:`spec.proof.views`), and
  within each class a lexicographic descent finds the smallest heads, then qlen, then
  speculative tokens (MINIMISE_ORDER), then Shape defaults for the rest.  Every
  counterexample is re-executed through the plain Python interpretation before it is
  reported; a disagreement is a bug in mla-spec and raises :class:`ProverDisagreement`.
* unknown (timeout, or the solver gives up): UNKNOWN.  Never a pass.

How it stays fast (docs/reference/benchmarks.md): one incremental solver per
(revision, registry) for all its invariants (:func:`check_many`); the class view's
terms are named once per invariant, so a class and its blocking clause read only
those names; classes that a known smallest counterexample (of another invariant or
registry) is in are found from that shape first, and one call proves nothing in the
class comes before it (:func:`_least_from`), so the output is the same with or
without them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import z3

from mla_model.decision import Decision, decide
from mla_model.failures import symptom_of
from mla_model.logic import EnumTerm, Term, all_of, any_of, built_once, not_
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
from spec.proof.terms import SymbolicShape, as_z3, box_constraints, shape_pins, symbolic_shape
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


def _named(solver: z3.Solver, view: dict[str, Term]) -> dict[str, Term]:
    """The class view with each term named by a constant the solver defines as that term.

    A class and its blocking clause then read only those constants, so what z3 builds for the view's
    terms is built once per invariant, not again inside each class's push/pop (terms first met inside a
    scope are dropped on its pop and built again on the next)."""
    named: dict[str, Term] = {}
    for name, term in view.items():
        if isinstance(term, EnumTerm):
            const = z3.Int(f"view!{name}")
            solver.add(const == term.term)
            named[name] = EnumTerm(term.values, const)
        else:
            const = z3.Bool(f"view!{name}")
            solver.add(const == as_z3(term))
            named[name] = const
    return named


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
            terms.append(_compare(term.term, "==", term.code(value)))
        else:
            terms.append(as_z3(term) == z3.BoolVal(value))
    return all_of(*terms)


def _minimal_model(p: Problem, s: z3.Solver, class_is: Any, model: z3.ModelRef) -> z3.ModelRef | None:
    """The smallest counterexample of a class: lexicographic descent on MINIMISE_ORDER.

    Each objective is searched with an incremental solver and then pinned, which
    is several times faster here than z3's Optimize.  Remaining fields then take
    their defaults where the class allows it (fewest surprises for a reader), else
    their least value, so the same problem gives the same counterexample every run.
    ``s`` holds the constraints and the violation; the class and the pins live inside a push/pop.
    The descent starts from ``model``, a model of the class.
    """
    v = p.symbolic.variables
    s.push()
    try:
        s.add(class_is)
        objectives = [(v[name], FIELD_BY_NAME[name].minimum) for name in MINIMISE_ORDER]
        least = minimise_in_order(s, objectives, model)
        if least is not None:
            least = canonical_model(s, v, MINIMISE_ORDER, least)
        return least
    finally:
        s.pop()


def _least_from(p: Problem, s: z3.Solver, held: Any, class_is: Any, hint: Shape) -> z3.ModelRef | None:
    """The smallest counterexample of a class, given a shape the Python interpretation places in it (the
    smallest counterexample of another invariant or registry, say): None when z3 does not.

    ``held`` is what places a shape in the class (the constraints, the violation and the class's view
    values, as one term): z3 evaluates it on the hint's values.  Then one call asks for a shape of the
    class before the hint in the descent's order (:func:`_before`).  Where there is none, the hint is the
    least, the shape the descent would end on; otherwise the descent starts from the earlier shape z3
    gave.  Either way the shape returned is one z3 proved least.
    """
    given = z3.Model()
    for _, var, value in shape_pins(p.symbolic.variables, hint):
        given.update_value(var, value)
    if not z3.is_true(given.eval(held, model_completion=True)):
        return None
    answer = s.check(class_is, _before(p.symbolic.variables, hint))
    if answer == z3.unsat:
        return given
    if answer == z3.unknown:
        return None
    return _minimal_model(p, s, class_is, s.model())


def _before(variables: dict[str, Any], shape: Shape) -> Any:
    """The z3 condition that a shape comes before ``shape`` in the descent's order: its
    :func:`_python_rank` vector is lexicographically smaller.  Per field, "rank below" and "rank equal" as
    z3 terms: a MINIMISE_ORDER field by its value (an enum by its code), any other by 0 at its Shape
    default (``_wanted``) and 1 + its distance from its least value otherwise.  Built with the logic
    vocabulary, which builds each term once (hints share most of their fields' ranks)."""
    rank = _python_rank(shape)
    wanted, _ = _wanted(variables)
    at_default = {spec.name: term for spec, term in zip(FIELDS, wanted)}
    pairs: list[tuple[Any, Any]] = []
    for name, k in zip(MINIMISE_ORDER, rank):
        var = variables[name]
        pairs.append((_compare(var, "<", k), _compare(var, "==", k)))
    others = [spec for spec in FIELDS if spec.name not in MINIMISE_ORDER]
    for spec, k in zip(others, rank[len(MINIMISE_ORDER) :]):
        default = at_default[spec.name]
        if k == 0:
            pairs.append((False, default))
        elif spec.kind == "bool":
            pairs.append((default, not_(default)))
        else:
            var, value = variables[spec.name], k - 1 + (spec.minimum if spec.kind == "int" else 0)
            below = any_of(default, _compare(var, "<", value))
            pairs.append((below, all_of(not_(default), _compare(var, "==", value))))
    before: Any = False
    for below, equal in reversed(pairs):
        before = any_of(below, all_of(equal, before))
    return before


def _compare(term: Any, op: str, value: int) -> Any:
    """``term < value``, ``term <= value`` or ``term == value`` for a z3 integer term, built once (the
    descents ask the same bounds of the same fields again and again)."""
    return built_once(
        op,
        (term,),
        value,
        lambda: term < value if op == "<" else term <= value if op == "<=" else term == value,
    )


@lru_cache(maxsize=4096)
def _python_rank(shape: Shape) -> tuple[int, ...]:
    """The order the descent of :func:`_minimal_model` finds the least shape in, as a vector whose
    lexicographic least is that shape: each MINIMISE_ORDER field, then per other field (Shape order)
    0 for its default and 1 + its distance from its least value otherwise.  Used to pick the best hint."""
    data = shape.to_json()
    defaults = Shape().to_json()
    defaults["q_dtype"] = "fp8" if shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES else "bf16"
    defaults["gluon_build"] = shape.arch == "gfx950"

    def code(name: str, value: Any) -> int:
        spec = FIELD_BY_NAME[name]
        return spec.values.index(value) if spec.kind == "enum" else int(value)

    rank = [code(name, data[name]) for name in MINIMISE_ORDER]
    for spec in FIELDS:
        if spec.name in MINIMISE_ORDER:
            continue
        value = data[spec.name]
        lo = 0 if spec.kind != "int" else spec.minimum
        rank.append(
            0
            if value == defaults[spec.name]
            else 1
            if spec.kind == "bool"
            else 1 + code(spec.name, value) - lo
        )
    return tuple(rank)


_WANTED: dict[int, tuple[dict[str, Any], list[Any], list[Any]]] = {}


def _wanted(variables: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Per field, in FIELDS order: the z3 condition that it holds its Shape default, and for a boolean
    field the condition that it does not (built once per variable set)."""
    cached = _WANTED.get(id(variables))
    if cached is not None and cached[0] is variables:
        return cached[1], cached[2]
    defaults = Shape().to_json()
    fp8_cache = z3.Or(*[variables["kv_cache_dtype"] == KV_CACHE_DTYPES.index(d) for d in FP8_KV_CACHE_DTYPES])
    derived = {  # the defaults that depend on other fields (Shape.__post_init__)
        "q_dtype": z3.If(fp8_cache, Q_DTYPES.index("fp8"), Q_DTYPES.index("bf16")),
        "gluon_build": variables["arch"] == ARCHS.index("gfx950"),
    }
    wanted = [
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
    other = [
        (
            variables[spec.name] == z3.Not(derived[spec.name])
            if spec.name in derived
            else variables[spec.name] == (not defaults[spec.name])
        )
        if spec.kind == "bool"
        else None
        for spec in FIELDS
    ]
    _WANTED[id(variables)] = (variables, wanted, other)
    return wanted, other


def canonical_model(
    s: z3.Solver, variables: dict[str, Any], fixed: tuple[str, ...] = (), model: z3.ModelRef | None = None
) -> z3.ModelRef | None:
    """Pin every field still free to one value: the Shape default where allowed, else the least.

    After this the model is unique, so the same problem gives the same shapes on every run and machine.
    Fields are taken in the Shape's order, each against the pins before it.  ``fixed`` names fields the
    caller has already pinned to one value (they cost no solver call); ``model``, if given, is a model
    of what ``s`` holds.  The pins stay on ``s``.

    The fields left are asked all at once: where their defaults fit together, one call pins them all
    (taken one by one, each would fit too).  Where they do not, z3's unsat core bounds the first field
    that misses its default: the fields before the core's last one are asked together, and when they
    fit, they are pinned and that field is the first miss (else the smaller core bounds it again).
    """
    wanted_all, other_all = _wanted(variables)
    rest = [(i, spec) for i, spec in enumerate(FIELDS) if spec.name not in fixed]
    while rest:
        asked = [wanted_all[i] for i, _ in rest]
        answer = s.check(*asked)
        if answer == z3.sat:
            model = s.model()
            s.add(*asked)
            return model
        if answer == z3.unknown:
            return None
        miss = _last_in_core(s, asked)
        while miss > 0:  # do the defaults before the core's last field fit together?
            asked = asked[:miss]
            answer = s.check(*asked)
            if answer == z3.unknown:
                return None
            if answer == z3.sat:
                model = s.model()
                s.add(*asked)
                rest = rest[miss:]
                break
            miss = _last_in_core(s, asked)
        if miss < 0:  # unsat without any default: nothing fits the pins at all
            return None
        (i, spec), rest = rest[0], rest[1:]  # the first field whose default does not fit
        if spec.kind == "bool":
            s.add(other_all[i])  # a model of the pins before still holds: they exclude the default
            continue
        if model is None:
            if s.check() != z3.sat:
                return None
            model = s.model()
        lo = 0 if spec.kind == "enum" else spec.minimum
        model = minimise_in_order(s, [(variables[spec.name], lo)], model)
        if model is None:
            return None
    if model is None:
        return s.model() if s.check() == z3.sat else None
    return model


def _last_in_core(s: z3.Solver, asked: list[Any]) -> int:
    """After an unsat check with ``asked`` as assumptions: the position of the last one in z3's core
    (-1 when the core is empty: what ``s`` holds is unsat on its own)."""
    core = {c.get_id() for c in s.unsat_core()}
    return max((n for n, a in enumerate(asked) if a.get_id() in core), default=-1)


def minimise_in_order(
    s: z3.Solver, objectives: list[tuple[Any, int]], model: z3.ModelRef | None = None
) -> z3.ModelRef | None:
    """Pin each (term, lower bound) in turn to its least value, on a satisfiable solver.

    ``model`` is a model of what ``s`` holds (default: the solver's last model).  The least value of a
    term is the least ``v`` between the bound and the model's value for which ``term <= v`` is
    satisfiable.  The search asks one below the model's value first (the model is often least already),
    then the bound, then bisects; after each satisfiable answer the new model's value is the new upper
    end.  Each question is an assumption, so what z3 learnt stays.  The pins stay on ``s``; the last
    model is returned (None when z3 answers unknown).
    """
    model = s.model() if model is None else model
    for term, lo in objectives:
        hi = model.eval(term, model_completion=True).as_long()
        asked = 0
        while lo < hi:
            mid = hi - 1 if asked == 0 else lo if asked == 1 else (lo + hi) // 2
            asked += 1
            answer = s.check(_compare(term, "<=", mid))
            if answer == z3.sat:
                model = s.model()
                hi = model.eval(term, model_completion=True).as_long()
            elif answer == z3.unsat:
                lo = mid + 1
            else:
                return None
        s.add(_compare(term, "==", hi))
    return model


def _hints(p: Problem, inv: Invariant, pool: list[Shape]) -> dict[tuple, Shape]:
    """Per class of ``inv`` (its view key), the first in :func:`_python_rank` order of the shapes of ``pool``
    that the Python interpretation finds valid, violating and in that class."""
    best: dict[tuple, tuple[tuple[int, ...], Shape]] = {}
    for shape in pool:
        d, broken = _concrete(p.revision, p.registry, shape)
        if broken or inv.holds(d):
            continue
        key = tuple(view_terms(d, inv.view).items())
        rank = _python_rank(shape)
        if key not in best or rank < best[key][0]:
            best[key] = (rank, shape)
    return {key: shape for key, (_, shape) in best.items()}


_CONCRETE: dict[tuple[int, int, Shape], tuple[Revision, Registry, Decision, tuple[str, ...]]] = {}


def _concrete(revision: Revision, registry: Registry, shape: Shape) -> tuple[Decision, tuple[str, ...]]:
    """One shape through the Python interpretation: its decision and the validity rules it breaks (the
    same shape is often the smallest counterexample of several invariants).  Kept by the identity of the
    revision and registry, whose hash would walk every kernel row."""
    key = (id(revision), id(registry), shape)
    hit = _CONCRETE.get(key)
    if hit is not None and hit[0] is revision and hit[1] is registry:
        return hit[2], hit[3]
    broken = tuple(name for name, ok in revision.validity(shape, registry) if not ok)
    d = decide(revision, registry, shape)
    if len(_CONCRETE) >= 4096:
        _CONCRETE.clear()
    _CONCRETE[key] = (revision, registry, d, broken)
    return d, broken


def _confirm(p: Problem, inv: Invariant, shape: Shape) -> Decision:
    """Re-run a counterexample through the Python interpretation; it must be valid and violating."""
    d, broken = _concrete(p.revision, p.registry, shape)
    if broken:
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
    return check_many(revision, registry, [inv], max_classes, timeout_ms, within_box)[0]


def check_many(
    revision: str | Revision,
    registry: str | Registry,
    invariants: Iterable[Invariant],
    max_classes: int | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    within_box: bool = False,
    hints: Iterable[Shape] = (),
) -> list[CheckResult]:
    """Prove or refute each invariant for one gate revision against one AITER registry, in order.

    One incremental solver holds the pair's constraints; each invariant's violation is asserted inside a
    push/pop, so z3 keeps what it learnt about the decision from one invariant to the next.  Every
    solver call has ``timeout_ms``; a call that times out makes the verdict UNKNOWN (or the classes
    incomplete), never PROVED.

    ``hints`` are shapes to try first as a class's smallest counterexample (the smallest counterexamples
    of another registry, say), with every smallest counterexample found here: z3 proves a hint least or
    the descent runs as without it, so they change how long a check takes, never what it reports.
    """
    start = time.perf_counter()
    p = problem(revision, registry)
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*p.constraints)
    if within_box:
        solver.add(*box_constraints(p.symbolic.variables))
    valid = all_of(*solver.assertions())  # what every shape checked must satisfy, as one term
    results = []
    pool = list(dict.fromkeys(hints))
    for inv in invariants:
        solver.push()
        try:
            result = _check_one(p, solver, valid, inv, max_classes, pool)
        finally:
            solver.pop()
        result.seconds = time.perf_counter() - start
        start = time.perf_counter()
        results.append(result)
    return results


def _check_one(
    p: Problem, solver: z3.Solver, valid: Any, inv: Invariant, max_classes: int | None, pool: list[Shape]
) -> CheckResult:
    """One invariant on a solver that holds the pair's constraints (``valid``, as one term): enumerate the
    classes of shapes that break it (blocking each class's view), and minimise each class as it is found,
    trying first the best shape of ``pool`` in it (each smallest counterexample found joins ``pool``)."""
    violation = z3.Not(as_z3(inv.holds(p.decision)))
    solver.add(violation)
    held = all_of(valid, violation)
    terms = view_terms(p.decision, inv.view)
    view = _named(solver, terms)
    hints = _hints(p, inv, pool)
    result = CheckResult(p.revision.id, p.registry.id, inv.id, PROVED, 0.0)
    unminimised = 0

    def found(key: tuple, model: z3.ModelRef) -> None:
        shape = p.symbolic.to_shape(model)
        d = _confirm(p, inv, shape)
        if shape not in hints.values():
            pool.append(shape)
        result.counterexamples.append(
            Counterexample(
                shape,
                d.route.to_json(),
                inv.describe(d, p.registry),
                dict(key),
                symptom_of(d, p.registry).to_json(),
            )
        )

    # The classes some pool shape is in first: the descent starts from that shape, and the class
    # counts once z3 has a model of it (a hint z3 does not place there is dropped; the open search
    # below finds its class, if there is one).
    for key, hint in hints.items():
        if max_classes is not None and result.classes >= max_classes:
            break
        class_is = _view_equals(view, key)
        model = _least_from(p, solver, all_of(held, _view_equals(terms, key)), class_is, hint)
        if model is not None:
            result.classes += 1
            solver.add(z3.Not(class_is))
            found(key, model)
    # Then an open search, until no class is left.
    while True:
        answer = solver.check()
        if answer == z3.unsat:
            break
        if answer == z3.unknown:
            result.complete = False
            result.reason = f"z3: {solver.reason_unknown()}"
            if not result.classes:
                result.verdict = UNKNOWN
            break
        if max_classes is not None and result.classes >= max_classes:
            result.complete = False  # at least one more class exists
            break
        model = solver.model()
        key = _view_key(view, model)
        result.classes += 1
        class_is = _view_equals(view, key)
        model = _minimal_model(p, solver, class_is, model)
        solver.add(z3.Not(class_is))
        if model is None:
            unminimised += 1
        else:
            found(key, model)
    if result.classes:
        result.verdict = VIOLATED
    if unminimised:
        result.complete = False
        result.reason = "z3 could not minimise a counterexample within the time limit"
    result.counterexamples.sort(
        key=lambda c: (
            c.shape.num_heads,
            c.shape.max_qo_len,
            c.shape.num_spec_tokens,
            sorted(c.view.items(), key=str),
        )
    )
    return result
