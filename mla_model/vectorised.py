"""The numpy interpretation's view of many shapes at once."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np

from mla_model.logic import EnumTerm, narrow_int_dtype
from mla_model.shape import FIELDS, Shape


def shape_arrays(columns: Mapping[str, np.ndarray]) -> SimpleNamespace:
    """A view with one attribute per Shape field; enum columns hold value codes.

    An integer column whose values all fit takes :func:`~mla_model.logic.narrow_int_dtype`, as the box
    sweep's columns do (``spec.proof.bruteforce``): every operation of the numpy interpretation then
    streams half the memory, and the values are the same."""
    view: dict[str, Any] = {}
    for spec in FIELDS:
        col = columns[spec.name]
        if spec.kind == "enum":
            view[spec.name] = EnumTerm(spec.values, col)
        elif spec.kind == "int" and _is_int_array(col) and col.size:
            view[spec.name] = col.astype(narrow_int_dtype(int(col.min()), int(col.max())), copy=False)
        else:
            view[spec.name] = col
    return SimpleNamespace(**view)


def _is_int_array(col: np.ndarray) -> bool:
    return isinstance(col, np.ndarray) and col.dtype.kind == "i"


def columns_of(shapes: list[Shape]) -> dict[str, np.ndarray]:
    """The column table of a list of shapes (enum columns hold value codes)."""
    cols = {}
    for spec in FIELDS:
        values = [getattr(s, spec.name) for s in shapes]
        if spec.kind == "enum":
            cols[spec.name] = np.array([spec.values.index(v) for v in values], dtype=np.int8)
        elif spec.kind == "bool":
            cols[spec.name] = np.array(values, dtype=bool)
        else:
            cols[spec.name] = np.array(values, dtype=np.int64)
    return cols
