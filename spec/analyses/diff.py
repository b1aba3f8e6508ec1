"""``mla-spec diff OLD NEW``: every region of the shape space where the route changes.

A semantic diff of two gate revisions in the manner of AWS Zelkova (Backes et
al., "Semantic-based automated reasoning for AWS access policies using SMT",
FMCAD 2018; IAM Access Analyzer's ``CheckNoNewAccess``): not the lines that
changed but the shapes whose route changed, grouped by change, each group
written as a few conjunctions a maintainer can read, with the number of
concrete shapes each covers.

What "the route" is
-------------------
Two revisions are compared on the three things a decode step's behaviour
depends on (:class:`RouteKey`):

* ``path``: where forward_mqa sends the step (:data:`mla_model.route.PATHS`),
  or ``vllm_raises`` where vLLM raises before any kernel runs (0.34's
  non-causal fp8 check);
* ``kernel``: on an ASM path, the code object AITER's table resolves the
  request to (:func:`mla_model.registry.kernel_name` with this registry), or
  none where AITER finds none; nothing on the Gluon and Triton paths;
* ``metadata``: on ``asm_persistent`` only (where vLLM fills the persistent
  work metadata and hands it to the kernel), ``_mtp_decode_qlen``, the query
  length its buffers are sized for, against ``reorder_batch_threshold``, the
  longest query the scheduler can hand decode: ``below``, ``at`` or
  ``above``.  Against the threshold, not as a number: what #51011 changed is
  whether the buffers cover what the scheduler produces (the drafter
  whitelist left them ``below``), and comparing raw values would split every
  change by the number of speculative tokens.  On every other path the
  buffers are allocated but never read, so their size changes nothing the
  step does and is not compared.

The gates, head padding and the kernel request are not compared in their own
right: they change what runs only through these three.  Where both revisions
resolve a shape to the same kernel, the region says ``unchanged`` instead of
naming it, so that a change of path or sizing is one region, not one per
kernel.  A new route (``--fail-on-new-routes``, Zelkova's
check-no-new-access) is a shape NEW sends to a path or a kernel other than
the one OLD used for it; a change of the metadata sizing alone is not one.

Which shapes count
------------------
Concrete shapes of the bounded box (``FieldSpec.box``: heads 1..256, qlen
1..32, k 0..15, every enum and boolean value, ...) that are valid under both
revisions (each revision's ``is_valid``: the engine's rules, its head validity
and its modelled scope).  A shape valid under only one of them has no route
to compare with; those are counted (``valid_only_in_old``/``_new``), not
diffed.

How
---
1. The prover's encoding (:func:`spec.proof.prover.problem`) of both route keys and
   of each validity rule names the fields they read.
2. :mod:`spec.analyses.shape_grid` lays every shape valid under both revisions out as a
   product grid (values no term tells apart merged, weighted by how many
   shapes they stand for).  A model revision's route runs in the numpy
   interpretation; a release's or a file's gates lifted from the real code
   (:mod:`spec.realcode.revision`) answer in z3, so its route is the prover's
   encoding, evaluated on the same grid.
   AITER's lookup runs once per distinct kernel request.
3. :mod:`spec.analyses.regions` writes each change as a few disjoint boxes; each box's
   shape count is read off the grid, where the box is checked to hold only
   cells of its change.
4. z3 then proves, on the prover's encoding and within the box, that every
   shape of each region has that region's change and that no changed shape
   lies outside every region; each region's smallest shape is re-run in plain
   Python.  A disagreement is a bug in mla-spec (:class:`DiffDisagreement`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import z3

from mla_model.decision import decide
from mla_model.derived import KERNEL_KV_DTYPES
from mla_model.logic import EnumTerm, Term, all_of, eq, if_then_else, is_in, not_
from mla_model.registry import NO_KERNEL, Registry, asm_lookup, kernel_names, resolved_kernel
from mla_model.revisions import REVISIONS
from mla_model.revisions.base import Revision
from mla_model.route import ASM_PATHS, PATHS, KernelRequest, Route
from mla_model.shape import ARCHS, FIELD_BY_NAME, FIELDS, Q_DTYPES, Shape
from spec.analyses.regions import Box, summarise
from spec.analyses.shape_grid import (
    Grid,
    build_grid,
    compiled,
    count_valid,
    decode_value,
    default_codes,
    relevant_rule,
    value_classes,
)
from spec.proof.prover import SMALLEST_FIRST, Problem, problem
from spec.proof.terms import as_z3, box_constraints

RAISES = "vllm_raises"
ROUTE_PATHS = (*PATHS, RAISES)
UNCHANGED = (
    "unchanged"  # a region's kernel where each shape keeps its own (so the change is not split by kernel)
)
_NOT_ASM, _UNCHANGED = -1, -2  # kernel codes: off the ASM paths; the same kernel in both revisions
# _mtp_decode_qlen against reorder_batch_threshold, on asm_persistent (None elsewhere).
SIZINGS = (None, "below", "at", "above")
_SIZING_TEXT = {"below": "< rbt", "at": "= rbt", "above": "> rbt"}


class DiffDisagreement(AssertionError):
    """The grid, the z3 encoding and the plain-Python route disagree: a bug in mla-spec."""


# --- the route a diff compares -----------------------------------------------------------------------


def _code(x: Term, values: tuple[str, ...]) -> Term:
    return x.term if isinstance(x, EnumTerm) else values.index(x)


def route_key(route: Route, kernel: Term, names: tuple[str, ...], threshold: Term) -> tuple[Term, Term, Term]:
    """(path, kernel, metadata sizing) as integer codes, for one shape, numpy arrays or z3 terms.

    ``threshold`` is the revision's reorder_batch_threshold for the shape: the longest query the
    scheduler can hand decode, which the persistent metadata must be sized for.
    """
    runs = not_(route.vllm_raises)
    path = if_then_else(runs, _code(route.path, PATHS), ROUTE_PATHS.index(RAISES))
    kernel = if_then_else(all_of(runs, is_in(route.path, ASM_PATHS)), _code(kernel, names), _NOT_ASM)
    T = route.mtp_decode_qlen
    sizing = if_then_else(
        T < threshold,
        SIZINGS.index("below"),
        if_then_else(T == threshold, SIZINGS.index("at"), SIZINGS.index("above")),
    )
    metadata = if_then_else(all_of(runs, eq(route.path, "asm_persistent")), sizing, SIZINGS.index(None))
    return path, kernel, metadata


@dataclass(frozen=True)
class RouteKey:
    """What a diff compares: the path, the ASM kernel, the persistent metadata's sizing."""

    path: str
    kernel: str | None  # None off the ASM paths or where AITER has none (on an ASM path); or UNCHANGED
    metadata: (
        str | None
    )  # on asm_persistent: _mtp_decode_qlen "below", "at" or "above" reorder_batch_threshold

    @classmethod
    def decode(cls, codes: tuple[Any, Any, Any], names: tuple[str, ...]) -> RouteKey:
        path, kernel, metadata = (int(c) for c in codes)
        name = UNCHANGED if kernel == _UNCHANGED else None if kernel == _NOT_ASM else names[kernel]
        return cls(ROUTE_PATHS[path], None if name == NO_KERNEL else name, SIZINGS[metadata])

    def encode(self, names: tuple[str, ...]) -> tuple[int, int, int]:
        kernel = (
            _NOT_ASM
            if self.path not in ASM_PATHS
            else _UNCHANGED
            if self.kernel == UNCHANGED
            else names.index(self.kernel or NO_KERNEL)
        )
        return ROUTE_PATHS.index(self.path), kernel, SIZINGS.index(self.metadata)

    def detail(self) -> str:
        """The kernel and the metadata sizing on an ASM path; '' elsewhere."""
        if self.path not in ASM_PATHS:
            return ""
        kernel = "same kernel" if self.kernel == UNCHANGED else self.kernel or NO_KERNEL
        return kernel + ("" if self.metadata is None else f", metadata {_SIZING_TEXT[self.metadata]}")

    def text(self) -> str:
        return f"{self.path} ({self.detail()})" if self.detail() else self.path

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kernel": self.kernel, "metadata": self.metadata}


def concrete_key(revision: Revision, reg: Registry, shape: Shape) -> RouteKey:
    """The route key of one shape through the plain-Python interpretation (for a release, its own code)."""
    d = decide(revision, reg, shape)
    names = kernel_names(reg)
    kernel = resolved_kernel(reg, shape.arch, d.route.request, d.asm)
    return RouteKey.decode(route_key(d.route, kernel, names, revision.reorder_batch_threshold(shape)), names)


# --- the diff ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    """Shapes valid under both revisions, within the box, that all change the same way."""

    constraint: str
    where: dict[str, tuple]  # field -> ((lo, hi), ...) for ints, allowed values otherwise; absent: any
    old_route: RouteKey
    new_route: RouteKey
    shapes: int
    example: Shape  # the smallest shape of the region

    @property
    def new_route_taken(self) -> bool:
        """NEW sends these shapes to a path or kernel OLD did not use for them."""
        return (self.old_route.path, self.old_route.kernel) != (self.new_route.path, self.new_route.kernel)

    def to_json(self) -> dict[str, Any]:
        return {
            "constraint": self.constraint,
            "old_route": self.old_route.to_json(),
            "new_route": self.new_route.to_json(),
            "shapes": self.shapes,
            "new_route_taken": self.new_route_taken,
            "where": {
                name: [list(v) if isinstance(v, tuple) else v for v in values]
                for name, values in self.where.items()
            },
            "example": self.example.to_json(),
        }


@dataclass
class Diff:
    """The regions where NEW routes differently from OLD, and what was compared."""

    old: Revision
    new: Revision
    registry: str
    regions: list[Region]
    compared: int  # shapes of the box valid under both revisions
    valid_only_in_old: int
    valid_only_in_new: int
    fields: tuple[str, ...]  # the fields the two route keys read
    confirmed_by_z3: bool  # False only when z3 answered unknown within the time limit
    seconds: float = 0.0
    changed: int = field(init=False)

    def __post_init__(self) -> None:
        self.changed = sum(r.shapes for r in self.regions)

    @property
    def new_routes(self) -> list[Region]:
        return [r for r in self.regions if r.new_route_taken]

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old.id,
            "new": self.new.id,
            "registry": self.registry,
            "shapes_compared": self.compared,
            "shapes_changed": self.changed,
            "valid_only_in_old": self.valid_only_in_old,
            "valid_only_in_new": self.valid_only_in_new,
            "fields_read": list(self.fields),
            "confirmed_by_z3": self.confirmed_by_z3,
            "seconds": round(self.seconds, 3),
            "regions": [r.to_json() for r in self.regions],
        }


def _numeric_route(p: Problem, grid: Grid) -> Route:
    """The route on the grid; terms a revision answers in z3 (lifted real code) are evaluated on the grid.

    A model revision runs on the grid's columns (the numpy interpretation).  A release's or a file's gates
    lifted from the real code answer in z3 over the prover's variables, not over the grid, so their whole
    route is taken from the prover's encoding and evaluated on the grid: run on the grid's columns, the
    parts forward_mqa computes from the shape (numpy) would meet the lifted gates (z3) in one term, as
    0.34.0's V-scale probe does (``fp8_v_scale_fix`` reads the lifted persistent gate).
    """
    revision, reg = p.revision, p.registry
    route = revision.route(grid.view, reg) if _runs_on_columns(revision) else p.decision.route
    req = route.request
    values = [
        route.path,
        route.vllm_raises,
        route.mtp_decode_qlen,
        req.q_dtype,
        req.kv_dtype,
        req.padded_heads,
        req.kernel_qlen,
        req.persistent,
        req.causal,
        req.lse,
        req.cprr,
    ]
    symbolic = [i for i, v in enumerate(values) if z3.is_expr(v.term if isinstance(v, EnumTerm) else v)]
    done = grid.evaluate([values[i].term if isinstance(values[i], EnumTerm) else values[i] for i in symbolic])
    for i, value in zip(symbolic, done):
        values[i] = EnumTerm(values[i].values, value) if isinstance(values[i], EnumTerm) else value
    path, raises, qlen, *request = values
    return replace(
        route, path=path, vllm_raises=raises, mtp_decode_qlen=qlen, request=KernelRequest(*request)
    )


def _runs_on_columns(revision: Revision) -> bool:
    """A bundled model revision, written for the numpy interpretation (anything else, lifted real code
    above all, is evaluated from the prover's encoding: the same route, only slower)."""
    return REVISIONS.get(revision.id) is revision


def _kernel_on_grid(
    reg: Registry, names: tuple[str, ...], arch: Term, req: KernelRequest, num_reqs: Term
) -> EnumTerm:
    """resolved_kernel for every cell, evaluated once per distinct request and gathered back."""
    # (value, the values its codes index; (): the value is its own code)
    parts: list[tuple[Any, tuple[Any, ...]]] = [
        (arch, ARCHS),
        (req.q_dtype, Q_DTYPES),
        (req.kv_dtype, KERNEL_KV_DTYPES),
        (req.padded_heads, ()),
        (req.kernel_qlen, ()),
        (req.persistent, (False, True)),
        (req.causal, (False, True)),
        (req.lse, (False, True)),
        (req.cprr, (False, True)),
        (num_reqs, ()),
    ]
    domains, flat = [], np.zeros((), dtype=np.int64)
    for value, values in parts:
        codes = np.asarray(
            value.term
            if isinstance(value, EnumTerm)
            else values.index(value)
            if isinstance(value, str)
            else value
        ).astype(np.int64)
        domain = np.arange(len(values)) if values else np.unique(codes)
        flat = flat * len(domain) + (codes if values else np.searchsorted(domain, codes))
        domains.append(domain)
    used = np.flatnonzero(np.bincount(flat.ravel(), minlength=1))
    point = [d[i] for d, i in zip(domains, np.unravel_index(used, [len(d) for d in domains]))]
    t_arch = EnumTerm(ARCHS, point[0])
    t_req = KernelRequest(
        EnumTerm(Q_DTYPES, point[1]),
        EnumTerm(KERNEL_KV_DTYPES, point[2]),
        point[3],
        point[4],
        point[5].astype(bool),
        point[6].astype(bool),
        point[7].astype(bool),
        point[8].astype(bool),
    )
    kernel = resolved_kernel(reg, t_arch, t_req, asm_lookup(reg, t_arch, t_req, point[9]))
    table = np.full(int(flat.max()) + 1, -1, dtype=np.int16)
    table[used] = kernel.term if isinstance(kernel, EnumTerm) else names.index(kernel)
    return EnumTerm(names, table[flat])


def _labels(
    keys: list[tuple[Any, Any, Any]], n_names: int, shape: tuple[int, ...]
) -> tuple[np.ndarray, list]:
    """Each cell's change as a label (0: none), and per label its (old, new) key codes.

    A kernel both revisions use for a cell is coded _UNCHANGED in both, so that a change of path
    or sizing is one label, not one per kernel.  Codes stay small ints (int16), so each full-grid
    pass is cheap; labels come from a dense table of (old, new) pairs rather than a sort.
    """
    (p0, k0, m0), (p1, k1, m1) = keys
    same = (k0 == k1) & (k0 >= 0) & (k0 != n_names - 1)  # a kernel (not NO_KERNEL, the last name) kept
    width = n_names + 2
    old = np.broadcast_to(
        (np.asarray(p0, np.int16) * len(SIZINGS) + np.asarray(m0, np.int16)) * width
        + np.where(same, _UNCHANGED, k0).astype(np.int16)
        + 2,
        shape,
    )
    new = np.broadcast_to(
        (np.asarray(p1, np.int16) * len(SIZINGS) + np.asarray(m1, np.int16)) * width
        + np.where(same, _UNCHANGED, k1).astype(np.int16)
        + 2,
        shape,
    )
    span = len(ROUTE_PATHS) * len(SIZINGS) * width
    pair = old.astype(np.int32) * span + new
    seen = np.zeros(span * span, dtype=bool)
    seen[pair.ravel()] = True
    seen[np.arange(span) * (span + 1)] = False  # old == new: no change
    ids = np.where(seen, np.cumsum(seen), 0).astype(np.int32)
    changes = []
    for code in np.flatnonzero(seen).tolist():
        changes.append(tuple(_unpack_key(c, width) for c in divmod(code, span)))
    return ids[pair], changes


def _unpack_key(code: int, width: int) -> tuple[int, int, int]:
    rest, kernel = divmod(code, width)
    path, metadata = divmod(rest, len(SIZINGS))
    return path, kernel - 2, metadata


def diff(old: Revision, new: Revision, reg: Registry, timeout_ms: int = 30_000) -> Diff:
    """Every region of the box where ``new`` routes shapes valid under both revisions unlike ``old`` does."""
    start = time.perf_counter()
    p_old, p_new = problem(old, reg), problem(new, reg)
    names = kernel_names(reg)
    symbolic_keys = []
    for p in (p_old, p_new):
        route = p.decision.route
        kernel = resolved_kernel(reg, p.symbolic.view.arch, route.request, p.decision.asm)
        threshold = p.revision.reorder_batch_threshold(p.symbolic.view)
        symbolic_keys.append([as_z3(t) for t in route_key(route, kernel, names, threshold)])
    variables = p_old.symbolic.variables
    old_rules, new_rules = (
        [relevant_rule(as_z3(term), variables) for _, term in p.revision.validity(p.symbolic.view, reg)]
        for p in (p_old, p_new)
    )
    rules = list({t.get_id(): (t, reads) for t, reads in old_rules + new_rules}.values())
    key_terms = [t for key in symbolic_keys for t in key]
    program = compiled(key_terms + [t for t, _ in rules])
    key_fields = set().union(*[program.fields[r] for r in program.roots[: len(key_terms)]])
    classes = value_classes(program)
    grid = build_grid(key_fields, rules, classes)

    # One route key, term for term (a file against itself, an edit no route key reads): nothing changes,
    # and the grid need not run the routes (z3 still confirms it below).
    same = all(a.eq(b) for a, b in zip(*symbolic_keys))
    keys = []
    for p in () if same else (p_old, p_new):
        route = _numeric_route(p, grid)
        kernel = _kernel_on_grid(reg, names, grid.view.arch, route.request, grid.view.num_reqs)
        keys.append(route_key(route, kernel, names, p.revision.reorder_batch_threshold(grid.view)))
    labels, changes = _labels(keys, len(names), grid.shape) if keys else (np.zeros(grid.shape, np.int32), [])
    boxes = summarise([c.axis() for c in grid.components], labels) if changes else []
    regions = []
    for box in boxes:
        old_codes, new_codes = changes[box.label - 1]
        change = (RouteKey.decode(old_codes, names), RouteKey.decode(new_codes, names))
        regions.append(_region(box, grid, labels, change))
    regions.sort(
        key=lambda r: (
            ROUTE_PATHS.index(r.old_route.path),
            ROUTE_PATHS.index(r.new_route.path),
            r.old_route.text(),
            r.new_route.text(),
            -r.shapes,
        )
    )
    for r in regions:
        _rerun(old, new, reg, r)
    confirmed = _confirm_with_z3(p_old, p_new, symbolic_keys, regions, names, timeout_ms)
    ids = {t.get_id() for t, _ in rules}
    only_in_old, only_in_new = (
        0 if {t.get_id() for t, _ in own} == ids else count_valid(own, classes) - grid.shapes
        for own in (old_rules, new_rules)
    )
    return Diff(
        old,
        new,
        reg.id,
        regions,
        grid.shapes,
        only_in_old,
        only_in_new,
        tuple(f.name for f in FIELDS if f.name in key_fields),
        confirmed,
        time.perf_counter() - start,
    )


def _region(box: Box, grid: Grid, labels: np.ndarray, change: tuple[RouteKey, RouteKey]) -> Region:
    """A box as a region: its shapes counted on the grid, where it must hold only its own change."""
    rows = [np.flatnonzero(mask) for mask in box.rows]
    if not (labels[np.ix_(*rows)] == box.label).all():
        raise DiffDisagreement(f"region {box.constraint!r} holds shapes of another change")
    shapes = grid.factor * int(np.prod([int(c.weight[r].sum()) for c, r in zip(grid.components, rows)]))
    example: dict[str, Any] = {}
    for c, r in zip(grid.components, rows):
        cols = {f: c.rows[f][r] for f in c.fields}
        # np.lexsort: the last key is the primary one; the other fields prefer their Shape default.
        order = [cols[f] != default_codes(f, cols) for f in reversed(c.fields) if f not in SMALLEST_FIRST]
        order += [cols[f] for f in reversed(SMALLEST_FIRST) if f in cols]
        best = r[np.lexsort(order)[0]]
        example.update({f: decode_value(f, v[best]) for f, v in {**c.rows, **c.rest}.items()})
    return Region(box.constraint, box.where, change[0], change[1], shapes, Shape(**example))


def _rerun(old: Revision, new: Revision, reg: Registry, region: Region) -> None:
    """The region's smallest shape, re-run through the plain-Python interpretation of both revisions."""
    s = region.example
    if not (old.is_valid(s, reg) and new.is_valid(s, reg)):
        raise DiffDisagreement(f"{s} of region {region.constraint!r} is not valid under both revisions")
    seen = (concrete_key(old, reg, s), concrete_key(new, reg, s))
    if (
        seen[0].path in ASM_PATHS
        and seen[1].path in ASM_PATHS
        and seen[0].kernel == seen[1].kernel is not None
    ):
        seen = (replace(seen[0], kernel=UNCHANGED), replace(seen[1], kernel=UNCHANGED))
    if seen != (region.old_route, region.new_route):
        raise DiffDisagreement(
            f"{s}: Python says {seen[0].text()} -> {seen[1].text()}, the grid "
            f"{region.old_route.text()} -> {region.new_route.text()}"
        )


def _where_z3(where: dict[str, tuple], variables: dict[str, Any]) -> Any:
    terms = []
    for name, allowed in where.items():
        spec, var = FIELD_BY_NAME[name], variables[name]
        if spec.kind == "int":
            terms.append(z3.Or(*[z3.And(var >= lo, var <= hi) for lo, hi in allowed]))
        elif spec.kind == "enum":
            terms.append(z3.Or(*[var == spec.values.index(v) for v in allowed]))
        else:
            terms.append(z3.Or(*[var == z3.BoolVal(v) for v in allowed]))
    return z3.And(*terms)


def _change_is(old_key: list[Any], new_key: list[Any], region: Region, names: tuple[str, ...]) -> Any:
    """z3: the shape's (old, new) keys are the region's change."""
    (po, ko, mo), (pn, kn, mn) = region.old_route.encode(names), region.new_route.encode(names)
    same = [old_key[0] == po, old_key[2] == mo, new_key[0] == pn, new_key[2] == mn]
    if ko == _UNCHANGED:  # one kernel, whichever, in both (not "no kernel", which regions name)
        return z3.And(*same, old_key[1] == new_key[1], old_key[1] >= 0, old_key[1] != names.index(NO_KERNEL))
    return z3.And(*same, old_key[1] == ko, new_key[1] == kn)


def _confirm_with_z3(
    p_old: Problem,
    p_new: Problem,
    keys: list[list[Any]],
    regions: list[Region],
    names: tuple[str, ...],
    timeout_ms: int,
) -> bool:
    """Prove within the box: each region holds only its change, and every changed shape is in a region.

    True when proved; False when z3 answers unknown in time; a counterexample raises DiffDisagreement.
    """
    variables = p_old.symbolic.variables
    old_key, new_key = keys
    inside = [_where_z3(r.where, variables) for r in regions]
    wrong = [z3.And(cond, z3.Not(_change_is(old_key, new_key, r, names))) for cond, r in zip(inside, regions)]
    outside = z3.And(z3.Or(*[a != b for a, b in zip(old_key, new_key)]), z3.Not(z3.Or(*inside)))
    # Preprocessing first (the box pins most fields to few values): several times faster than z3's default.
    s = z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()
    s.set("timeout", timeout_ms)
    s.add(*p_old.constraints, *p_new.constraints, *box_constraints(variables), z3.Or(*wrong, outside))
    answer = s.check()
    if answer == z3.sat:
        shape = p_old.symbolic.to_shape(s.model())
        raise DiffDisagreement(f"z3 finds {shape} misplaced by the regions of the diff")
    return answer == z3.unsat
