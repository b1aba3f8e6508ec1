"""Exhaustive sweep over a bounded box: the cross-check that keeps the prover honest.

The box is every value of every enum and boolean, heads 1..256, qlen 1..32,
speculative tokens 0..15, DCP 1/2/4/8, requests 1/2/32 and KV-cache bytes on
both sides of the 2 GiB Gluon bound (``FieldSpec.box`` in
:mod:`mla_model.shape`).  The same gate, validity and invariant definitions the
prover encodes are evaluated with numpy on every valid shape of the box, and
the violating shapes are grouped by each invariant's view.  The prover run
restricted to the same box must find exactly the same classes, with the same
smallest (heads, qlen, k) per class; the test suite fails otherwise.

Only the fields a revision, its validity rules and the invariants actually read
vary (found by tracing a symbolic evaluation); the others keep their Shape
defaults, which cannot change any result.

Every valid shape is evaluated; what keeps that to seconds is how: the large
fields are a table of numpy columns (pruned by the rules that read only them,
narrow integer types), the enum fields are a loop of plain values (so the gates
short-cut on them, see :mod:`mla_model.logic`), each combination's valid rows
are selected once per way the mixed rules reject rows, the table is evaluated a
cache-sized chunk at a time, and each class's smallest (heads, qlen, k) is one
scatter-minimum of a packed score.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from mla_model.decision import decide
from mla_model.logic import EnumTerm, narrow_int_dtype
from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.shape import FIELD_BY_NAME, FIELDS, Shape
from spec.proof.invariants import Invariant
from spec.proof.terms import FieldTracer, symbolic_shape
from spec.proof.views import view_terms

# Fields swept as numpy columns (the large ones); the rest are looped over as scalars.
_COLUMN_FIELDS = (
    "spec_method",
    "num_spec_tokens",
    "dcp_world_size",
    "max_qo_len",
    "num_heads",
    "num_reqs",
    "kv_cache_bytes",
    "causal",
)

# Rows evaluated at a time: small enough that an operation's operands stay in the CPU cache (a whole
# table streams every array through memory, about twice as slow), large enough to amortise Python.
_CHUNK_ROWS = 1 << 18

Key = tuple[tuple[str, Any], ...]
# Within a class the smallest (heads, qlen, k) is kept; each is packed in the bits its box needs.
_SCORE_BITS = tuple(
    (name, max(FIELD_BY_NAME[name].box).bit_length())
    for name in ("num_heads", "max_qo_len", "num_spec_tokens")
)


@dataclass
class SweepResult:
    revision: str
    registry: str
    fields_read: tuple[str, ...]
    shapes: int = 0  # shapes evaluated (after pruning invalid combinations early)
    valid: int = 0  # valid shapes among them
    seconds: float = 0.0
    # invariant id -> class key -> smallest (num_heads, max_qo_len, num_spec_tokens) in that class
    classes: dict[str, dict[Key, tuple[int, int, int]]] = field(default_factory=dict)


def fields_read(revision_id: str, registry_id: str, invariants: tuple[Invariant, ...]) -> tuple[str, ...]:
    """The Shape fields a revision's route, validity and these invariants (and views) read."""
    revision, registry = get_revision(revision_id), load_registry(registry_id)
    tracer = FieldTracer(symbolic_shape().view)
    d = decide(revision, registry, tracer)
    revision.validity(tracer, registry)
    for inv in invariants:
        inv.holds(d)
        view_terms(d, inv.view)
    return tuple(f.name for f in FIELDS if f.name in tracer.read)


def _column(name: str, values: np.ndarray) -> Any:
    spec = FIELD_BY_NAME[name]
    return EnumTerm(spec.values, values) if spec.kind == "enum" else values


def _encode(name: str, values: tuple) -> np.ndarray:
    """A field's box values as a column: enum codes, booleans, or integers as narrow as is safe."""
    spec = FIELD_BY_NAME[name]
    if spec.kind == "enum":
        return np.array([spec.values.index(v) for v in values], dtype=np.int8)
    if spec.kind == "bool":
        return np.array(values, dtype=bool)
    return np.array(values, dtype=narrow_int_dtype(*values))


def _decode(name: str, code: Any) -> Any:
    spec = FIELD_BY_NAME[name]
    return spec.values[int(code)] if spec.kind == "enum" else bool(code) if spec.kind == "bool" else int(code)


def _applicable(rules, view: SimpleNamespace, n: int) -> np.ndarray:
    """Conjunction of the rules that only read fields present in ``view``."""
    mask = np.ones(n, dtype=bool)
    for _, rule in rules:
        try:
            term = rule(view)
        except AttributeError:  # reads a field not laid out yet
            continue
        mask &= np.broadcast_to(np.asarray(term, dtype=bool), (n,))
    return mask


def _reading_absent_fields(rules, view: SimpleNamespace) -> list:
    """The rules that read a field ``view`` lacks."""
    out = []
    for rule in rules:
        try:
            rule[1](view)
        except AttributeError:
            out.append(rule)
    return out


def valid_columns(
    rules, fixed: dict[str, Any], names: list[str], values: dict[str, tuple] | None = None
) -> dict[str, np.ndarray]:
    """The fields ``names`` over the box (or over ``values``, per field) as a table of columns, laid out one
    field at a time and pruned of rows that break a rule as soon as the rule can tell; ``fixed`` holds the
    other fields."""
    cols: dict[str, np.ndarray] = {}
    n = 1
    for name in names:
        column = _encode(name, (values or {}).get(name, FIELD_BY_NAME[name].box))
        cols = {k: np.repeat(v, len(column)) for k, v in cols.items()}
        cols[name] = np.tile(column, n)
        n *= len(column)
        keep = _applicable(rules, column_view(fixed, cols), n)
        cols = {k: v[keep] for k, v in cols.items()}
        n = int(keep.sum())
    return cols


def column_view(fixed: dict[str, Any], cols: dict[str, np.ndarray]) -> SimpleNamespace:
    """A shape view over a column table (enum columns as EnumTerms), the ``fixed`` fields as scalars."""
    return SimpleNamespace(**fixed, **{k: _column(k, v) for k, v in cols.items()})


def _score(view: SimpleNamespace, n: int) -> np.ndarray:
    """(heads, qlen, k) of each row packed into one int32, ordered as the tuples are (fixed-width fields)."""
    score = np.zeros(n, dtype=np.int32)
    for name, bits in _SCORE_BITS:
        score = (score << bits) | np.broadcast_to(np.asarray(getattr(view, name), dtype=np.int32), (n,))
    return score


def _unpack(score: int) -> tuple[int, int, int]:
    (_, q_bits), (_, k_bits) = _SCORE_BITS[1:]
    return score >> (q_bits + k_bits), (score >> k_bits) & ((1 << q_bits) - 1), score & ((1 << k_bits) - 1)


def _codes(term: Any) -> tuple[Any, tuple]:
    """A view term as integer codes (an array, or one plain code) and the values they index."""
    if isinstance(term, EnumTerm):
        return term.term, term.values
    if isinstance(term, str):  # an enumeration value the whole selection shares
        return 0, (term,)
    return term, (False, True)


def _smallest_per_class(terms: dict[str, Any], rows: np.ndarray, score: np.ndarray) -> dict[Key, int]:
    """The least score of the violating ``rows`` per class, the class being the view terms' values.

    Each row's class is one mixed-radix integer over the terms' (small) domains, so the per-class
    minimum is one scatter (np.minimum.at) into a table of every possible class.
    """
    key = np.zeros(len(rows), dtype=np.intp)
    decoders = []
    for name, term in terms.items():
        codes, domain = _codes(term)
        codes = np.asarray(codes)
        key = key * len(domain) + (codes[rows] if codes.ndim else int(codes))
        decoders.append((name, domain))
    best = np.full(int(np.prod([len(d) for _, d in decoders])), np.iinfo(np.int32).max, dtype=np.int32)
    np.minimum.at(best, key, score[rows])
    found = np.flatnonzero(best < np.iinfo(np.int32).max)
    indices = np.unravel_index(found, [len(d) for _, d in decoders])
    return {
        tuple((name, domain[int(i[j])]) for (name, domain), i in zip(decoders, indices)): int(best[c])
        for j, c in enumerate(found)
    }


def _evaluate(
    revision,
    registry,
    view: SimpleNamespace,
    score: np.ndarray,
    invariants: tuple[Invariant, ...],
    result: SweepResult,
) -> None:
    """Record, per invariant, each violated class and its smallest (heads, qlen, k)."""
    d = decide(revision, registry, view)
    n = len(score)
    for inv in invariants:
        holds = inv.holds(d)
        if np.ndim(holds) == 0 and holds:  # settled: it holds on every row of the chunk
            continue
        rows = np.flatnonzero(~np.broadcast_to(np.asarray(holds, dtype=bool), (n,)))
        if not rows.size:
            continue
        found = result.classes[inv.id]
        for key, best in _smallest_per_class(view_terms(d, inv.view), rows, score).items():
            smallest = _unpack(best)
            if key not in found or smallest < found[key]:
                found[key] = smallest


class _Selections:
    """The rows of the column table that also pass the rules reading scalar fields, per scalar combination.

    Those rules read few of the scalar fields (the arch, for non-causal blocks), so the combinations
    reject rows in only a few ways: each is computed and copied once, keyed by the scalar values the
    rules read, and every other combination reuses it.
    """

    def __init__(
        self,
        cols: dict[str, np.ndarray],
        score: np.ndarray,
        rules,
        fixed: dict[str, Any],
        scalar_fields: list[str],
    ) -> None:
        self.cols, self.score = cols, score
        self.view = column_view(fixed, cols)
        some = {f: FIELD_BY_NAME[f].box[0] for f in scalar_fields}
        # Rules that read column fields only held when the table was laid out; those that read scalar
        # fields only are checked once per combination.  The rest read both.
        self.rules = [
            r
            for r in _reading_absent_fields(rules, self.view)
            if r in _reading_absent_fields(rules, SimpleNamespace(**fixed, **some))
        ]
        tracer = FieldTracer(SimpleNamespace(**vars(self.view), **some))
        for _, rule in self.rules:
            rule(tracer)
        self.keyed = [f for f in scalar_fields if f in tracer.read]
        self.seen: dict[tuple, tuple[dict[str, np.ndarray], np.ndarray]] = {}

    def __call__(self, scalars: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        key = tuple(scalars[f] for f in self.keyed)
        if key not in self.seen:
            valid = _applicable(self.rules, SimpleNamespace(**vars(self.view), **scalars), len(self.score))
            self.seen[key] = (
                (self.cols, self.score)
                if valid.all()
                else ({k: v[valid] for k, v in self.cols.items()}, self.score[valid])
            )
        return self.seen[key]


def sweep(revision_id: str, registry_id: str, invariants: tuple[Invariant, ...]) -> SweepResult:
    """Evaluate every valid shape of the box; group each invariant's violations by its view."""
    start = time.perf_counter()
    revision, registry = get_revision(revision_id), load_registry(registry_id)
    read = fields_read(revision_id, registry_id, invariants)
    result = SweepResult(revision_id, registry_id, read, classes={inv.id: {} for inv in invariants})
    rules = revision.rules(registry)
    defaults = Shape().to_json()
    fixed = {name: defaults[name] for name in defaults if name not in read}
    cols = valid_columns(rules, fixed, [f for f in _COLUMN_FIELDS if f in read])
    for name in [k for k, v in cols.items() if (v == v[0]).all()]:  # one value left (DCP 1 in scope)
        fixed[name] = _decode(name, cols.pop(name)[0])
    n = len(next(iter(cols.values())))
    scalar_fields = [f.name for f in FIELDS if f.name in read and f.name not in _COLUMN_FIELDS]
    select = _Selections(cols, _score(SimpleNamespace(**fixed, **cols), n), rules, fixed, scalar_fields)

    for combo in itertools.product(*[FIELD_BY_NAME[f].box for f in scalar_fields]):
        scalars = dict(zip(scalar_fields, combo))
        if not _applicable(rules, SimpleNamespace(**fixed, **scalars), 1)[0]:
            continue  # e.g. a Gluon build on gfx942, an fp8 query with a bf16 cache
        result.shapes += n
        # Evaluate only the valid rows, a cache-sized chunk at a time; scalar fields stay scalars.
        rows, score = select(scalars)
        result.valid += len(score)
        for at in range(0, len(score), _CHUNK_ROWS):
            chunk = {k: _column(k, v[at : at + _CHUNK_ROWS]) for k, v in rows.items()}
            view = SimpleNamespace(**fixed, **chunk, **scalars)
            _evaluate(revision, registry, view, score[at : at + _CHUNK_ROWS], invariants, result)
    result.seconds = time.perf_counter() - start
    return result
