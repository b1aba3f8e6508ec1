"""The numpy interpretation's short cuts mean what the Python interpretation means, row by row.

The numpy interpretation settles a value that is the same on every row (a numpy bool, or an array that
holds one value) and lets and/or/if/choose short-cut on it; integer choices are branch-free arithmetic;
membership range-checks a column only when it can leave the table.  Each is compared here, on operands
of every form (plain, numpy scalar, uniform array, varying array), with the plain Python answer per row.
"""

from __future__ import annotations

import numpy as np
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
    not_,
    tuple_in,
)

ROWS = 4


@st.composite
def boolean_operand(draw):
    """A boolean of the numpy interpretation and its value on each row: a plain Python bool, a numpy bool,
    an array holding one value everywhere, or an array that varies."""
    form = draw(st.sampled_from(["python", "numpy", "uniform", "array"]))
    if form == "array":
        rows = draw(st.lists(st.booleans(), min_size=ROWS, max_size=ROWS))
        return np.array(rows), rows
    b = draw(st.booleans())
    return {"python": b, "numpy": np.bool_(b), "uniform": np.full(ROWS, b)}[form], [b] * ROWS


def rows_of(value):
    """A value of the numpy (or Python) interpretation on each row: plain values broadcast."""
    if isinstance(value, EnumTerm):
        return [value.values[int(c)] for c in np.broadcast_to(value.term, (ROWS,))]
    return np.broadcast_to(np.asarray(value), (ROWS,)).tolist()


def is_numpy(value):
    return isinstance(value.term if isinstance(value, EnumTerm) else value, (np.ndarray, np.generic))


@given(st.lists(boolean_operand(), min_size=1, max_size=4))
def test_and_or_not_short_cuts_agree_with_python_row_by_row(operands):
    values, rows = zip(*operands)
    by_row = list(zip(*rows))
    cases = [
        (all_of(*values), [all(r) for r in by_row], values),
        (any_of(*values), [any(r) for r in by_row], values),
        (not_(values[0]), [not r for r in rows[0]], values[:1]),
    ]
    for got, expected, inputs in cases:
        assert rows_of(got) == expected
        # What is computed from a numpy value stays one (however uniform): choose still answers an EnumTerm.
        assert is_numpy(got) == any(is_numpy(v) for v in inputs)


@given(
    boolean_operand(),
    boolean_operand(),
    st.integers(-(2**62), 2**62),
    st.integers(-(2**62), 2**62),
    st.lists(st.integers(-(2**31), 2**31 - 1), min_size=ROWS, max_size=ROWS),
)
def test_choices_short_cut_agree_with_python_row_by_row(first, second, a, b, ints):
    (c1, rows1), (c2, rows2) = first, second
    column = np.array(ints, dtype=np.int32)
    assert rows_of(if_then_else(c1, a, b)) == [a if r else b for r in rows1]  # wraps inside, exact outside
    assert rows_of(if_then_else(c1, column, column[::-1])) == [
        x if r else y for r, x, y in zip(rows1, ints, reversed(ints))
    ]
    assert rows_of(if_then_else(c1, c2, not_(c2))) == [x == y for x, y in zip(rows1, rows2)]
    picked = choose(("p", "q", "r"), [(c1, "p"), (c2, "q")], "r")
    assert rows_of(picked) == ["p" if x else "q" if y else "r" for x, y in zip(rows1, rows2)]
    assert isinstance(picked, EnumTerm) == (is_numpy(c1) or is_numpy(c2))


@given(st.lists(st.integers(-3, 40), min_size=ROWS, max_size=ROWS), boolean_operand())
def test_membership_short_cuts_agree_with_python_row_by_row(heads, flag):
    rows = [(16, True), (32, False), (0, True)]
    column, (b, b_rows) = np.array(heads, dtype=np.int32), flag
    assert rows_of(tuple_in([column, b], rows)) == [(h, f) in rows for h, f in zip(heads, b_rows)]
    assert rows_of(is_in(column, (1, 2, 4, 8, 16))) == [h in (1, 2, 4, 8, 16) for h in heads]
    assert rows_of(ceil_to_multiple(np.abs(column), 16)) == [-(-abs(h) // 16) * 16 for h in heads]
