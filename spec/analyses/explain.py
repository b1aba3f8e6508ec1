"""Explain one shape: validity, route, AITER's lookup, each invariant, and why not persistent.

"Why not persistent" comes from the unsat core of the gate: every field of the
shape is asserted as a tracked literal next to ``use_persistent_metadata``;
the core names the field values that, together, keep the schedule off.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from functools import cache
from types import SimpleNamespace
from typing import Any

import numpy as np
import z3

from mla_model.decision import Decision, decide
from mla_model.derived import KERNEL_KV_DTYPES
from mla_model.logic import EnumTerm
from mla_model.registry import Registry, resolved_kernel
from mla_model.revisions.base import Revision
from mla_model.route import HEAD_PADDINGS, HEAD_UNPADS, PATHS
from mla_model.shape import FIELDS, Q_DTYPES, Shape
from spec.proof.invariants import INVARIANTS, Invariant
from spec.proof.prover import problem
from spec.proof.terms import (
    as_z3,
    atoms_of,
    describe_atom,
    fields_of,
    free_constants,
    is_membership,
    shape_pins,
)


def _plain(value: Any) -> Any:
    return (
        value
        if isinstance(value, (str, type(None)))
        else (bool(value) if isinstance(value, bool) else int(value))
    )


def why_not_persistent(revision: Revision, registry: Registry, shape: Shape) -> list[str]:
    """The field values that keep the persistent schedule off (an unsat core), as 'name=value'."""
    p = problem(revision, registry)
    s = z3.Solver()
    s.add(*p.symbolic.domain, as_z3(p.decision.route.use_persistent_metadata))
    for name, var, value in shape_pins(p.symbolic.variables, shape):
        s.assert_and_track(var == value, f"{name}={getattr(shape, name)}")
    if s.check() != z3.unsat:
        return []
    return sorted(str(c) for c in s.unsat_core())


GATES = ("use_gluon_decode", "use_gluon_verify", "use_persistent_metadata")


def decision_conditions(revision: Revision, registry: Registry, shape: Shape) -> dict[str, dict[str, Any]]:
    """Each gate's value, the value of every atomic condition in it (found by spec.analyses.cases), and the
    gate as the and/or tree of those conditions (:func:`_tree`, each node with its value on ``shape``).

    The gates' conditions and trees are the revision's, not the shape's: they are found once per (revision,
    registry) (:func:`_gate_structure`) and only their values are computed for each shape."""
    p = problem(revision, registry)
    pinned = _Pinned(p.symbolic.variables, shape)
    return {
        gate: {
            "value": pinned.holds(term),
            "conditions": {text: pinned.holds(atom) for text, atom in conditions},
            "tree": _valued(tree, pinned),
        }
        for gate, (term, conditions, tree) in _gate_structure(revision, registry).items()
    }


_SHOWN_WHOLE = 100  # a condition that is no and/or (a comparison over an if-then-else) shown whole up to this
# A gate whose tree would have more nodes than this is shown as "depends on" its atomic conditions, each
# once: a release's lifted gate (0.34.0's use_gluon_decode) unfolds into some 18,000 nodes that repeat a
# few dozen conditions, which no one reads.
_TREE_NODES = 200


@cache
def _gate_structure(revision: Revision, registry: Registry) -> dict[str, tuple[Any, list[Any], Any]]:
    """Per gate: its term, its atomic conditions as (text, term), and its tree (:func:`_tree`), without
    values (cached like spec.proof.prover.problem, whose terms these are)."""
    p = problem(revision, registry)
    out = {}
    for gate in GATES:
        term = as_z3(getattr(p.decision.route, gate))
        conditions = []
        for atom in atoms_of(term):
            fields_read = fields_of(atom)
            if fields_read:
                conditions.append((describe_atom(atom, fields_read, p.symbolic.variables), atom))
        out[gate] = (term, conditions, _tree(term, p.symbolic.variables))
    return out


def _tree(term: Any, variables: dict[str, Any]) -> tuple[Any, ...]:
    """A gate term as its and/or structure, without values: ``("condition", text, term)`` for an atomic
    condition, ``(op, term, children)`` with op "all of" | "any of" | "not" | "depends on" for a junction
    (nested junctions of one kind flattened; terms that read no field, the revision's constants, left out),
    ``("constant", term)`` for a gate that reads no field.  A condition that is no and/or (a comparison over
    an if-then-else) is one node with its text, or, past :data:`_SHOWN_WHOLE` characters, "depends on" its
    atomic conditions.  :func:`_valued` gives it the values of one shape."""

    def flat(t: Any, kind: Any) -> list[Any]:
        out = []
        for k in t.children():
            out.extend(flat(k, kind) if z3.is_app_of(k, kind) and not is_membership(k) else [k])
        return out

    seen: dict[int, tuple[Any, ...] | None] = {}  # by z3 AST id: a lifted gate shares subterms widely
    names: dict[int, frozenset[str]] = {}

    def fields_read(t: Any) -> tuple[str, ...]:
        """:func:`fields_of`, each shared subterm read once."""

        def read(u: Any) -> frozenset[str]:
            if u.get_id() not in names:
                if z3.is_const(u) and u.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                    names[u.get_id()] = frozenset({str(u)})
                else:
                    names[u.get_id()] = frozenset().union(*map(read, u.children()))
            return names[u.get_id()]

        found = read(t)
        return tuple(f.name for f in FIELDS if f.name in found)

    def node(t: Any) -> tuple[Any, ...] | None:
        key = t.get_id()
        if key not in seen:
            seen[key] = shaped(t)
        return seen[key]

    def shaped(t: Any) -> tuple[Any, ...] | None:
        if not fields_read(t):
            return None
        if (z3.is_and(t) or z3.is_or(t)) and not is_membership(t):
            kind = z3.Z3_OP_AND if z3.is_and(t) else z3.Z3_OP_OR
            kids = [n for n in map(node, flat(t, kind)) if n is not None]
            if len(kids) == 1:
                return kids[0]
            return ("all of" if z3.is_and(t) else "any of", t, kids)
        if z3.is_not(t) and (z3.is_and(t.arg(0)) or z3.is_or(t.arg(0))) and not is_membership(t.arg(0)):
            inner = node(t.arg(0))
            return None if inner is None else ("not", t, [inner])
        text = describe_atom(t, fields_read(t), variables)
        atoms = atoms_of(t)
        if len(text) <= _SHOWN_WHOLE or len(atoms) <= 1:
            return ("condition", text, t)
        return ("depends on", t, [n for n in map(node, atoms) if n is not None])

    found = node(term)
    if found is None:
        return ("constant", term)
    if _size(found) > _TREE_NODES:
        return ("depends on", term, [n for n in map(node, atoms_of(term)) if n is not None])
    return found


def _size(tree: tuple[Any, ...]) -> int:
    """The nodes of a tree of :func:`_tree` as it is shown (a shared subtree counted where it appears)."""
    sizes: dict[int, int] = {}

    def size(t: tuple[Any, ...]) -> int:
        if id(t) not in sizes:
            sizes[id(t)] = 1 + (sum(size(k) for k in t[2]) if t[0] not in ("condition", "constant") else 0)
        return sizes[id(t)]

    return size(tree)


class _Pinned:
    """Terms' values on one concrete shape: z3.substitute of the shape's pins and simplify, with the pins'
    arrays built once for all the terms (z3.substitute checks and converts every pin on every call, which
    was most of an explanation's time)."""

    def __init__(self, variables: dict[str, Any], shape: Shape) -> None:
        # kept alive: src and dst hold their ASTs without a reference count of their own
        self.pins = [(var, value) for _, var, value in shape_pins(variables, shape)]
        self.ctx, self.n = self.pins[0][0].ctx, len(self.pins)
        self.src = (z3.Ast * self.n)(*[var.as_ast() for var, _ in self.pins])
        self.dst = (z3.Ast * self.n)(*[value.as_ast() for _, value in self.pins])

    def holds(self, term: Any) -> bool:
        ast = z3.Z3_substitute(self.ctx.ref(), term.as_ast(), self.n, self.src, self.dst)
        return z3.is_true(z3.simplify(z3.ExprRef(ast, self.ctx)))


def _valued(tree: tuple[Any, ...], pinned: _Pinned) -> dict[str, Any]:
    """A tree of :func:`_tree` with each node's value on the pinned shape: ``{"condition": text, "value"}``
    ("always"/"never" for a constant gate), ``{"op", "value", "children"}`` for a junction."""
    if tree[0] == "constant":
        value = pinned.holds(tree[1])
        return {"condition": "always" if value else "never", "value": value}
    if tree[0] == "condition":
        return {"condition": tree[1], "value": pinned.holds(tree[2])}
    op, term, kids = tree
    return {"op": op, "value": pinned.holds(term), "children": [_valued(k, pinned) for k in kids]}


def explain(revision: Revision, registry: Registry, shape: Shape) -> dict[str, Any]:
    d = decide(revision, registry, shape)
    validity = {name: bool(ok) for name, ok in revision.validity(shape, registry)}
    r, a = d.route, d.asm
    kernel = {
        "persistent_after_aiter": bool(a.persistent),
        "block_n_lookup": bool(a.block_n_lookup),
        "block_n_key": int(r.request.padded_heads) * int(r.request.kernel_qlen),
        "block_n_key_ok": bool(a.block_n_key_ok),
        "head_fold_assert": bool(a.fold_error),
        "aiter_check_fails": bool(a.check_error),
        "key": {
            "q_type": r.request.q_dtype,
            "kv_type": r.request.kv_dtype,
            "gqa": int(a.gqa),
            "ps": int(bool(a.ps)),
            "qseqlen": int(a.qseqlen),
            "causal": int(bool(a.causal)),
            "lse": int(bool(a.lse)),
            "cprr": int(bool(a.cprr)),
        },
        "kernel": resolved_kernel(registry, shape.arch, r.request, a),
        "gluon": {f.name: bool(getattr(d.gluon, f.name)) for f in fields(d.gluon)},
    }
    invariants = {}
    for inv in INVARIANTS:
        holds = bool(inv.holds(d))
        invariants[inv.id] = {
            "holds": holds,
            **(
                {}
                if holds
                else {"symptom": inv.describe(d, registry), "violated": violated_conjuncts(inv, d)}
            ),
        }
    out = {
        "revision": revision.id,
        "registry": registry.id,
        "shape": shape.to_json(),
        "valid": all(validity.values()),
        "validity": validity,
        "route": r.to_json(),
        "decisions": decision_conditions(revision, registry, shape),
        "kernel": kernel,
        "scales": {name: _plain(value) for name, value in d.scales.items()},
        "invariants": invariants,
    }
    if out["valid"] and r.path == "asm_nonpersistent":  # the schedule matters to the ASM path alone
        out["why_not_persistent"] = why_not_persistent(revision, registry, shape)
    return out


# ---------------------------------------------------------------------------- the violated conjunct

# The domains of the string-valued parts of a Decision, for naming their values in a formula.
_ENUM_DOMAINS = {
    "route.path": PATHS,
    "route.head_padding": HEAD_PADDINGS,
    "route.head_unpad": HEAD_UNPADS,
    "route.request.q_dtype": Q_DTYPES,
    "route.request.kv_dtype": KERNEL_KV_DTYPES,
    **{f"shape.{f.name}": f.values for f in FIELDS if f.kind == "enum"},
}


def _named(prefix: str, obj: Any, leaves: dict[str, tuple[Any, Any]]) -> Any:
    """A copy of a concrete dataclass whose plain fields are z3 variables named by their path."""
    values = {}
    for f in fields(obj):
        value, name = getattr(obj, f.name), f"{prefix}.{f.name}"
        if is_dataclass(value):
            values[f.name] = _named(name, value, leaves)
        elif value is None or isinstance(value, EnumTerm):
            values[f.name] = value
        else:
            values[f.name] = _leaf(name, value, leaves)
    return type(obj)(**values)


def _leaf(name: str, value: Any, leaves: dict[str, tuple[Any, Any]]) -> Any:
    if isinstance(value, (bool, np.bool_)):
        var, concrete = z3.Bool(name), z3.BoolVal(bool(value))
    elif isinstance(value, (int, np.integer)):
        var, concrete = z3.Int(name), z3.IntVal(int(value))
    else:
        domain = _ENUM_DOMAINS.get(name, (value,))
        var, concrete = z3.Int(name), z3.IntVal(domain.index(value))
        leaves[name] = (var, concrete)
        return EnumTerm(tuple(domain), var)
    leaves[name] = (var, concrete)
    return var


def violated_conjuncts(inv: Invariant, d: Decision) -> dict[str, list[str]]:
    """The parts of an invariant that are false for this decision, each with the values behind it.

    The invariant is rebuilt over a Decision whose every field is a z3 variable named after it
    (``gluon.serves_fp8``, ``route.mtp_decode_qlen``); its formula is then walked against the
    concrete values.  An implication (``Or(Not(premise), conclusion)`` once built) puts its true
    premise under ``given`` and blames its conclusion; a false conjunction blames each false
    member; what is left is a comparison or a named field, shown with its values.
    Returns ``{"given": [...], "violated": [...]}``, both empty when the invariant holds.
    """
    leaves: dict[str, tuple[Any, Any]] = {}
    shape_view = SimpleNamespace(
        **{f.name: _leaf(f"shape.{f.name}", getattr(d.shape, f.name), leaves) for f in FIELDS}
    )
    named = Decision(
        shape=shape_view,
        route=_named("route", d.route, leaves),
        asm=_named("asm", d.asm, leaves),
        gluon=_named("gluon", d.gluon, leaves),
    )
    formula = as_z3(inv.holds(named))
    pins = list(leaves.values())
    given: list[str] = []

    def value(t: Any) -> Any:
        return z3.simplify(z3.substitute(t, *pins))

    def facts(t: Any) -> list[str]:
        """A true premise, atom by atom."""
        if z3.is_and(t):
            return [w for k in t.children() for w in facts(k)]
        return [_describe(t, value, True, given=True)]

    def blame(t: Any, want: bool) -> list[str]:
        """Why ``t`` is not ``want``."""
        if is_membership(t):  # one condition: the value and the values it needs
            return [_describe(t, value, want)]
        if z3.is_not(t):
            return blame(t.arg(0), not want)
        kids = t.children()
        if z3.is_implies(t) and want:
            given.extend(facts(kids[0]))
            return blame(kids[1], True)
        if z3.is_or(t) and want:
            premises = [k for k in kids if z3.is_not(k)]
            if premises and len(premises) < len(kids):  # Or(Not(premise), ..., conclusion): an implication
                given.extend(w for k in premises for w in facts(k.arg(0)))
                kids = [k for k in kids if not z3.is_not(k)]
            return [w for k in kids for w in blame(k, True)]
        if z3.is_and(t) and want:
            return [w for k in kids if not z3.is_true(value(k)) for w in blame(k, True)]
        if z3.is_and(t) and not want:
            return [w for k in kids for w in blame(k, False)]
        if z3.is_or(t) and not want:
            return [w for k in kids if z3.is_true(value(k)) for w in blame(k, False)]
        return [_describe(t, value, want)]

    if z3.is_true(value(formula)):
        return {"given": [], "violated": []}
    violated = list(dict.fromkeys(blame(formula, True)))
    return {"given": list(dict.fromkeys(given)), "violated": violated}


def _describe(t: Any, value: Any, want: bool, given: bool = False) -> str:
    """One atom in words: ``gluon.serves_fp8 = False (needs True)``, or a comparison with its values."""
    names = sorted({str(u) for u in free_constants(t)})
    values = {n: _show(n, value(z3.Const(n, _sort(t, n)))) for n in names}
    if z3.is_const(t) and not names:  # a literal: fixed by the revision and registry, not by the shape
        return f"a term the revision and registry fix to {t}" + ("" if given else f" (needs {want})")
    if z3.is_const(t):
        return f"{names[0]} = {values[names[0]]}" + ("" if given else f" (needs {want})")
    if z3.is_not(t) and z3.is_const(t.arg(0)) and names:  # a false named field
        return f"{names[0]} = {values[names[0]]}" + ("" if given else f" (needs {not want})")
    members = t.children() if is_membership(t) else [t] if z3.is_eq(t) else []
    if members and z3.is_const(members[0].arg(0)) and str(members[0].arg(0)) in _ENUM_DOMAINS:
        name = str(members[0].arg(0))
        targets = " or ".join(
            _ENUM_DOMAINS[name][m.arg(1).as_long()] for m in members if z3.is_int_value(m.arg(1))
        )
        return f"{name} = {values[name]}" + ("" if given else f" (needs {'' if want else 'not '}{targets})")
    text = " ".join(str(t).split())
    shown = ", ".join(f"{n}={v}" for n, v in values.items())
    return f"{text}" + ("" if given else f" is {not want}") + f"  [{shown}]"


def _sort(t: Any, name: str) -> Any:
    return next(c.sort() for c in free_constants(t) if str(c) == name)


def _show(name: str, v: Any) -> str:
    if name in _ENUM_DOMAINS and z3.is_int_value(v):
        return _ENUM_DOMAINS[name][v.as_long()]
    return str(v)
