"""The prover's symbolic Shape: one z3 variable per field, and back to a concrete Shape."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import z3

from mla_model.logic import EnumTerm
from mla_model.shape import FIELDS, Shape


@dataclass(frozen=True)
class SymbolicShape:
    view: SimpleNamespace  # attribute per field: z3 Int / Bool, or EnumTerm over a z3 Int
    variables: dict[str, Any]  # field name -> the raw z3 variable
    domain: list[Any]  # each field within its domain

    def to_shape(self, model: z3.ModelRef) -> Shape:
        data = {}
        for spec in FIELDS:
            value = model.eval(self.variables[spec.name], model_completion=True)
            if spec.kind == "enum":
                data[spec.name] = spec.values[value.as_long()]
            elif spec.kind == "bool":
                data[spec.name] = z3.is_true(value)
            else:
                data[spec.name] = value.as_long()
        return Shape(**data)


def symbolic_shape() -> SymbolicShape:
    view, variables, domain = {}, {}, []
    for spec in FIELDS:
        if spec.kind == "bool":
            var = z3.Bool(spec.name)
            view[spec.name] = var
        else:
            var = z3.Int(spec.name)
            if spec.kind == "enum":
                domain.append(z3.And(var >= 0, var < len(spec.values)))
                view[spec.name] = EnumTerm(spec.values, var)
            else:
                domain.append(var >= spec.minimum)
                if spec.values:
                    domain.append(z3.Or(*[var == v for v in spec.values]))
                view[spec.name] = var
        variables[spec.name] = var
    return SymbolicShape(SimpleNamespace(**view), variables, domain)


class FieldTracer:
    """Wraps a view and records which Shape fields a computation reads."""

    def __init__(self, view: SimpleNamespace) -> None:
        self._view = view
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._view, name)
        self.read.add(name)
        return value


def shape_pins(variables: dict[str, Any], shape: Shape) -> list[tuple[str, Any, Any]]:
    """(field, z3 variable, z3 value) for each field of a concrete shape."""
    out = []
    for spec in FIELDS:
        value = getattr(shape, spec.name)
        out.append((spec.name, variables[spec.name], z3.IntVal(spec.values.index(value)) if spec.kind == "enum"
                    else z3.BoolVal(value) if spec.kind == "bool" else z3.IntVal(value)))
    return out


def box_constraints(variables: dict[str, Any]) -> list[Any]:
    """Each field within the brute-force box (``FieldSpec.box``), as z3 constraints."""
    out = []
    for spec in FIELDS:
        var = variables[spec.name]
        if spec.kind == "int":
            box = sorted(spec.box)
            if box == list(range(box[0], box[-1] + 1)):
                out.append(z3.And(var >= box[0], var <= box[-1]))
            else:
                out.append(z3.Or(*[var == v for v in box]))
    return out
