"""Readable regions: a labelled grid of shapes written as a few boxes per label.

:mod:`spec.analyses.diff` lays the shapes out as a product grid, one numpy axis per
group of fields (an :class:`Axis`: its valid rows), and labels every cell with
the change it sees there (0: none).  Here each label becomes a few disjoint
boxes (per field a set of values; a shape is in a box when every field is in
its set), each written as a conjunction a maintainer can read:

1. Values no cell tells apart are merged first: two values of a field are
   merged when swapping them in every row of the field's axis maps rows to
   rows that carry the same labels along every other axis (heads 1, 2, 4 and 8
   under a gate that tests ``16 % h == 0``, where they change alike).  The
   grid shrinks by orders of magnitude and nothing a box can say is lost.
2. A decision tree over the merged fields splits the grid until every leaf
   holds one label (ID3's information gain, Quinlan, "Induction of decision
   trees", 1986).  A split groups a field's values by the set of labels they
   see, so one split reads "heads in {1, 2, 4, 8}", not one branch per value.
3. Boxes of one label that differ in a single field are merged (the union of
   two boxes equal elsewhere is a box), as in C4.5's rule post-pruning, after
   each box's sets are cut to the values its rows actually take.
4. Each box is written field by field.  A field whose every value that occurs
   in the box's context is allowed is left out; an int set becomes runs lo..hi
   over the values that occur (a value no valid shape of the box takes may
   fall inside a run); an enum set is written by what it excludes when that is
   shorter.  Each rewrite keeps exactly the same rows, and is checked to.

Values are handled as positions in the field's box (``FieldSpec.box``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mla_model.shape import FIELD_BY_NAME, GIB

# How a constraint names a field (the words of shape_summary in conformance/cli/render/text.py).
LABELS = {
    "kv_cache_dtype": "kv",
    "q_dtype": "q",
    "num_heads": "heads",
    "max_qo_len": "qlen",
    "spec_method": "drafter",
    "num_spec_tokens": "k",
    "dcp_world_size": "dcp",
    "asm_padding_mode": "mode",
    "num_reqs": "reqs",
    "kv_cache_bytes": "kv_bytes",
}
# The order fields are written in; reversed, the order in which an implied one is left out
# (a drafter's qlen bound before the drafter, the dtype before the arch).
READING_ORDER = (
    "arch",
    "kv_cache_dtype",
    "q_dtype",
    "num_heads",
    "max_qo_len",
    "spec_method",
    "num_spec_tokens",
    "dcp_world_size",
    "asm_padding_mode",
    "num_reqs",
    "gluon_build",
    "causal",
    "kv_cache_bytes",
)


@dataclass(frozen=True)
class Axis:
    """One axis of the grid: the valid rows of a group of fields, each value as its position in its box.

    A row's value may stand for several (values the grid's terms cannot tell apart): ``members``
    maps each position that occurs to the positions it stands for.
    """

    fields: tuple[str, ...]
    rows: dict[str, np.ndarray]
    members: dict[str, dict[int, np.ndarray]]

    def expand(self, name: str, positions: np.ndarray) -> np.ndarray:
        return (
            np.concatenate([self.members[name][int(p)] for p in positions]) if len(positions) else positions
        )

    @property
    def size(self) -> int:
        return len(next(iter(self.rows.values())))


@dataclass(frozen=True)
class Box:
    """A region of one label: the constraint per constrained field, and the rows of each axis it holds."""

    label: int
    where: dict[str, tuple]  # int field: ((lo, hi), ...) runs; enum or bool field: the allowed values
    rows: tuple[np.ndarray, ...]  # per axis, a mask over its rows

    @property
    def constraint(self) -> str:
        parts = [_field_text(name, self.where[name]) for name in READING_ORDER if name in self.where]
        return ", ".join(parts) if parts else "every shape"


def summarise(axes: list[Axis], labels: np.ndarray) -> list[Box]:
    """Disjoint boxes (one dim per axis) holding exactly the cells of each label > 0 of ``labels``."""
    merged = [_merge_values(axis, sig) for axis, sig in zip(axes, _slice_classes(labels))]
    small = labels[np.ix_(*[m.representative for m in merged])]
    grids = np.meshgrid(*[np.arange(len(m.representative)) for m in merged], indexing="ij")
    columns = {name: m.classes[name][grid].ravel() for m, grid in zip(merged, grids) for name in m.classes}
    order = tuple(name for name in READING_ORDER if name in columns)
    every = {name: frozenset(range(len(_merged_of(name, merged).members[name]))) for name in order}
    leaves = _tree(columns, small.ravel(), order)
    boxes = []
    for label in sorted({label for label, _ in leaves}):
        full = [{**every, **box} for lab, box in leaves if lab == label]
        for box in _merge_boxes(full, merged):
            boxes.append(_written(label, box, axes, merged))
    return boxes


# --- 1. values no cell tells apart ----------------------------------------------------------------


@dataclass(frozen=True)
class _Merged:
    classes: dict[str, np.ndarray]  # field -> class id of each merged row
    members: dict[str, list[np.ndarray]]  # field -> class id -> the positions it merges
    representative: np.ndarray  # merged row -> one original row


def _merged_of(name: str, merged: list[_Merged]) -> _Merged:
    return next(m for m in merged if name in m.classes)


def _slice_classes(labels: np.ndarray) -> list[np.ndarray]:
    """Per axis, per row, an id shared by exactly the rows whose label slices (all other axes) are equal.

    Largest axis first: once an axis is cut to one row per id, the slices along every other axis
    compare the same on the cut array (rows of one id agree everywhere), which is far smaller.
    """
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * labels.ndim
    for axis in sorted(range(labels.ndim), key=lambda a: -labels.shape[a]):
        moved = np.moveaxis(labels, axis, 0).reshape(labels.shape[axis], -1)
        # Hash each slice with a random linear form, then check every slice against its id's first one.
        digest = moved.astype(np.float64) @ np.random.default_rng(0).random(moved.shape[1])
        _, first, ids = np.unique(digest, return_index=True, return_inverse=True)
        if not (moved == moved[first[ids]]).all():  # a collision: compare the slices themselves
            _, first, ids = np.unique(moved, axis=0, return_index=True, return_inverse=True)
        out[axis] = ids.ravel()
        labels = np.take(labels, first, axis=axis)
    return out


def _merge_values(axis: Axis, sig: np.ndarray) -> _Merged:
    """Classes of each field's values on one axis: values whose rows, the field swapped, are the same rows
    with the same slice ids (``sig``); then the axis's rows as tuples of classes, one representative each."""
    classes_of_row, members = {}, {}
    n_sig = int(sig.max()) + 1
    for name in axis.fields:
        positions = axis.rows[name]
        key = np.zeros(len(positions), dtype=np.int64)
        for other in axis.fields:
            if other != name:
                key = key * (len(FIELD_BY_NAME[other].box)) + axis.rows[other]
        key = key * n_sig + sig
        order = np.lexsort((key, positions))
        present, starts = np.unique(positions[order], return_index=True)
        ends = np.append(starts[1:], len(order))
        seen: dict[bytes, int] = {}
        class_of = np.zeros(len(FIELD_BY_NAME[name].box), dtype=np.int64)
        for p, a, b in zip(present.tolist(), starts, ends):
            class_of[p] = seen.setdefault(key[order[a:b]].tobytes(), len(seen))
        members[name] = [present[class_of[present] == c] for c in range(len(seen))]
        classes_of_row[name] = class_of[positions]
    _, representative = np.unique(
        np.stack([classes_of_row[n] for n in axis.fields], axis=1), axis=0, return_index=True
    )
    return _Merged({n: classes_of_row[n][representative] for n in axis.fields}, members, representative)


def _in(column: np.ndarray, allowed: frozenset | np.ndarray, size: int) -> np.ndarray:
    """Membership of small non-negative ints in a set, by table lookup."""
    if isinstance(allowed, frozenset):
        return _table(allowed, size)[column]
    table = np.zeros(size, dtype=bool)
    table[allowed] = True
    return table[column]


@lru_cache(maxsize=4096)
def _table(allowed: frozenset, size: int) -> np.ndarray:
    table = np.zeros(size, dtype=bool)
    table[list(allowed)] = True
    return table


# --- 2. the decision tree -------------------------------------------------------------------------


def _entropy(counts: np.ndarray) -> np.ndarray:
    """Shannon entropy (bits) of each row of label counts."""
    total = counts.sum(axis=-1, keepdims=True)
    p = counts / np.maximum(total, 1)
    return -(p * np.log2(np.where(p > 0, p, 1))).sum(axis=-1)


_HASH = np.random.default_rng(0).integers(1, 2**62, size=1 << 16, dtype=np.int64)


def _best_split(
    columns: dict[str, np.ndarray],
    sizes: dict[str, int],
    idx: np.ndarray,
    lab: np.ndarray,
    order: tuple[str, ...],
    n_labels: int,
) -> tuple[str, list[np.ndarray]]:
    """The field and value groups that gain most information; ties: fewer branches, then reading order."""
    base = float(_entropy(np.bincount(lab, minlength=n_labels)))
    best: tuple[tuple, str, np.ndarray, np.ndarray] | None = None
    for rank, name in enumerate(order):
        col = columns[name][idx]
        if col.min() == col.max():
            continue
        counts = np.bincount(col * n_labels + lab, minlength=sizes[name] * n_labels).reshape(
            sizes[name], n_labels
        )
        present = np.flatnonzero(counts.any(axis=1))
        counts = counts[present]
        # Group the values by the set of labels they see (hashed; a collision only makes a coarser split).
        _, group = np.unique((counts > 0) @ _HASH[:n_labels], return_inverse=True)
        group = group.ravel() if group.max() > 0 else np.arange(len(present))
        branch = (group[None, :] == np.arange(int(group.max()) + 1)[:, None]).astype(np.int64) @ counts
        rest = float((_entropy(branch) * branch.sum(axis=1)).sum()) / len(idx)
        score = (round(base - rest, 9), -len(branch), -rank)
        if best is None or score > best[0]:
            best = (score, name, present, group)
    assert best is not None, "an impure node has a field that tells its cells apart"
    _, name, present, group = best
    return name, [present[group == g] for g in range(int(group.max()) + 1)]


def _tree(
    columns: dict[str, np.ndarray], labels: np.ndarray, order: tuple[str, ...]
) -> list[tuple[int, dict]]:
    """Leaves as (label, {field: class ids}); a field not split on is unconstrained."""
    n_labels = int(labels.max()) + 1
    sizes = {name: int(col.max()) + 1 for name, col in columns.items()}
    leaves: list[tuple[int, dict]] = []
    stack: list[tuple[np.ndarray, dict[str, frozenset[int]]]] = [(np.arange(len(labels)), {})]
    while stack:
        idx, box = stack.pop()
        lab = labels[idx]
        if (lab == lab[0]).all():
            leaves.append((int(lab[0]), box))
            continue
        name, branches = _best_split(columns, sizes, idx, lab, order, n_labels)
        col = columns[name][idx]
        for branch in branches:
            allowed = frozenset(branch.tolist())
            stack.append((idx[_in(col, allowed, sizes[name])], {**box, name: allowed}))
    return [(label, box) for label, box in leaves if label > 0]


# --- 3. merging boxes -----------------------------------------------------------------------------


class _Rows:
    """The merged rows each axis holds under a box (field -> class ids), memoised per axis and sets."""

    def __init__(self, merged: list[_Merged]) -> None:
        self.merged = merged
        self.seen: dict[tuple, np.ndarray] = {}

    def __call__(self, box: dict, a: int) -> np.ndarray:
        m = self.merged[a]
        key = (a, *[box[n] for n in m.classes])
        if key not in self.seen:
            mask = np.ones(len(m.representative), dtype=bool)
            for name in m.classes:
                mask &= _in(m.classes[name], box[name], len(m.members[name]))
            self.seen[key] = mask
        return self.seen[key]

    def shrunk(self, box: dict) -> dict:
        """Each field's classes cut to those the box's rows take (the same rows, the tightest sets)."""
        box = dict(box)
        for a, m in enumerate(self.merged):
            rows = self(box, a)
            for name in m.classes:
                box[name] = frozenset(np.unique(m.classes[name][rows]).tolist())
        return box

    def union(self, a: dict, b: dict) -> dict | None:
        """``a`` and ``b`` as one box when they hold the same rows as boxes that differ in one field only.

        Every other field where they differ takes the union of the two sets, which must add no row
        to either box: the values it adds are ones no valid shape of that box takes ("drafter not in
        {mtp, deepseek_mtp}, qlen 5..16" and "qlen 17..31" unify: only parallel drafters reach 17).
        """
        differ = [n for n in a if a[n] != b[n]]
        if len(differ) == 1:
            return self.shrunk({**a, differ[0]: a[differ[0]] | b[differ[0]]})
        for name in differ:
            widened = {g: a[g] | b[g] for g in differ if g != name}
            axes = [i for i, m in enumerate(self.merged) if widened.keys() & m.classes.keys()]
            if all((self({**box, **widened}, i) == self(box, i)).all() for i in axes for box in (a, b)):
                return self.shrunk({**a, **widened, name: a[name] | b[name]})
        return None


def _merge_boxes(boxes: list[dict], merged: list[_Merged]) -> list[dict]:
    """Merge until nothing merges: boxes equal but in one field, then pairs unified modulo absent values."""
    rows = _Rows(merged)
    boxes = [rows.shrunk(b) for b in boxes]
    while True:
        boxes = _merge_equal_but_one(boxes, rows)
        found = next(
            (
                (i, j, u)
                for i in range(len(boxes))
                for j in range(i + 1, len(boxes))
                for u in [rows.union(boxes[i], boxes[j])]
                if u is not None
            ),
            None,
        )
        if found is None:
            return boxes
        i, j, union = found
        boxes[i] = union
        del boxes[j]


def _merge_equal_but_one(boxes: list[dict], rows: _Rows) -> list[dict]:
    """Merge every group of boxes that agree on all fields but one, until none does."""
    fields = list(boxes[0]) if boxes else []
    changed = True
    while changed:
        changed = False
        for name in fields:
            groups: dict[tuple, list[dict]] = {}
            for box in boxes:
                groups.setdefault(tuple(box[n] for n in fields if n != name), []).append(box)
            if any(len(g) > 1 for g in groups.values()):
                boxes = [
                    g[0]
                    if len(g) == 1
                    else rows.shrunk({**g[0], name: frozenset().union(*[b[name] for b in g])})
                    for g in groups.values()
                ]
                changed = True
    return boxes


# --- 4. writing a box -----------------------------------------------------------------------------


def _written(label: int, box: dict, axes: list[Axis], merged: list[_Merged]) -> Box:
    """The box over positions, each field rewritten from least to most telling, rows kept exactly."""
    allowed: dict[str, np.ndarray] = {}
    inside: dict[str, np.ndarray] = {}  # per field, the rows of its axis whose value it allows
    axis_of: dict[str, Axis] = {}
    for axis, m in zip(axes, merged):
        for name in axis.fields:
            allowed[name] = axis.expand(name, np.concatenate([m.members[name][c] for c in sorted(box[name])]))
            inside[name] = _in(axis.rows[name], allowed[name], len(FIELD_BY_NAME[name].box))
            axis_of[name] = axis
    masks = tuple(np.logical_and.reduce([inside[n] for n in axis.fields]) for axis in axes)
    where = {}
    for name in reversed(READING_ORDER):
        if name not in allowed:
            continue
        axis = axis_of[name]
        context = np.logical_and.reduce(
            [inside[n] for n in axis.fields if n != name] or [np.ones(axis.size, bool)]
        )
        present = np.unique(axis.expand(name, np.unique(axis.rows[name][context])))
        if np.isin(present, allowed[name]).all():
            allowed[name] = np.arange(len(FIELD_BY_NAME[name].box))  # left out: any value
            inside[name] = np.ones(axis.size, dtype=bool)
            continue
        where[name], allowed[name] = _rewritten(name, present, allowed[name])
        inside[name] = _in(axis.rows[name], allowed[name], len(FIELD_BY_NAME[name].box))
        assert (np.logical_and.reduce([inside[n] for n in axis.fields]) == masks[axes.index(axis)]).all(), (
            name
        )
    return Box(label, where, masks)


def _rewritten(name: str, present: np.ndarray, allowed: np.ndarray) -> tuple[tuple, np.ndarray]:
    """One field's constraint and the positions it admits, widened only by positions absent from ``present``.

    Ints: runs of consecutive present values, as (lo, hi) when three or more long, else one by one.
    Enums and booleans: the allowed values that occur, or, when fewer are excluded than allowed,
    every value but the excluded ones (written "mode≠asm").
    """
    spec = FIELD_BY_NAME[name]
    box = np.array(spec.values if spec.kind == "enum" else spec.box, dtype=object)
    inside = np.isin(present, allowed)
    if spec.kind != "int":
        kept, excluded = present[inside], present[~inside]
        admitted = np.setdiff1d(np.arange(len(box)), excluded) if len(excluded) < len(kept) else kept
        return tuple(box[admitted].tolist()), admitted
    intervals, start = [], None
    for i, ok in enumerate(inside.tolist() + [False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            run = [int(v) for v in box[present[start:i]]]
            intervals += [(run[0], run[-1])] if len(run) >= 3 else [(v, v) for v in run]
            start = None
    values = box.astype(np.int64)
    return tuple(intervals), np.flatnonzero(
        np.logical_or.reduce([(values >= lo) & (values <= hi) for lo, hi in intervals])
    )


def _field_text(name: str, allowed: tuple) -> str:
    spec = FIELD_BY_NAME[name]
    label = LABELS.get(name, name)
    if spec.kind == "bool":
        return label if allowed == (True,) else f"not {label}"
    if spec.kind == "enum":
        if name == "arch" and len(allowed) == 1:
            return allowed[0]
        if name == "spec_method" and allowed == ("none",):
            return "no drafter"
        excluded = [v for v in spec.values if v not in allowed]
        if len(allowed) == 1:
            return f"{label}={allowed[0]}"
        if len(excluded) == 1:
            return f"{label}≠{excluded[0]}"
        if len(excluded) < len(allowed):
            return f"{label} not in {{{', '.join(excluded)}}}"
        return f"{label} in {{{', '.join(allowed)}}}"
    runs = [
        _int_text(name, lo) if lo == hi else f"{_int_text(name, lo)}..{_int_text(name, hi)}"
        for lo, hi in allowed
    ]
    return f"{label}={runs[0]}" if len(runs) == 1 else f"{label} in {{{', '.join(runs)}}}"


def _int_text(name: str, value: int) -> str:
    """KV-cache bytes in GiB (the box holds both sides of the 2 GiB Gluon bound), other ints as they are."""
    if name != "kv_cache_bytes":
        return str(value)
    gib, rest = divmod(value, GIB)
    return f"{gib} GiB" + (f"+{rest}" if rest else "")
