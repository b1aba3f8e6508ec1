"""Who a counterexample class hits: the bundled deployments (:mod:`mla_model.deployments`) with a shape in it.

A deployment fixes a shape's heads per rank, KV-cache dtype, drafter and k (DCP 1).  It hits a class of an
invariant when some shape with those values is valid for the revision, violates the invariant, and has the
class's view values; every other field is free within the brute-force box (``FieldSpec.box``), the query
length up to the revision's ``reorder_batch_threshold`` for that drafter, the query's dtype the one vLLM
gives the cache's (fp8 exactly for an fp8 cache).

The shapes are evaluated once per (revision, registry) with the numpy interpretation the brute-force sweep
uses (:mod:`spec.proof.bruteforce`): one table of every deployment's shapes, its valid rows decided at once,
then per invariant the violating rows grouped by class; :func:`hits` is a lookup after that.
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import numpy as np

from mla_model.decision import decide
from mla_model.deployments import Deployment, deployments
from mla_model.logic import EnumTerm, narrow_int_dtype
from mla_model.registry import Registry, load_registry
from mla_model.revisions import get_revision
from mla_model.revisions.base import Revision
from mla_model.shape import FIELD_BY_NAME, Shape
from spec.proof.bruteforce import column_view, valid_columns
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.views import view_terms

# The fields a deployment leaves free, each over its box; the deployment fixes heads, KV dtype, drafter, k,
# and with the KV dtype the query's: vLLM quantizes the decode query to fp8 exactly when the cache is fp8
# (sources §2), so a bf16 query over an fp8 cache is no bundled deployment's.
_FREE = ("arch", "num_reqs", "asm_padding_mode", "gluon_build", "causal", "kv_cache_bytes")
_DCP = 1

ClassKey = tuple[tuple[str, Any], ...]


def _codes(name: str, values: Any) -> np.ndarray:
    """Values of a field as a numpy column, encoded as the brute-force sweep encodes them (enum codes,
    booleans, integers as narrow as is safe): a one-field table with no rule to prune it."""
    return valid_columns([], {}, [name], {name: tuple(values)})[name]


@cache
def _points() -> tuple[tuple[tuple[int, str, str, int], ...], tuple[tuple[int, ...], ...]]:
    """The distinct (heads, kv dtype, spec method, k) the deployments make, and per point the deployments
    (indices into :func:`deployments`) that make it."""
    owners: dict[tuple[int, str, str, int], list[int]] = {}
    for i, dep in enumerate(deployments()):
        for method in dep.spec_methods:
            owners.setdefault((dep.num_heads, dep.kv_cache_dtype, method, dep.num_spec_tokens), []).append(i)
    return tuple(owners), tuple(tuple(v) for v in owners.values())


@cache
def _table(revision: Revision) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every deployment shape as columns (each row one point, one query length, one choice of the free
    fields), and each row's point index.  The query lengths run to the revision's threshold per point."""
    points, _ = _points()
    heads, kv, method, k = (list(c) for c in zip(*points))
    # The threshold at DCP 1 reads only the drafter; the other fields take their defaults (a DCP
    # revision's threshold names them for its DCP > 1 clause).
    defaults = {
        name: value
        for name, value in Shape().to_json().items()
        if name not in ("spec_method", "num_spec_tokens")
    }
    per_point = column_view(
        {**defaults, "dcp_world_size": _DCP},
        {
            "spec_method": _codes("spec_method", method),
            "num_spec_tokens": _codes("num_spec_tokens", k),
        },
    )
    box_q = max(FIELD_BY_NAME["max_qo_len"].box)
    threshold = np.broadcast_to(np.asarray(revision.reorder_batch_threshold(per_point)), (len(points),))
    qmax = np.clip(threshold, 1, box_q)
    point = np.repeat(np.arange(len(points)), qmax)
    qlen = np.concatenate([np.arange(1, q + 1) for q in qmax])
    free = list(itertools.product(*(FIELD_BY_NAME[f].box for f in _FREE)))
    n_free = len(free)
    cols = {
        "num_heads": _codes("num_heads", heads)[point],
        "kv_cache_dtype": _codes("kv_cache_dtype", kv)[point],
        "q_dtype": _codes("q_dtype", [Shape(kv_cache_dtype=d).q_dtype for d in kv])[point],
        "spec_method": _codes("spec_method", method)[point],
        "num_spec_tokens": _codes("num_spec_tokens", k)[point],
        "max_qo_len": qlen.astype(narrow_int_dtype(box_q)),
    }
    cols = {name: np.repeat(col, n_free) for name, col in cols.items()}
    for name, values in zip(_FREE, zip(*free)):
        cols[name] = np.tile(_codes(name, values), len(point))
    return cols, np.repeat(point, n_free)


@cache
def _decided(revision: Revision, registry: Registry) -> tuple[Any, np.ndarray]:
    """The decision over the valid rows of the revision's table, and each valid row's point index."""
    cols, point = _table(revision)
    view = column_view({"dcp_world_size": _DCP}, cols)
    valid = np.broadcast_to(np.asarray(revision.is_valid(view, registry), dtype=bool), point.shape)
    rows = {name: col[valid] for name, col in cols.items()}
    return decide(revision, registry, column_view({"dcp_world_size": _DCP}, rows)), point[valid]


def _term_codes(term: Any, n: int) -> tuple[np.ndarray, tuple]:
    """A view term as one integer code per row, and the values the codes index."""
    if isinstance(term, EnumTerm):
        return np.broadcast_to(np.asarray(term.term), (n,)), term.values
    if isinstance(term, str):  # an enumeration value every row shares
        return np.zeros(n, dtype=np.intp), (term,)
    return np.broadcast_to(np.asarray(term, dtype=bool), (n,)).astype(np.intp), (False, True)


@cache
def _classes(revision: Revision, registry: Registry, invariant_id: str) -> dict[ClassKey, tuple[int, ...]]:
    """Class key (the view's (name, value) pairs in view order) -> the deployments it hits, in table order."""
    inv = INVARIANT_BY_ID[invariant_id]
    d, point = _decided(revision, registry)
    n = len(point)
    violated = np.flatnonzero(~np.broadcast_to(np.asarray(inv.holds(d), dtype=bool), (n,)))
    if not violated.size:
        return {}
    key = point[violated].astype(np.intp)
    radix = len(_points()[0])
    decoders = []
    for name, term in view_terms(d, inv.view).items():
        codes, domain = _term_codes(term, n)
        key = key + radix * codes[violated].astype(np.intp)
        radix *= len(domain)
        decoders.append((name, domain))
    found: dict[ClassKey, set[int]] = {}
    owners = _points()[1]
    for packed in np.unique(key):
        p, rest = int(packed) % len(owners), int(packed) // len(owners)
        values = []
        for name, domain in decoders:
            values.append((name, domain[rest % len(domain)]))
            rest //= len(domain)
        found.setdefault(tuple(values), set()).update(owners[p])
    return {k: tuple(sorted(v)) for k, v in found.items()}


def classes(
    revision: str | Revision, registry: str | Registry, invariant_id: str
) -> dict[ClassKey, tuple[Deployment, ...]]:
    """Every class of the invariant that some bundled deployment is in (keyed by the view's (name, value)
    pairs in the invariant's view order), with the deployments it hits, in table order."""
    rev = get_revision(revision) if isinstance(revision, str) else revision
    reg = load_registry(registry) if isinstance(registry, str) else registry
    table = deployments()
    return {key: tuple(table[i] for i in hit) for key, hit in _classes(rev, reg, invariant_id).items()}


def hit_deployments(
    revision: str | Revision, registry: str | Registry, invariant_id: str, view: dict[str, Any]
) -> list[Deployment]:
    """The bundled deployments with a valid shape that violates the invariant in the class ``view`` (a
    counterexample's view, :attr:`spec.proof.prover.Counterexample.view`), in table order."""
    key = tuple((name, view[name]) for name in INVARIANT_BY_ID[invariant_id].view)
    return list(classes(revision, registry, invariant_id).get(key, ()))


def hits(
    revision: str | Revision, registry: str | Registry, invariant_id: str, view: dict[str, Any]
) -> list[str]:
    """The labels (``Kimi-K3 TP8 fp8``, ``DeepSeek-V3 TP8 bf16 mtp k=1``) of :func:`hit_deployments`."""
    return [dep.label for dep in hit_deployments(revision, registry, invariant_id, view)]
