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
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from mla_model.decision import decide
from mla_model.logic import EnumTerm
from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.shape import FIELD_BY_NAME, FIELDS, Shape
from spec.proof.invariants import Invariant
from spec.proof.terms import FieldTracer, symbolic_shape
from spec.proof.views import view_terms

# Fields swept as numpy columns (the large ones); the rest are looped over as scalars.
_COLUMN_FIELDS = (
    "spec_method", "num_spec_tokens", "dcp_world_size", "max_qo_len", "num_heads",
    "num_reqs", "kv_cache_bytes", "causal", "full_cudagraph",
)

Key = tuple[tuple[str, Any], ...]


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
    spec = FIELD_BY_NAME[name]
    if spec.kind == "enum":
        return np.array([spec.values.index(v) for v in values], dtype=np.int8)
    if spec.kind == "bool":
        return np.array(values, dtype=bool)
    return np.array(values, dtype=np.int64 if max(values) >= 2**31 else np.int32)


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


def _key_columns(terms: dict[str, Any], rows: np.ndarray, n: int) -> tuple[np.ndarray, list]:
    """Integer codes of the view terms on the selected rows, and a decoder per column."""
    codes, decoders = [], []
    for name, term in terms.items():
        if isinstance(term, EnumTerm):
            col = np.broadcast_to(np.asarray(term.term), (n,))[rows].astype(np.int64)
            decoders.append((name, term.values))
        elif isinstance(term, str):
            col = np.zeros(len(rows), dtype=np.int64)
            decoders.append((name, (term,)))
        else:
            col = np.broadcast_to(np.asarray(term, dtype=bool), (n,))[rows].astype(np.int64)
            decoders.append((name, (False, True)))
        codes.append(col)
    return np.stack(codes, axis=1), decoders


def _evaluate(revision, registry, view: SimpleNamespace, n: int, invariants: tuple[Invariant, ...],
              result: SweepResult) -> None:
    """Record, per invariant, each violated class and its smallest (heads, qlen, k)."""
    d = decide(revision, registry, view)
    heads = np.broadcast_to(np.asarray(view.num_heads), (n,))
    qlen = np.broadcast_to(np.asarray(view.max_qo_len), (n,))
    k = np.broadcast_to(np.asarray(view.num_spec_tokens), (n,))
    for inv in invariants:
        bad = ~np.broadcast_to(np.asarray(inv.holds(d), dtype=bool), (n,))
        if not bad.any():
            continue
        rows = np.flatnonzero(bad)
        rows = rows[np.lexsort((k[rows], qlen[rows], heads[rows]))]
        keys, decoders = _key_columns(view_terms(d, inv.view), rows, n)
        _, first = np.unique(keys, axis=0, return_index=True)
        found = result.classes[inv.id]
        for i in first:
            key = tuple((name, domain[int(c)]) for (name, domain), c in zip(decoders, keys[i]))
            smallest = (int(heads[rows[i]]), int(qlen[rows[i]]), int(k[rows[i]]))
            if key not in found or smallest < found[key]:
                found[key] = smallest


def sweep(revision_id: str, registry_id: str, invariants: tuple[Invariant, ...]) -> SweepResult:
    """Evaluate every valid shape of the box; group each invariant's violations by its view."""
    start = time.perf_counter()
    revision, registry = get_revision(revision_id), load_registry(registry_id)
    read = fields_read(revision_id, registry_id, invariants)
    result = SweepResult(revision_id, registry_id, read, classes={inv.id: {} for inv in invariants})
    rules = revision.rules(registry)
    defaults = Shape().to_json()

    # Lay out the column fields one at a time, pruning combinations that break a rule early.
    cols: dict[str, np.ndarray] = {}
    n = 1
    fixed = {name: defaults[name] for name in defaults if name not in read}
    for name in (f for f in _COLUMN_FIELDS if f in read):
        values = _encode(name, FIELD_BY_NAME[name].box)
        cols = {k: np.repeat(v, len(values)) for k, v in cols.items()}
        cols[name] = np.tile(values, n)
        n *= len(values)
        view = SimpleNamespace(**fixed, **{k: _column(k, v) for k, v in cols.items()})
        keep = _applicable(rules, view, n)
        cols = {k: v[keep] for k, v in cols.items()}
        n = int(keep.sum())

    scalar_fields = [f.name for f in FIELDS if f.name in read and f.name not in _COLUMN_FIELDS]
    for combo in itertools.product(*[FIELD_BY_NAME[f].box for f in scalar_fields]):
        scalars = dict(zip(scalar_fields, combo))
        if not _applicable(rules, SimpleNamespace(**fixed, **scalars), 1)[0]:
            continue  # e.g. a Gluon build on gfx942, an fp8 query with a bf16 cache
        result.shapes += n
        view = SimpleNamespace(**fixed, **{k: _column(k, v) for k, v in cols.items()}, **scalars)
        valid = _applicable(rules, view, n)
        if not valid.any():
            continue
        # Evaluate only the valid rows; scalar fields stay scalars (broadcast by numpy).
        rows_cols = {k: v[valid] for k, v in cols.items()}
        m = len(next(iter(rows_cols.values())))
        result.valid += m
        view = SimpleNamespace(**fixed, **{k: _column(k, v) for k, v in rows_cols.items()}, **scalars)
        _evaluate(revision, registry, view, m, invariants, result)
    result.seconds = time.perf_counter() - start
    return result
