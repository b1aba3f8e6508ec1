"""The numpy interpretation's view of many shapes at once."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import numpy as np

from mla_model.logic import EnumTerm
from mla_model.shape import FIELDS, Shape


def shape_arrays(columns: Mapping[str, np.ndarray]) -> SimpleNamespace:
    """A view with one attribute per Shape field; enum columns hold value codes."""
    view = {}
    for spec in FIELDS:
        col = columns[spec.name]
        view[spec.name] = EnumTerm(spec.values, col) if spec.kind == "enum" else col
    return SimpleNamespace(**view)


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
