"""Edge shapes of a gate revision, found by z3, as test cases (:class:`mla_model.case.Case`).

Three sources, in this order in the output:

* **MC/DC pairs.**  For every decision of the routing (the gates
  ``use_gluon_decode``, ``use_gluon_verify`` and ``use_persistent_metadata``,
  the builder's own verify gate, and forward_mqa's ``path``, ``_mtp_decode_qlen``
  and the head padding) and every atomic condition in it, two valid shapes that
  differ only in the fields the condition reads, on both sides of the condition,
  with a different decision.  Unique-cause first (every other condition of the
  decision unchanged); where the code makes that impossible (``num_heads < 16``
  and ``16 % num_heads == 0`` read the same field), masking MC/DC (the other
  conditions may move).  The pair is the closest one (fields moved by the least)
  and then the smallest shape, so a threshold ``num_heads < 16`` yields 15 and
  16.
* **Counterexamples.**  The smallest shape of every counterexample class of
  every invariant the revision violates (``spec.proof.prover.check``).
* **Thresholds.**  Both sides of each documented threshold on both arches, bf16
  and fp8: 16 heads, 8/12 heads (a divisor of 16 against a non-divisor: the
  two paddings), qlen 1/2 (decode against verify), qlen 4/5
  (``_ASM_PADDED_MAX_PS_QLEN``), qlen at ``_mtp_decode_qlen`` and one past it
  (where the scheduler allows it), qlen at ``reorder_batch_threshold`` for each
  drafter family, batch 1/2/32 and the 2 GiB KV bound.  A pair whose route
  differs is preferred.

Every shape is re-run through the plain Python model before it becomes a case;
a shape z3 found that the model does not confirm raises ProverDisagreement.
Deterministic: the same revision and registry give the same cases in the same
order (z3 is run single-threaded with its default seed, and every shape is
minimised to a unique value).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import z3

from mla_model.case import Case, case_id, case_seed, expected_outcome, expected_route
from mla_model.decision import decide
from mla_model.logic import Term
from mla_model.shape import DCP_WORLD_SIZES, FIELD_BY_NAME, GIB, Shape
from spec.proof.invariants import INVARIANTS
from spec.proof.prover import (
    MINIMISE_ORDER,
    UNKNOWN,
    VIOLATED,
    Problem,
    ProverDisagreement,
    canonical_model,
    check,
    minimise_in_order,
    problem,
)
from spec.proof.terms import (
    SymbolicShape,
    as_z3,
    atoms_of,
    box_constraints,
    describe_atom,
    fields_of,
    shape_pins,
)

# The routing decisions whose conditions MC/DC covers, by Route field (vLLM's names in the comments).
DECISIONS = (
    "use_gluon_decode",  # AiterMLAHelper.use_gluon_decode
    "use_gluon_verify",  # AiterMLAHelper.use_gluon_verify (forward_mqa's call)
    "builder_use_gluon_verify",  # the same predicate as _build_decode calls it
    "use_persistent_metadata",  # _build_decode's persistent-metadata gate
    "path",  # forward_mqa's kernel choice
    "mtp_decode_qlen",  # _mtp_decode_qlen: what the persistent buffers are sized for
    "head_padding",  # get_mla_padded_q's branch
)
PAIR_TIMEOUT_MS = 5_000
MAX_CONTEXTS = 4  # MC/DC pairs per condition, each under another setting of the enum/flag conditions
# The decisions whose pairs are sought in every context: AiterMLAHelper's predicates, where vLLM orders its
# checks.
CONTEXT_DECISIONS = ("use_gluon_decode", "use_gluon_verify")


class SolverGaveUp(RuntimeError):
    """z3 answered unknown: the cases would depend on the machine's speed, so none are written."""


@dataclass(frozen=True)
class Atom:
    """One atomic condition of a decision: a z3 term and the Shape fields it reads."""

    term: Any
    fields: tuple[str, ...]
    text: str


# ---------------------------------------------------------------------------- atoms


# ---------------------------------------------------------------------------- pairs


class _Pair:
    """Two symbolic shapes over one problem: the problem's own variables (a) and primed copies (b)."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.a = p.symbolic.variables
        self.b = {name: z3.Const(f"{name}'", var.sort()) for name, var in self.a.items()}
        self._sub = list(zip(self.a.values(), self.b.values()))
        self.solver = z3.Solver()  # both shapes valid; each find() works inside a push/pop
        self.solver.set("timeout", PAIR_TIMEOUT_MS)
        self.solver.add(*p.constraints, *[self.primed(c) for c in p.constraints])

    def primed(self, term: Any) -> Any:
        return z3.substitute(term, *self._sub)

    def find(self, constraints: Iterable[Any], moved: tuple[str, ...]) -> tuple[Shape, Shape] | None:
        """The closest valid pair (only ``moved`` fields differ) meeting ``constraints``, smallest first."""
        s = self.solver
        s.push()
        try:
            return self._find(s, constraints, moved)
        finally:
            s.pop()

    def _find(
        self, s: z3.Solver, constraints: Iterable[Any], moved: tuple[str, ...]
    ) -> tuple[Shape, Shape] | None:
        s.add(*constraints)
        s.add(*[self.a[n] == self.b[n] for n in self.a if n not in moved])
        answer = s.check()
        if answer == z3.unknown:
            raise SolverGaveUp(
                f"z3 gave up on a pair ({s.reason_unknown()}): the cases would depend on the machine's speed"
            )
        if answer == z3.unsat:
            return None
        ints = [n for n in moved if FIELD_BY_NAME[n].kind == "int"]
        distance = (
            z3.Sum(
                [z3.If(self.a[n] >= self.b[n], self.a[n] - self.b[n], self.b[n] - self.a[n]) for n in ints]
            )
            if ints
            else z3.IntVal(0)
        )
        objectives = (
            [(distance, 0)]
            + [(self.a[n], FIELD_BY_NAME[n].minimum) for n in MINIMISE_ORDER]
            + [(self.b[n], FIELD_BY_NAME[n].minimum) for n in MINIMISE_ORDER if n in moved]
        )
        model = minimise_in_order(s, objectives) and canonical_model(s, self.a)
        if model is None:
            raise SolverGaveUp("z3 gave up minimising a pair: the cases would depend on the machine's speed")
        return self.p.symbolic.to_shape(model), SymbolicShape(self.p.symbolic.view, self.b, []).to_shape(
            model
        )


def _decision_terms(p: Problem) -> list[tuple[str, Any]]:
    out = []
    for name in DECISIONS:
        value = getattr(p.decision.route, name)
        if value is None or isinstance(value, bool):
            continue
        term = z3.simplify(as_z3(value))
        if not (z3.is_true(term) or z3.is_false(term) or z3.is_int_value(term)):
            out.append((name, as_z3(value)))
    return out


def mcdc_pairs(p: Problem) -> Iterable[tuple[str, Shape, Shape]]:
    """(origin, shape where the condition holds, shape where it does not) for each decision and condition.

    For AiterMLAHelper's predicates, after the closest pair, further pairs are sought under each
    other setting of the predicate's conditions on enums and flags (the mode knob, the arch, the
    cache dtype), up to MAX_CONTEXTS per condition: a condition that decides the gate under
    ``mode == auto`` and under ``mode == gluon`` gets a pair in each, so reordering the checks
    (the mode knob before the dtype guard) does not go unseen.  The origin names the conditions
    that held in that context.
    """
    pair = _Pair(p)
    for decision, term in _decision_terms(p):
        atoms = [
            Atom(t, f, describe_atom(t, f, p.symbolic.variables))
            for t in atoms_of(term)
            if (f := fields_of(t))
        ]
        for atom in atoms:
            flips = [atom.term, z3.Not(pair.primed(atom.term)), term != pair.primed(term)]
            others = [
                o.term == pair.primed(o.term)
                for o in atoms
                if o is not atom and set(o.fields) & set(atom.fields)
            ]
            context = [
                o
                for o in atoms
                if o is not atom
                and not set(o.fields) & set(atom.fields)
                and all(FIELD_BY_NAME[f].discrete for f in o.fields)
            ]
            # Masking MC/DC: the coupled conditions may move, but at both shapes this condition alone
            # must decide the outcome (flipping it, all else held, flips the decision).
            determining = z3.substitute(term, (atom.term, z3.BoolVal(True))) != z3.substitute(
                term, (atom.term, z3.BoolVal(False))
            )
            masking = [determining, pair.primed(determining)]
            for style, extra in (("unique-cause", others), ("masking", masking)):
                if style == "masking" and not others:
                    break  # nothing is coupled: unique-cause found every pair there is
                seen: list[Any] = []
                for _ in range(MAX_CONTEXTS if decision in CONTEXT_DECISIONS else 1):
                    found = pair.find(flips + extra + [z3.Not(c) for c in seen], atom.fields)
                    if not found:
                        break
                    where = [(o, z3.is_true(term_value(o.term, found[0], p))) for o in context]
                    label = ", ".join(dict.fromkeys(o.text for o, v in where if v)) or "none of them"
                    yield (
                        f"mcdc {decision}: {atom.text} ({style}" + (f" in context {label})" if seen else ")"),
                        *found,
                    )
                    seen.append(z3.And(*[o.term == z3.BoolVal(v) for o, v in where]))
                if seen:
                    break


def term_value(term: Any, shape: Shape, p: Problem) -> Any:
    """A z3 term's value on a concrete shape."""
    pins = [(var, value) for _, var, value in shape_pins(p.symbolic.variables, shape)]
    return z3.simplify(z3.substitute(term, *pins))


# The threshold boundaries: (label, the fields that move, constraint on the pair (a, b) -> z3).
def _thresholds(pair: _Pair) -> list[tuple[str, tuple[str, ...], list[Any]]]:
    a, b = pair.a, pair.b
    route = pair.p.decision.route
    t_a = as_z3(route.mtp_decode_qlen)
    rbt_a = as_z3(pair.p.revision.reorder_batch_threshold(pair.p.symbolic.view))
    spec = FIELD_BY_NAME["spec_method"].values
    out: list[tuple[str, tuple[str, ...], list[Any]]] = [
        ("16 heads (15 | 16)", ("num_heads",), [a["num_heads"] == 15, b["num_heads"] == 16]),
        # A divisor of 16 and a non-divisor: repeat_interleave against tile padding where the step pads.
        ("divisor | non-divisor heads (8 | 12)", ("num_heads",), [a["num_heads"] == 8, b["num_heads"] == 12]),
        ("decode | verify (qlen 1 | 2)", ("max_qo_len",), [a["max_qo_len"] == 1, b["max_qo_len"] == 2]),
        (
            "_ASM_PADDED_MAX_PS_QLEN (qlen 4 | 5)",
            ("max_qo_len",),
            [a["max_qo_len"] == 4, b["max_qo_len"] == 5],
        ),
        (
            "_mtp_decode_qlen and one past it",
            ("max_qo_len",),
            [a["max_qo_len"] == t_a, b["max_qo_len"] == t_a + 1],
        ),
        ("batch 1 | 2", ("num_reqs",), [a["num_reqs"] == 1, b["num_reqs"] == 2]),
        ("batch 2 | 32", ("num_reqs",), [a["num_reqs"] == 2, b["num_reqs"] == 32]),
        (
            "2 GiB KV bound",
            ("kv_cache_bytes",),
            [a["kv_cache_bytes"] == 2 * GIB, b["kv_cache_bytes"] == 2 * GIB + 1],
        ),
    ]
    for method in ("mtp", "eagle", "dflash"):  # whitelisted, serial and parallel drafters
        out.append(
            (
                f"reorder_batch_threshold with {method} (qlen = RBT | RBT - 1)",
                ("max_qo_len",),
                [
                    a["spec_method"] == spec.index(method),
                    a["num_spec_tokens"] >= 1,
                    a["max_qo_len"] == rbt_a,
                    b["max_qo_len"] == rbt_a - 1,
                ],
            )
        )
    return out


def threshold_pairs(p: Problem) -> Iterable[tuple[str, Shape, Shape]]:
    """Both sides of each threshold, per arch and for a bf16 and an fp8 cache; a route change preferred."""
    pair = _Pair(p)
    route = p.decision.route
    pinned = [
        as_z3(getattr(route, n))
        for n in ("path", "use_persistent_metadata", "mtp_decode_qlen", "head_padding")
    ]
    differs = z3.Or(*[t != pair.primed(t) for t in pinned])
    kv = FIELD_BY_NAME["kv_cache_dtype"].values
    for label, moved, constraints in _thresholds(pair):
        for arch_code in range(len(FIELD_BY_NAME["arch"].values)):
            for kv_name in ("auto", "fp8"):
                context = [pair.a["arch"] == arch_code, pair.a["kv_cache_dtype"] == kv.index(kv_name)]
                found = pair.find(constraints + context + [differs], moved) or pair.find(
                    constraints + context, moved
                )
                if found:
                    yield f"threshold {label}", *found


# DCP verify at each DCP size on both sides of the head counts its routes turn on: the native cprr counts
# (vLLM 0.34.0 L590 _NATIVE_CPRR_HEADS, a count between two pads up) on gfx950, and segmented MLA's gfx942
# fp8 LDS bound of 64 gathered heads (L436-449), past which the Triton DCP verify serves.  The MC/DC pairs
# flip the model's conditions one at a time; these pin the release's constants at every DCP size (the
# DCP mutation report found cprr counts 17-32 and the Triton verify at dcp 2 unpinned).
_DCP_PROBES = (
    ("gfx950", "auto", 3, (8, 16, 24, 32, 40, 48, 64, 96, 128)),  # CPRR at qlen 3
    ("gfx942", "fp8", 2, (64, 72, 128)),  # segmented up to 64 gathered heads, Triton past it
)


def dcp_boundaries(p: Problem) -> list[tuple[str, Shape]]:
    """A valid MTP verify step per DCP size and gathered head count of :data:`_DCP_PROBES` (those the head
    count divides); none for a revision without DCP."""
    out = []
    for arch, kv, qlen, gathered in _DCP_PROBES:
        for dcp in DCP_WORLD_SIZES[1:]:
            for g in gathered:
                if g % dcp:
                    continue
                shape = Shape(
                    arch=arch,
                    kv_cache_dtype=kv,
                    num_heads=g // dcp,
                    dcp_world_size=dcp,
                    max_qo_len=qlen,
                    spec_method="mtp",
                    num_spec_tokens=qlen - 1,
                )
                if p.revision.is_valid(shape, p.registry):
                    out.append(
                        (f"dcp boundary: {g} gathered heads at dcp {dcp} ({arch} {kv} qlen {qlen})", shape)
                    )
    return out


# ---------------------------------------------------------------------------- route coverage


def route_signature(p: Problem) -> list[Any]:
    """What a replay on a GPU tells apart: the data path and what the kernel is asked for and finds."""
    d, v = p.decision, p.symbolic.variables
    r, a = d.route, d.asm
    return [
        as_z3(t)
        for t in (
            r.path,
            r.head_padding,
            r.request.q_dtype,
            r.request.kv_dtype,
            a.ps,
            a.gqa,
            a.qseqlen,
            a.row_found,
            r.gluon_batch_is_one,
        )
    ] + [v["arch"]]


def route_witnesses(p: Problem, max_routes: int) -> Iterable[tuple[str, Shape]]:
    """Distinct route signatures within the brute-force box (up to ``max_routes``, in the solver's
    order), each at its smallest and its largest shape.

    For replay on a GPU (``mla-spec cases --style jsonl``): the smallest shape pins the route, the
    largest (most heads, then the longest query, then the biggest batch) is the one whose kernel
    time is worth comparing with the HBM floor.
    """
    s = z3.Solver()
    s.set("timeout", PAIR_TIMEOUT_MS)
    s.add(*p.constraints, *box_constraints(p.symbolic.variables))
    signature = route_signature(p)
    v = p.symbolic.variables
    largest = [(-v[n], -FIELD_BY_NAME[n].box[-1]) for n in ("num_heads", "max_qo_len", "num_reqs")]
    for _ in range(max_routes):
        answer = s.check()
        if answer == z3.unknown:
            raise SolverGaveUp(f"z3 gave up enumerating routes ({s.reason_unknown()})")
        if answer == z3.unsat:
            return
        values = [s.model().eval(t, model_completion=True) for t in signature]
        same = z3.And(*[t == value for t, value in zip(signature, values)])
        for label, objectives in (
            ("smallest", [(v[n], FIELD_BY_NAME[n].minimum) for n in MINIMISE_ORDER]),
            ("largest", largest),
        ):
            s.push()
            s.add(same)
            model = s.check() == z3.sat and minimise_in_order(s, objectives) and canonical_model(s, v)
            if model is None or model is False:
                raise SolverGaveUp("z3 gave up minimising a route's shape")
            yield f"route coverage ({label})", p.symbolic.to_shape(model)
            s.pop()
        s.add(z3.Not(same))


# ---------------------------------------------------------------------------- cases


def _confirm_pair(p: Problem, origin: str, shapes: Iterable[Shape]) -> None:
    for shape in shapes:
        if not p.revision.is_valid(shape, p.registry):
            raise ProverDisagreement(f"{p.revision.id}: {origin}: z3 found {shape}, which the model rejects")


def generate(revision: str, registry: str = "aiter-0.1.20", routes: int = 0) -> list[Case]:
    """The cases of one revision against one registry: MC/DC pairs, counterexamples, thresholds
    (and, for a GPU replay, up to ``routes`` distinct routes at their smallest and largest shape)."""
    p = problem(revision, registry)
    found: list[tuple[str, Shape]] = []
    for origin, *shapes in mcdc_pairs(p):
        _confirm_pair(p, origin, shapes)
        mcdc_decision = origin.split(":")[0].removeprefix("mcdc ")
        a, b = (_route_field(p, s, mcdc_decision) for s in shapes)
        if a == b:
            raise ProverDisagreement(f"{p.revision.id}: {origin}: {mcdc_decision} is {a} on both {shapes}")
        found += [(origin, s) for s in shapes]
    for inv in INVARIANTS:
        if not inv.makes_cases:
            continue
        result = check(p.revision, p.registry, inv)  # every class: a cut-off set would depend on z3's order
        if result.verdict == UNKNOWN or not result.complete:
            raise SolverGaveUp(f"{p.revision.id}/{inv.id}: {result.reason}: the cases would be incomplete")
        if result.verdict == VIOLATED:
            found += [(f"invariant {inv.id}", c.shape) for c in result.counterexamples]
    for origin, *shapes in threshold_pairs(p):
        _confirm_pair(p, origin, shapes)
        found += [(origin, s) for s in shapes]
    found += dcp_boundaries(p)
    if routes:
        for origin, shape in route_witnesses(p, routes):
            _confirm_pair(p, origin, [shape])
            found.append((origin, shape))

    by_id: dict[str, tuple[Shape, list[str]]] = {}
    for origin, shape in found:
        cid = case_id(shape)
        if cid in by_id and by_id[cid][0] != shape:
            raise ValueError(f"case id {cid} names two shapes: {by_id[cid][0]} and {shape}")
        by_id.setdefault(cid, (shape, []))[1].append(origin)
    return [
        Case(
            cid,
            shape,
            expected_route(p.revision, p.registry, shape),
            "; ".join(dict.fromkeys(origins)),
            p.revision.id,
            p.registry.id,
            case_seed(cid),
            expected_outcome(p.revision, p.registry, shape),
        )
        for cid, (shape, origins) in by_id.items()
    ]


def _route_field(p: Problem, shape: Shape, name: str) -> Term:
    return getattr(decide(p.revision, p.registry, shape).route, name)
