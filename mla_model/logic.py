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

z3 is imported lazily: the GPU replay machine has no z3, and nothing there
builds symbolic terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any, Iterable, Sequence

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


def _kind(*xs: Any) -> str:
    """'z3', 'np' or 'py': the interpretation the operands ask for."""
    kind = "py"
    for x in xs:
        if isinstance(x, EnumTerm):
            x = x.term
        if _is_z3(x):
            return "z3"
        if isinstance(x, np.ndarray):
            kind = "np"
    return kind


# --- booleans -------------------------------------------------------------------------


def all_of(*xs: Any) -> Any:
    """Conjunction; ``all_of()`` is true."""
    kind = _kind(*xs)
    if kind == "z3":
        return z3.And(*[_as_z3_bool(x) for x in xs]) if xs else z3.BoolVal(True)
    if kind == "np":
        return reduce(np.logical_and, xs)
    return all(bool(x) for x in xs)


def any_of(*xs: Any) -> Any:
    """Disjunction; ``any_of()`` is false."""
    kind = _kind(*xs)
    if kind == "z3":
        return z3.Or(*[_as_z3_bool(x) for x in xs]) if xs else z3.BoolVal(False)
    if kind == "np":
        return reduce(np.logical_or, xs)
    return any(bool(x) for x in xs)


def not_(x: Any) -> Any:
    kind = _kind(x)
    if kind == "z3":
        return z3.Not(x)
    if kind == "np":
        return np.logical_not(x)
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
        return z3.If(_as_z3_bool(cond), _lift_z3(then), _lift_z3(other))
    if kind == "np":
        return np.where(cond, then, other)
    return then if cond else other


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
    code = values.index
    if kind == "np":
        conds = [np.asarray(c, dtype=bool) for c, _ in cases]
        shape = np.broadcast_shapes(*[c.shape for c in conds])
        return EnumTerm(
            values,
            np.select(
                [np.broadcast_to(c, shape) for c in conds],
                [code(v) for _, v in cases],
                default=code(default),
            ).astype(np.int8),
        )
    term = z3.IntVal(code(default))
    for cond, value in reversed(cases):
        term = z3.If(_as_z3_bool(cond), z3.IntVal(code(value)), term)
    return EnumTerm(values, term)


# --- comparisons and membership ------------------------------------------------------


def is_in(x: Any, members: Iterable[Any]) -> Any:
    """Membership of an int or enumeration value in a finite set."""
    members = tuple(members)
    if isinstance(x, EnumTerm):
        codes = [x.code(m) for m in members]
        if _is_z3(x.term):
            return z3.Or(*[x.term == c for c in codes]) if codes else z3.BoolVal(False)
        return _np_isin(x.term, codes)
    if _is_z3(x):
        return z3.Or(*[x == int(m) for m in members]) if members else z3.BoolVal(False)
    if isinstance(x, np.ndarray):
        return _np_isin(x, members)
    return x in members


def _np_isin(x: Any, members: Sequence[int]) -> Any:
    """np.isin, as a chain of comparisons for the few-member sets gates use (several times faster)."""
    if len(members) > 16:
        return np.isin(x, members)
    out = np.zeros(np.shape(x), dtype=bool)
    for m in members:
        out |= x == m
    return out


def tuple_in(terms: Sequence[Any], rows: Iterable[tuple]) -> Any:
    """Whether the tuple of ``terms`` is one of ``rows`` (membership in a finite relation).

    Rows hold plain values (enumeration names, ints, bools).  numpy packs each
    shape's tuple into one integer and tests all rows at once; z3 gets the
    disjunction of the rows.
    """
    terms, rows = list(terms), [tuple(r) for r in rows]
    kind = _kind(*terms)
    # Plain (scalar) terms select the rows they match; the symbolic or array terms are matched below.
    norm = lambda v: int(v) if isinstance(v, (bool, np.bool_, np.integer)) else v  # noqa: E731
    if kind == "py":
        return tuple(norm(t) for t in terms) in {tuple(norm(v) for v in r) for r in rows}
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
        lifted = [_lift_z3(x) for x in raw]
        match = lambda x, v: x == (z3.BoolVal(bool(v)) if z3.is_bool(x) else v)  # noqa: E731
        return z3.Or(*[z3.And(*[match(x, v) for x, v in zip(lifted, r)]) for r in coded]) if coded else z3.BoolVal(False)
    if not coded:
        return np.zeros(np.broadcast_shapes(*[np.shape(x) for x in raw]), dtype=bool)
    if not raw:
        return np.ones((), dtype=bool)
    table = np.array(coded, dtype=np.int64)
    bases = table.max(axis=0) + 1
    key = np.zeros((), dtype=np.int64)
    ok = np.ones((), dtype=bool)
    mult = 1
    for i, x in enumerate(raw):
        col = np.asarray(x).astype(np.int64)
        ok = ok & (col >= 0) & (col < bases[i])
        key = key + col * mult
        mult *= int(bases[i])
    present = np.zeros(mult, dtype=bool)  # mult = product of the bases: a small dense table
    present[table @ np.cumprod(np.concatenate(([1], bases[:-1])))] = True
    return ok & present[np.where(ok, key, 0)]


def eq(x: Any, value: Any) -> Any:
    """Equality that also understands enumeration values."""
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

