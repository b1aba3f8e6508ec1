"""One gate definition, three interpretations.

Every gate, derived value and invariant in mla-spec is written once against the
small vocabulary below.  Each function looks at the type of its operands and
evaluates them as

* plain Python values (``bool``, ``int``, ``str``): one concrete shape;
* numpy arrays: millions of shapes at once (exhaustive sweeps, cross-checks);
* z3 terms: the symbolic shape the prover reasons about.

This is the Rosette idea (the same program runs concretely and symbolically),
so the model that is proved is the model that is executed.

Enumerations (arch, kv-cache dtype, route path, ...) are plain strings in the
Python interpretation.  In the numpy and z3 interpretations they are wrapped in
:class:`EnumTerm`, which carries the enumeration's value list so that
``is_in(term, ("fp8", "fp8_e4m3"))`` can translate names to codes.

In the numpy interpretation a value that is the same on every row may be a numpy
scalar instead of an array (it broadcasts like the array it stands for).  The
operations settle such values and short-cut on them: ``all_of`` with one operand
false everywhere is false without a pass over the others, ``if_then_else`` with
one condition for every row returns that branch.  Callers broadcast
(``np.broadcast_to``) where they need a row per shape.

z3 is imported lazily: the GPU replay machine has no z3, and nothing there
builds symbolic terms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

# A value in any of the three interpretations: a Python bool/int/str, a numpy array, a z3 term (or an
# EnumTerm over one).  It cannot be named more precisely without importing z3, which the replay machine lacks.
Term = Any

try:  # the GPU replay machine has no z3; only the prover needs it
    import z3
except ImportError:  # pragma: no cover - exercised on machines without z3
    z3 = None


@dataclass(frozen=True)
class EnumTerm:
    """A symbolic or vectorised value of an enumeration: codes index ``values``."""

    values: tuple[str, ...]
    term: Any  # numpy integer array or z3 Int

    def code(self, name: str) -> int:
        try:
            return self.values.index(name)
        except ValueError:
            raise ValueError(f"{name!r} is not one of {self.values}") from None


def _is_z3(x: Any) -> bool:
    return z3 is not None and isinstance(x, z3.ExprRef)


# z3 terms already built, by operation and operands: the same gate reads the same conditions many times
# (the kernel table's rows repeat every arch and dtype test), and z3 shares equal terms anyway, so a term
# built once is handed out again instead of going through z3's Python layer a second time.  Operands are
# keyed by their AST's address, and kept alive with the entry, so an address is never reused while it
# is a key.
_MEMO: dict[tuple, tuple[Any, tuple]] = {}
_MEMO_LIMIT = 200_000


def _memo_key(x: Any) -> Any:
    """An operand as part of a memo key: a z3 term by its AST's address, a plain value as itself."""
    if isinstance(x, z3.AstRef):
        return x.ast.value
    return (type(x).__name__, x)


def _z3_and(args: Sequence[Any]) -> Any:
    """``z3.And`` of z3 booleans, without its coercion pass (the same term)."""
    return _z3_nary(z3.Z3_mk_and, args)


def _z3_or(args: Sequence[Any]) -> Any:
    """``z3.Or`` of z3 booleans, without its coercion pass (the same term)."""
    return _z3_nary(z3.Z3_mk_or, args)


def _z3_nary(make: Any, args: Sequence[Any]) -> Any:
    ctx = args[0].ctx
    array = (z3.Ast * len(args))(*[a.as_ast() for a in args])
    return z3.BoolRef(make(ctx.ref(), len(args), array), ctx)


def built_once(op: str, operands: tuple, extra: Any, build: Any) -> Any:
    """``build()``, remembered under (op, operands, extra): the z3 terms that the logic vocabulary, the
    lifted real gates (:mod:`spec.realcode.symexec`) and the prover's descents ask for again and again are
    built once.  ``build`` must depend on nothing but the key."""
    key = (op, extra, *map(_memo_key, operands))
    hit = _MEMO.get(key)
    if hit is not None:
        return hit[0]
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    term = build()
    _MEMO[key] = (term, operands)
    return term


def _is_array(x: Any) -> bool:
    """A numpy array of at least one dimension: a value that may differ from row to row."""
    return isinstance(x, np.ndarray) and x.ndim > 0


def narrow_int_dtype(*values: int) -> np.dtype:
    """The integer dtype the numpy interpretation gives these values: int32 while every magnitude is below
    2**10, so any product of three of them still fits (the widest the model forms is dcp * heads * qlen);
    else int64.  Narrow arrays halve the memory every operation streams through."""
    return np.dtype(np.int32 if all(abs(int(v)) < 2**10 for v in values) else np.int64)


def _np_value(x: Any) -> Any:
    """``x`` as a numpy value: a plain Python bool or int becomes the numpy scalar of the same value."""
    return x if isinstance(x, (np.ndarray, np.generic)) else np.asarray(x)[()]


def _kind(*xs: Any) -> str:
    """'z3', 'np' or 'py': the interpretation the operands ask for."""
    kind = "py"
    for x in xs:
        if isinstance(x, EnumTerm):
            x = x.term
        if _is_z3(x):
            return "z3"
        if isinstance(x, (np.ndarray, np.generic)):
            kind = "np"
    return kind


# --- booleans -------------------------------------------------------------------------


def all_of(*xs: Any) -> Any:
    """Conjunction; ``all_of()`` is true."""
    if all(type(x) is bool for x in xs):  # one shape: the common case of the Python interpretation
        return all(xs)
    kind = _kind(*xs)
    if kind == "z3":
        return (
            built_once("and", xs, None, lambda: _z3_and([_as_z3_bool(x) for x in xs]))
            if xs
            else z3.BoolVal(True)
        )
    if kind == "np":
        return _np_fold(np.logical_and, xs, absorbing=False)
    return all(bool(x) for x in xs)


def any_of(*xs: Any) -> Any:
    """Disjunction; ``any_of()`` is false."""
    if all(type(x) is bool for x in xs):
        return any(xs)
    kind = _kind(*xs)
    if kind == "z3":
        return (
            built_once("or", xs, None, lambda: _z3_or([_as_z3_bool(x) for x in xs]))
            if xs
            else z3.BoolVal(False)
        )
    if kind == "np":
        return _np_fold(np.logical_or, xs, absorbing=True)
    return any(bool(x) for x in xs)


def _settle(x: Any) -> Any:
    """A boolean array that holds one value everywhere, as that numpy bool; anything else unchanged.

    In the numpy interpretation a value that is the same on every row may be a numpy scalar (or a 0-d
    array), which broadcasts like the uniform array it stands for and lets the operations that consume
    it short-cut (below); it stays a numpy value, so what is computed from it stays in the numpy
    interpretation (``choose`` still answers an EnumTerm).  The test costs far less than the pass over
    the array it can save: ``any`` and ``all`` stop at the first witness.
    """
    if not _is_array(x) or x.dtype != bool:
        return x
    if not x.any():
        return np.False_
    return np.True_ if x.all() else x


def _np_fold(op: Any, xs: Sequence[Any], absorbing: bool) -> Any:
    """``op`` (and/or) over arrays mixed with plain booleans, as the numpy interpretation.

    An operand equal to ``absorbing`` (False for and, True for or) everywhere decides the result at
    once, and the other plain operands drop out, so an operand fixed for a whole sweep costs no pass
    over the arrays.  Arrays are combined in place where the shape allows: one new array, not n - 1.
    """
    arrays = []
    for x in map(_settle, xs):
        if _is_array(x):
            arrays.append(x)
        elif bool(x) == absorbing:
            return np.bool_(absorbing)
    if not arrays:
        return np.bool_(not absorbing)
    if len(arrays) == 1:
        return arrays[0]
    out = op(arrays[0], arrays[1])
    for x in arrays[2:]:
        out = op(out, x, out=out) if x.shape == out.shape else op(out, x)
    return _settle(out)


def not_(x: Any) -> Any:
    if type(x) is bool:
        return not x
    kind = _kind(x)
    if kind == "z3":
        return built_once("not", (x,), None, lambda: z3.Not(x))
    if kind == "np":
        return np.logical_not(_settle(x))
    return not x


def implies(a: Any, b: Any) -> Any:
    return any_of(not_(a), b)


def iff(a: Any, b: Any) -> Any:
    return any_of(all_of(a, b), all_of(not_(a), not_(b)))


def _as_z3_bool(x: Any) -> Any:
    if _is_z3(x):
        return x
    if isinstance(x, (bool, np.bool_)):
        return z3.BoolVal(bool(x))
    raise TypeError(f"not a boolean: {x!r}")


# --- choice ---------------------------------------------------------------------------


def if_then_else(cond: Any, then: Any, other: Any) -> Any:
    """``then`` where ``cond`` holds, else ``other`` (ints or booleans)."""
    kind = _kind(cond, then, other)
    if kind == "z3":
        return built_once(
            "ite",
            (cond, then, other),
            None,
            lambda: z3.If(_as_z3_bool(cond), _lift_z3(then), _lift_z3(other)),
        )
    if kind == "np":
        cond = _settle(cond)
        if _is_array(cond):
            return _np_where(cond, then, other)
        return _np_value(then if cond else other)  # one condition for every row picks one branch
    return then if cond else other


def _np_where(cond: np.ndarray, then: Any, other: Any) -> np.ndarray:
    """``np.where(cond, then, other)``, branch-free for integers: ``other + cond * (then - other)``.

    np.where branches per element and pays for every misprediction; the arithmetic form is three
    streaming passes and exact, since numpy's integer arithmetic wraps (``then - other`` may wrap, adding
    ``other`` back wraps it home).  Two plain ints take :func:`narrow_int_dtype`, as box columns do.
    """
    plain = [x for x in (then, other) if type(x) is int]
    dtype = narrow_int_dtype(*plain) if len(plain) == 2 else np.result_type(then, other)
    if dtype.kind != "i":
        return np.where(cond, then, other)
    then, other = np.asarray(then, dtype=dtype), np.asarray(other, dtype=dtype)
    return other + cond * (then - other)


def _lift_z3(x: Any) -> Any:
    if _is_z3(x):
        return x
    if isinstance(x, (bool, np.bool_)):
        return z3.BoolVal(bool(x))
    return z3.IntVal(int(x))


def choose(values: Sequence[str], cases: Iterable[tuple[Any, str]], default: str) -> Any:
    """First-match selection of an enumeration value, like an ``if/elif/else`` chain.

    ``cases`` are ``(condition, value)`` pairs tried in order; ``default`` is the
    ``else``.  Returns a string (Python) or an :class:`EnumTerm` over ``values``.
    """
    values = tuple(values)
    cases = list(cases)
    kind = _kind(*[c for c, _ in cases])
    if kind == "py":
        for cond, value in cases:
            if cond:
                return value
        return default
    if kind == "np":
        return _np_choose(values, cases, default)
    conds = tuple(c for c, _ in cases)
    return built_once(
        "choose",
        conds,
        (values, tuple(v for _, v in cases), default),
        lambda: _z3_choose(values, cases, default),
    )


def _z3_choose(values: tuple[str, ...], cases: list[tuple[Any, str]], default: str) -> EnumTerm:
    term = z3.IntVal(values.index(default))
    for cond, value in reversed(cases):
        term = z3.If(_as_z3_bool(cond), z3.IntVal(values.index(value)), term)
    return EnumTerm(values, term)


def _np_choose(values: tuple[str, ...], cases: list[tuple[Any, str]], default: str) -> EnumTerm:
    """``choose`` over numpy conditions: codes of the broadcast shape of the array conditions.

    Conditions that hold one value everywhere settle first: a false one drops out, a true one ends
    the chain as its ``else`` (later cases are never reached).  The other conditions then overwrite
    the codes last to first, so the first that holds wins; each overwrite is the branch-free
    ``out += cond * (code - out)`` on int8 codes (a masked copy branches per element and is tens of
    times slower on a mask that is not sorted).
    """
    shape = np.broadcast_shapes(*[np.shape(c) for c, _ in cases])
    live = []
    for cond, value in ((_settle(c), v) for c, v in cases):
        if _is_array(cond):
            live.append((np.asarray(cond, dtype=bool), value))
        elif cond:
            default = value
            break
    out = np.full(shape, values.index(default), dtype=np.int8)
    for cond, value in reversed(live):
        step = np.int8(values.index(value)) - out
        step *= cond
        out += step
    return EnumTerm(values, out)


# --- functions of few small values -----------------------------------------------------


def tabulated(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` for a pure function of a few integer, boolean or enumeration values.

    ``fn`` must read no per-row value except through ``args``: a value it closes over is the same on every
    row (pass anything else as an argument).  z3 and Python: ``fn(*args)``.  numpy: where the array
    arguments are integer, boolean or enumeration columns of one length whose values span a grid (the
    product of their ranges) of at most a quarter as many cells as there are rows, ``fn`` runs once on
    that grid (in the numpy interpretation, each cell a row) and every row takes its cell, by one index
    computed in place and one gather; else ``fn(*args)`` on the rows.  The result is the same (an
    enumeration stays one): a lookup that costs several passes per row (a kernel-table request, say) then
    costs a pass per argument.
    """
    if _kind(*args) != "np":
        return fn(*args)
    columns = [(i, a.term if isinstance(a, EnumTerm) else a) for i, a in enumerate(args)]
    columns = [(i, col) for i, col in columns if _is_array(col)]
    if not columns or any(c.dtype.kind not in "biu" or c.shape != columns[0][1].shape for _, c in columns):
        return fn(*args)
    bounds = [(int(col.min()), int(col.max())) for _, col in columns]
    sizes = [hi - lo + 1 for lo, hi in bounds]
    cells = math.prod(sizes)
    if cells * 4 > columns[0][1].size:
        return fn(*args)
    axes = np.indices(sizes).reshape(len(sizes), -1)
    grid_args = list(args)
    for (i, col), (lo, _), axis in zip(columns, bounds, axes):
        cell = (axis + lo).astype(col.dtype)
        grid_args[i] = EnumTerm(args[i].values, cell) if isinstance(args[i], EnumTerm) else cell
    on_grid = fn(*grid_args)
    values = on_grid.term if isinstance(on_grid, EnumTerm) else on_grid
    if not _is_array(values):  # one value on every cell: every row takes it
        return on_grid
    if values.shape != (cells,):  # not one value per cell: nothing to gather from
        return fn(*args)
    index, stride = None, 1
    for (_, col), (lo, _), size in reversed(list(zip(columns, bounds, sizes))):
        part = col.astype(np.int64)
        if lo:
            part -= lo
        if stride != 1:
            part *= stride
        index = part if index is None else np.add(index, part, out=index)
        stride *= size
    gathered = values[index]
    return EnumTerm(on_grid.values, gathered) if isinstance(on_grid, EnumTerm) else _settle(gathered)


# --- comparisons and membership ------------------------------------------------------


def is_in(x: Any, members: Iterable[Any]) -> Any:
    """Membership of an int or enumeration value in a finite set."""
    members = tuple(members)
    if type(x) is str or type(x) is int or type(x) is bool:  # one shape
        return x in members
    if isinstance(x, EnumTerm):
        codes = [x.code(m) for m in members]
        if _is_z3(x.term):
            return (
                built_once("in", (x.term,), tuple(codes), lambda: _z3_or([x.term == c for c in codes]))
                if codes
                else z3.BoolVal(False)
            )
        return _np_isin(x.term, codes)
    if _is_z3(x):
        ints = tuple(int(m) for m in members)
        return (
            built_once("in", (x,), ints, lambda: _z3_or([x == m for m in ints]))
            if ints
            else z3.BoolVal(False)
        )
    if isinstance(x, (np.ndarray, np.generic)):
        return _np_isin(x, members)
    return x in members


def _np_isin(x: Any, members: Sequence[int]) -> Any:
    """np.isin, as a chain of comparisons for the few-member sets gates use (several times faster)."""
    if len(members) > 16:
        return _settle(np.isin(x, members))
    if not members:
        return np.False_
    out = x == members[0]
    for m in members[1:]:
        out |= x == m
    return _settle(out)


def tuple_in(terms: Sequence[Any], rows: Iterable[tuple]) -> Any:
    """Whether the tuple of ``terms`` is one of ``rows`` (membership in a finite relation).

    Rows hold plain values (enumeration names, ints, bools).  numpy packs each
    shape's tuple into one integer and tests all rows at once; z3 gets the rows
    as a trie (:func:`_z3_tuple_in`).
    """
    terms, rows = list(terms), [tuple(r) for r in rows]
    kind = _kind(*terms)
    # Plain (scalar) terms select the rows they match; the symbolic or array terms are matched below.
    norm = _norm_plain
    if kind == "py":
        return tuple(norm(t) for t in terms) in _plain_rows(tuple(rows))
    scalar = [i for i, t in enumerate(terms) if not isinstance(t, (EnumTerm, np.ndarray)) and not _is_z3(t)]
    rows = [r for r in rows if all(norm(r[i]) == norm(terms[i]) for i in scalar)]
    keep = [i for i in range(len(terms)) if i not in scalar]
    terms, rows = [terms[i] for i in keep], [tuple(r[i] for i in keep) for r in rows]
    # Translate enumeration names to codes; a row naming a value outside a term's domain never matches.
    coded = []
    for r in rows:
        try:
            coded.append(tuple(t.code(v) if isinstance(t, EnumTerm) else int(v) for t, v in zip(terms, r)))
        except ValueError:
            continue
    raw = [t.term if isinstance(t, EnumTerm) else t for t in terms]
    if kind == "z3":
        return built_once("tuple_in", tuple(raw), tuple(coded), lambda: _z3_tuple_in(raw, coded))
    if not coded:
        return np.False_
    return _np_tuple_in(raw, coded) if raw else np.True_


def _norm_plain(v: Any) -> Any:
    """A plain row value as ``tuple_in`` compares it: booleans and numpy integers as ints."""
    return int(v) if isinstance(v, (bool, np.bool_, np.integer)) else v


@lru_cache(maxsize=64)
def _plain_rows(rows: tuple[tuple, ...]) -> frozenset[tuple]:
    """The rows of a relation as a set, for one shape's lookup (the same table is asked per shape)."""
    return frozenset(tuple(_norm_plain(v) for v in r) for r in rows)


def _z3_tuple_in(raw: list[Any], coded: list[tuple[int, ...]]) -> Any:
    """Row membership as a trie: per value of the first column, that value and the membership of the rest
    of the rows that hold it, column by column.  The same relation as one conjunction per row, in a term
    a fraction of the size, where each column's test is written once per prefix rather than once per row
    (the full check's solver calls are faster on it: docs/reference/benchmarks.md)."""
    lifted = [_lift_z3(x) for x in raw]
    match = lambda x, v: x == (z3.BoolVal(bool(v)) if z3.is_bool(x) else v)  # noqa: E731

    def trie(column: int, rows: list[tuple[int, ...]]) -> Any:
        if column == len(lifted) or not rows:
            return z3.BoolVal(bool(rows))
        by_value: dict[int, list[tuple[int, ...]]] = {}
        for r in rows:
            by_value.setdefault(r[column], []).append(r)
        x = lifted[column]
        return _z3_or([_z3_and([match(x, v), trie(column + 1, rs)]) for v, rs in sorted(by_value.items())])

    return trie(0, coded)


def _np_tuple_in(raw: list[Any], coded: list[tuple[int, ...]]) -> Any:
    """Row membership of integer arrays: each row of ``raw`` packed into one index of a dense table.

    The index is summed in place, one column at a time, each cast inside the ufunc (a separate
    ``astype`` costs a new array and a pass per column).  A column is range-checked row by row only when
    its least or greatest value falls outside the table (two reductions, far cheaper than the pass
    over every row), and then by one unsigned comparison (a negative value reads as a huge one); a
    boolean column never is where the table has both values.  Rows out of range look up index 0 and
    are masked out.
    """
    table = np.array(coded, dtype=np.int64)
    bases = [int(b) for b in table.max(axis=0) + 1]
    size = int(np.prod(bases))  # a small dense table: the product of the bases
    dtype = np.int32 if size < 2**31 else np.int64
    key: Any = None
    in_range = []  # only for the columns whose values may leave the table
    mult = 1
    for x, base in zip(raw, bases):
        col = np.asarray(x)
        if col.size and not (col.dtype == bool and base >= 2) and (col.min() < 0 or col.max() >= base):
            in_range.append(col.view(f"u{col.itemsize}") < base)
        term = np.multiply(col, mult, dtype=dtype)
        if key is not None and key.shape == np.broadcast_shapes(key.shape, term.shape):
            key += term
        else:
            key = term if key is None else key + term
        mult *= base
    present = np.zeros(size, dtype=bool)
    present[table @ np.cumprod([1, *bases[:-1]])] = True
    if not in_range:
        return _settle(present[key])
    ok = all_of(*in_range)
    return _settle(all_of(ok, present[key * ok]))


def eq(x: Any, value: Any) -> Any:
    """Equality that also understands enumeration values."""
    if type(x) is str:  # one shape
        return x in (value,)
    if isinstance(x, EnumTerm) or isinstance(x, str):
        return is_in(x, (value,))
    return x == value


def ne(x: Any, value: Any) -> Any:
    return not_(eq(x, value))


# --- arithmetic -----------------------------------------------------------------------


def maximum(a: Any, b: Any) -> Any:
    return if_then_else(a >= b, a, b)


def ceil_to_multiple(x: Any, n: int) -> Any:
    """Smallest multiple of the constant ``n`` that is >= ``x`` (``x >= 0``)."""
    if _kind(x) == "z3":
        return ((x + (n - 1)) / n) * n  # z3 integer division floors for n > 0
    if isinstance(x, np.ndarray) and n > 0 and n & (n - 1) == 0:
        return (x + (n - 1)) & -n  # the same floor for a power of two, without a division per element
    return -(-x // n) * n


def product(a: Any, b: Any, a_hint: Iterable[int] = ()) -> Any:
    """``a * b``.

    For z3 a product of two variables is non-linear arithmetic, where the solver
    can answer ``unknown``.  When ``a`` is known to take one of few values,
    ``a_hint`` lists them and the product is expanded into a case split
    (``a == v -> v * b``), which is linear; values outside the hint still fall
    back to the exact product, so the result is the product for every ``a``.
    """
    if _kind(a, b) != "z3":
        return a * b
    term = _lift_z3(a) * _lift_z3(b)
    for v in sorted(set(a_hint), reverse=True):
        term = z3.If(a == v, v * _lift_z3(b), term)
    return term


def product_in(a: Any, b: Any, keys: Iterable[int]) -> Any:
    """``a * b in keys`` for positive ints ``a`` and ``b``.

    For z3 this is written as a disjunction over the factorisations of each key
    (``a == d and b == key // d``), which is exact for positive operands and
    keeps the formula linear.
    """
    keys = sorted(set(int(k) for k in keys))
    if _kind(a, b) != "z3":
        return is_in(a * b, keys)
    return built_once("product_in", (a, b), tuple(keys), lambda: _z3_product_in(a, b, keys))


def _z3_product_in(a: Any, b: Any, keys: list[int]) -> Any:
    options = []
    for key in keys:
        for d in range(1, key + 1):
            if key % d == 0:
                options.append(z3.And(a == d, b == key // d))
    return z3.Or(*options) if options else z3.BoolVal(False)


def lookup_int(x: Any, table: dict[int, int], default: Any) -> Any:
    """``table[x]`` where ``x`` is a key, else ``default``: a finite function given by its values."""
    if _kind(x, default) == "py" and not isinstance(x, np.ndarray):
        return table.get(x, default)
    term = default
    for key in sorted(table, reverse=True):
        term = if_then_else(x == key, table[key], term)
    return term
