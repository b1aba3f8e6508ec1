"""The logic vocabulary means the same thing in Python, numpy and z3."""

from __future__ import annotations

import numpy as np
import z3
from hypothesis import given
from hypothesis import strategies as st

from mla_model.logic import (
    EnumTerm,
    all_of,
    any_of,
    ceil_to_multiple,
    choose,
    if_then_else,
    is_in,
    lookup_int,
    maximum,
    not_,
    product,
    product_in,
    tabulated,
    tuple_in,
)

small = st.integers(1, 300)


def z3_value(term, **env):
    x = z3.Int("x")
    y = z3.Int("y")
    s = z3.Solver()
    s.add(x == env.get("x", 0), y == env.get("y", 0))
    assert s.check() == z3.sat
    v = s.model().eval(term(x, y), model_completion=True)
    return z3.is_true(v) if z3.is_bool(v) else v.as_long()


@given(small, small)
def test_arithmetic_agrees_in_all_three(a, b):
    keys = (8, 16, 24, 32, 48, 64, 128, 256, 384, 512)
    cases = [
        (lambda x, y: product(x, y, a_hint=(16, 32, 64)), a * b),
        (lambda x, y: product_in(x, y, keys), a * b in keys),
        (lambda x, y: ceil_to_multiple(x, 16), -(-a // 16) * 16),
        (lambda x, y: maximum(x, y), max(a, b)),
        (lambda x, y: lookup_int(x, {3: 15, 5: 15, 6: 12}, y), {3: 15, 5: 15, 6: 12}.get(a, b)),
        (lambda x, y: is_in(x, (1, 2, 4, 8, 16)), a in (1, 2, 4, 8, 16)),
        (lambda x, y: if_then_else(x < y, x, y), min(a, b)),
        (lambda x, y: all_of(x > 3, any_of(y < 5, not_(x == y))), a > 3 and (b < 5 or a != b)),
    ]
    for term, expected in cases:
        assert term(a, b) == expected
        assert z3_value(term, x=a, y=b) == expected
        got = term(np.array([a, a]), np.array([b, b]))
        assert np.all(np.asarray(got) == expected)


@given(st.lists(st.booleans(), min_size=2, max_size=2))
def test_choose_is_first_match(conds):
    values = ("a", "b", "c")
    expected = "a" if conds[0] else "b" if conds[1] else "c"
    assert choose(values, [(conds[0], "a"), (conds[1], "b")], "c") == expected
    vec = choose(values, [(np.array([conds[0]]), "a"), (np.array([conds[1]]), "b")], "c")
    assert isinstance(vec, EnumTerm) and values[int(vec.term[0])] == expected
    sym = choose(values, [(z3.BoolVal(conds[0]), "a"), (z3.BoolVal(conds[1]), "b")], "c")
    assert values[z3.simplify(sym.term).as_long()] == expected


def test_enum_membership_translates_names_to_codes():
    kv = ("auto", "bfloat16", "fp8")
    assert list(is_in(EnumTerm(kv, np.array([0, 2])), ("fp8",))) == [False, True]
    x = z3.Int("kv")
    s = z3.Solver()
    s.add(is_in(EnumTerm(kv, x), ("fp8",)))
    assert s.check() == z3.sat and s.model()[x].as_long() == 2


def test_tuple_in_mixes_plain_array_and_symbolic_terms():
    rows = [("gfx950", "fp8", 16, True), ("gfx942", "bf16", 32, False)]
    arch = ("gfx942", "gfx950")
    kv = EnumTerm(("bf16", "fp8"), np.array([1, 0, 1]))
    got = tuple_in(["gfx950", kv, np.array([16, 16, 32]), True], rows)  # a plain arch among arrays
    assert list(got) == [True, False, False]
    assert tuple_in(["gfx942", "bf16", 32, False], rows) and not tuple_in(["gfx942", "bf16", 32, True], rows)
    x = z3.Int("heads")
    s = z3.Solver()
    s.add(tuple_in([EnumTerm(arch, z3.IntVal(1)), "fp8", x, z3.BoolVal(True)], rows))
    assert s.check() == z3.sat and s.model()[x].as_long() == 16


_COLOURS = ("red", "green", "blue")


def _paint(colour, n, flag):
    """A function of an enumeration, an int and a boolean, written in the logic vocabulary."""
    return any_of(all_of(is_in(colour, ("red", "blue")), n > 7), all_of(flag, is_in(n, (2, 3, 5))))


@given(st.integers(0, 40), st.integers(-5, 5), st.data())
def test_tabulated_is_the_function_row_by_row(spread, offset, data):
    """tabulated gives each row fn of its values whether it gathers from a grid (many rows over few values)
    or falls back to fn on the rows (a grid too large for them), with ints shifted off zero."""
    row = st.tuples(st.sampled_from(_COLOURS), st.integers(0, spread), st.booleans())
    drawn = data.draw(st.lists(row, min_size=1, max_size=50))
    rows = drawn * (400 // len(drawn) + 1)  # at least 400 rows: a grid of up to 100 cells is used
    colours = EnumTerm(_COLOURS, np.array([_COLOURS.index(c) for c, _, _ in rows], dtype=np.int8))
    ns = np.array([n + offset for _, n, _ in rows], dtype=np.int32)
    flags = np.array([f for _, _, f in rows], dtype=bool)
    got = np.broadcast_to(tabulated(_paint, colours, ns, flags), (len(rows),))
    want = [_paint(c, n + offset, f) for c, n, f in rows]
    assert got.tolist() == want


def test_tabulated_gathers_from_the_grid_and_passes_symbolic_terms_through():
    calls = []

    def counted(colour, n, flag):
        calls.append(np.size(n))
        return _paint(colour, n, flag)

    rng = np.random.default_rng(0)
    colours = EnumTerm(_COLOURS, rng.integers(0, 3, 10_000).astype(np.int8))
    ns, flags = rng.integers(5, 17, 10_000).astype(np.int32), rng.integers(0, 2, 10_000).astype(bool)
    got = tabulated(counted, colours, ns, flags)
    assert calls == [3 * 12 * 2]  # once, on the grid of the values present
    assert got.tolist() == _paint(colours, ns, flags).tolist()
    x = z3.Int("x")
    term = tabulated(lambda n: n > 3, x)
    assert term.eq(x > 3)


def test_tabulated_keeps_an_enumeration_and_falls_back_where_no_grid_fits():
    rng = np.random.default_rng(1)
    colours = EnumTerm(_COLOURS, rng.integers(0, 3, 1_000).astype(np.int8))
    ns = rng.integers(0, 5, 1_000).astype(np.int32)

    def pick(c, n):
        return choose(_COLOURS, [(n > 2, "blue"), (is_in(c, ("red",)), "green")], "red")

    got = tabulated(pick, colours, ns)
    assert isinstance(got, EnumTerm) and got.term.shape == (1_000,)
    assert got.term.tolist() == pick(colours, ns).term.tolist()
    halves = np.array([0.5, 1.5] * 8)  # not integer values: no grid, fn on the rows
    assert tabulated(lambda x: x > 1, halves).tolist() == (halves > 1).tolist()
    wide = np.array([0, 2**40] * 8, dtype=np.int64)  # a range no grid holds
    assert tabulated(lambda a, b: a < b, wide, wide[::-1].copy()).tolist() == (wide < wide[::-1]).tolist()
