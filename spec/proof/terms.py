"""The public z3 term utilities, in one place: the symbolic Shape and everything that reads a z3 term.

* the symbolic Shape (one z3 variable per field) and back to a concrete Shape;
* logic values as z3 terms (:func:`as_z3`);
* what a term mentions (:func:`free_constants`, :func:`fields_of`) and its atomic conditions
  (:func:`atoms_of`, :func:`is_membership`);
* a term as a maintainer reads it (:func:`describe_atom`, :func:`term_text`: enum codes shown as names).

Every other module that takes a z3 term apart imports these; none reaches into another module's private
helpers (tests/test_architecture.py enforces it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import z3

from mla_model.logic import EnumTerm, Term
from mla_model.shape import FIELD_BY_NAME, FIELDS, Shape


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

    def __getattr__(self, name: str) -> Term:
        value = getattr(self._view, name)
        self.read.add(name)
        return value


def shape_pins(variables: dict[str, Any], shape: Shape) -> list[tuple[str, Any, Any]]:
    """(field, z3 variable, z3 value) for each field of a concrete shape."""
    out = []
    for spec in FIELDS:
        value = getattr(shape, spec.name)
        out.append(
            (
                spec.name,
                variables[spec.name],
                z3.IntVal(spec.values.index(value))
                if spec.kind == "enum"
                else z3.BoolVal(value)
                if spec.kind == "bool"
                else z3.IntVal(value),
            )
        )
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


# --- terms ----------------------------------------------------------------------------------------


def as_z3(term: Term) -> Any:
    """A logic value as a z3 term: an EnumTerm's integer code, a Python bool as a z3 BoolVal."""
    if isinstance(term, EnumTerm):
        return term.term
    if isinstance(term, bool):
        return z3.BoolVal(term)
    return term


def free_constants(term: Any) -> list[Any]:
    """The free variables (uninterpreted constants) of a term, each once, in first-seen order."""
    seen: dict[int, Any] = {}
    todo, done = [term], set()
    while todo:
        u = todo.pop()
        if u.get_id() in done:
            continue
        done.add(u.get_id())
        if z3.is_const(u) and u.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            seen.setdefault(u.get_id(), u)
        todo.extend(reversed(u.children()))
    return list(seen.values())


def fields_of(term: Any) -> tuple[str, ...]:
    """The Shape fields a term mentions, in the Shape's field order."""
    names = {str(u) for u in free_constants(term)}
    return tuple(f.name for f in FIELDS if f.name in names)


def is_membership(t: Any) -> bool:
    """``x in {a, b, ...}``: an Or of equalities of one term with constants (one condition, not several)."""
    if not z3.is_or(t) or t.num_args() == 0:
        return False
    kids = t.children()
    return (
        all(z3.is_eq(k) and z3.is_int_value(k.arg(1)) for k in kids)
        and all(k.arg(0).eq(kids[0].arg(0)) for k in kids)
        and not _is_choice(kids[0].arg(0))
    )


def _is_choice(t: Any) -> bool:
    """A derived enumeration (``logic.choose``: an If chain of constant codes, e.g. vLLM's DCP route): its
    membership tests are decisions over the chain's conditions, not one condition."""
    return z3.is_app_of(t, z3.Z3_OP_ITE) and z3.is_int_value(t.arg(1))


def _has_ite(t: Any) -> bool:
    """An If inside ``t`` whose conditions are decisions (a product's case split is arithmetic, not one)."""
    if product_of_split(t) is not None:
        return False
    return z3.is_app_of(t, z3.Z3_OP_ITE) or any(_has_ite(c) for c in t.children())


def product_of_split(t: Any) -> Any:
    """The product ``a*b`` that ``t`` is, where ``t`` is ``logic.product``'s linear case split
    ``If(a == v, v*b, ..., a*b)`` (e.g. the DCP-gathered heads); None otherwise."""
    if not z3.is_app_of(t, z3.Z3_OP_ITE):
        return None
    while z3.is_app_of(t, z3.Z3_OP_ITE):
        cond = t.arg(0)
        if not (z3.is_eq(cond) and z3.is_int_value(cond.arg(1))):
            return None
        t = t.arg(2)
    return t if z3.is_mul(t) and not any(z3.is_int_value(c) for c in t.children()) else None


def atoms_of(term: Any) -> list[Any]:
    """The atomic conditions of a decision term, in first-seen order, without repeats."""
    found: dict[int, Any] = {}
    visited: set[int] = set()  # a lifted gate is a DAG that shares subterms widely: each visited once

    def walk(t: Any) -> None:
        if t.get_id() in visited:
            return
        visited.add(t.get_id())
        if z3.is_true(t) or z3.is_false(t) or z3.is_int_value(t) or z3.is_const(t) and not z3.is_bool(t):
            return
        if (
            z3.is_bool(t)
            and not is_membership(t)
            and (
                z3.is_and(t)
                or z3.is_or(t)
                or z3.is_not(t)
                or z3.is_implies(t)
                or z3.is_app_of(t, z3.Z3_OP_XOR)
                or z3.is_app_of(t, z3.Z3_OP_ITE)
                or (z3.is_eq(t) and z3.is_bool(t.arg(0)))
            )
        ):
            for c in t.children():
                walk(c)
        elif z3.is_bool(t) and not is_membership(t) and _has_ite(t):
            for c in t.children():  # a comparison over an If: the If's conditions are the atoms
                walk(c)
        elif z3.is_bool(t):
            found.setdefault(t.get_id(), t)
        else:
            for c in t.children():  # arithmetic and Ifs over ints: look inside for conditions
                walk(c)

    walk(term)
    return list(found.values())


def _plain_products(t: Any) -> Any:
    """``t`` with every product case split (:func:`product_of_split`) replaced by its product."""
    if not z3.is_app(t):
        return t
    product = product_of_split(t)
    if product is not None:
        return product
    kids = t.children()
    plain = [_plain_products(c) for c in kids]
    return t if all(a.eq(b) for a, b in zip(kids, plain)) else t.decl()(*plain)


def describe_atom(t: Any, fields: tuple[str, ...], variables: dict[str, Any]) -> str:
    """A readable condition: the truth set over one or two enum/bool fields, else z3's text, enums named."""
    specs = [FIELD_BY_NAME[f] for f in fields]
    if len(specs) == 1 and specs[0].discrete:
        spec = specs[0]
        var = variables[spec.name]
        domain = spec.values if spec.kind == "enum" else (False, True)
        true = [
            v
            for v in domain
            if z3.is_true(
                z3.simplify(
                    z3.substitute(
                        t, (var, z3.IntVal(spec.values.index(v)) if spec.kind == "enum" else z3.BoolVal(v))
                    )
                )
            )
        ]
        if spec.kind == "bool":
            return spec.name if true == [True] else f"not {spec.name}"
        if len(true) == 1:
            return f"{spec.name} == {true[0]}"
        if len(true) == len(domain) - 1:
            return f"{spec.name} != {next(v for v in domain if v not in true)}"
        return f"{spec.name} in {{{', '.join(true)}}}"
    if is_membership(t):
        kids = t.children()
        return f"{term_text(kids[0].arg(0))} in {{{', '.join(str(k.arg(1)) for k in kids)}}}"
    return term_text(t)


def term_text(t: Any) -> str:
    """z3's text of a term on one line, with enum codes written as their names and a product's linear case
    split written as the product."""
    text = " ".join(str(_plain_products(t)).split())

    def enum_name(m: re.Match) -> str:
        spec = FIELD_BY_NAME[m.group(1)]
        return f"{m.group(1)} {m.group(2)} {spec.values[int(m.group(3))]}"

    enums = "|".join(f.name for f in FIELDS if f.kind == "enum")
    return re.sub(rf"\b({enums}) (==|!=) (\d+)\b", enum_name, text)
