"""Environment knobs the model does not know, read off the gate code and taken as free inputs (issue 24
item 3).

A pull request that adds a knob (``os.environ.get("VLLM_X")``, ``os.getenv``, ``os.environ[...]`` or a
new ``envs.VLLM_X``) to the code the gates reach changes the routing only through the comparisons it makes
with the knob's value.  So a string knob has finitely many values that matter: unset, and each constant the
code compares it with (``==``, ``!=``, ``in``, ``is``; through ``.lower()``, ``.strip()``, ``int(...)``,
``str(...)``, ``x or "default"``, or a local the value was stored in).  Any other value behaves like one of
those.  Where the code only tests the knob's truth, the values are unset and ``"1"``.  check proves the
file once per value of each knob (the others unset: :func:`variants`), so a violation that needs
``VLLM_X=1`` is found and named with it, and never turns the file's results UNKNOWN.

Modelled knobs (``VLLM_ROCM_AITER_MLA_ASM_PADDING``, the shape's mode; ``VLLM_ROCM_AITER_MLA_DCP_VERIFY``,
the tree's declared default) are the model's, not free inputs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

MODELLED = frozenset({"VLLM_ROCM_AITER_MLA_ASM_PADDING", "VLLM_ROCM_AITER_MLA_DCP_VERIFY"})
ENVS, OS = "envs", "os"
# The wrappers a comparison may put around a knob's value and still compare the value itself.
_TRANSPARENT_METHODS = frozenset({"lower", "upper", "strip", "lstrip", "rstrip"})
_TRANSPARENT_CALLS = frozenset({"int", "str", "bool"})


@dataclass(frozen=True)
class Knob:
    """A knob the gate code reads and the model does not know.  ``values``: the values that route
    differently, None (unset) first; for an ``os`` knob, strings (the environment holds strings)."""

    name: str
    via: str  # ENVS (vllm.envs.NAME) or OS (os.environ / os.getenv)
    line: int  # where the taken code first reads it
    values: tuple[Any, ...]

    def describe(self) -> str:
        shown = ", ".join("unset" if v is None else repr(v) for v in self.values)
        return f"{self.name}: a knob the model did not know, taken as a free input (values {shown})"


def _read(node: ast.AST) -> tuple[str, str] | None:
    """(name, via) where ``node`` itself reads a knob."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "envs":
        return (node.attr, ENVS) if node.attr.startswith("VLLM_") else None
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = node.args[0].value
        f = node.func
        environ_get = (
            isinstance(f, ast.Attribute)
            and f.attr == "get"
            and isinstance(f.value, ast.Attribute)
            and f.value.attr == "environ"
            and isinstance(f.value.value, ast.Name)
            and f.value.value.id == "os"
        )
        getenv = isinstance(f, ast.Attribute) and f.attr == "getenv" and _is_name(f.value, "os")
        if (environ_get or getenv) and isinstance(name, str):
            return name, OS
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "environ"
        and _is_name(node.value.value, "os")
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value, OS
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _strip(node: ast.AST) -> ast.AST:
    """``node`` without the wrappers that keep its value's identity for a comparison."""
    while True:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _TRANSPARENT_METHODS
            and not node.args
        ):
            node = node.func.value
        elif (
            isinstance(node, ast.Call) and _is_name_in(node.func, _TRANSPARENT_CALLS) and len(node.args) == 1
        ):
            node = node.args[0]
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and node.values:
            node = node.values[0]
        else:
            return node


def _is_name_in(node: ast.AST, names: frozenset[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _constants(node: ast.AST) -> list[Any]:
    if isinstance(node, ast.Constant) and node.value is not None:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value is not None]
    return []


def knobs_of(module: ast.Module) -> tuple[Knob, ...]:
    """Every knob the taken gate code reads that the model does not know, with the values that matter."""
    reads: dict[str, tuple[str, int]] = {}
    holders: dict[str, set[str]] = {}  # local name -> knobs stored in it
    for node in ast.walk(module):
        found = _read(node)
        if found and found[0] not in MODELLED and found[0] not in reads:
            reads[found[0]] = (found[1], getattr(node, "lineno", 0))
        if isinstance(node, ast.Assign) and (r := _read(_strip(node.value))) and r[0] not in MODELLED:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    holders.setdefault(t.id, set()).add(r[0])
    compared: dict[str, list[Any]] = {name: [] for name in reads}
    for node in ast.walk(module):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for i, operand in enumerate(operands):
            inner = _strip(operand)
            named = _read(inner)
            names = (
                {named[0]}
                if named
                else holders.get(inner.id, set())
                if isinstance(inner, ast.Name)
                else set()
            )
            for name in names & set(compared):
                for j, other in enumerate(operands):
                    if j != i:
                        compared[name] += _constants(other)
    out = []
    for name, (via, line) in sorted(reads.items(), key=lambda kv: kv[1][1]):
        values = [str(v) if via == OS else v for v in compared[name]]
        distinct = list(dict.fromkeys(values)) or ["1" if via == OS else True]
        out.append(Knob(name, via, line, (None, *distinct)))
    return tuple(out)


def variants(knobs: tuple[Knob, ...]) -> list[tuple[tuple[str, Any], ...]]:
    """The knob settings check proves besides all-unset: each knob at each of its set values, the others
    unset (``((name, value),)``)."""
    return [((k.name, v),) for k in knobs for v in k.values if v is not None]


def setting_label(setting: tuple[tuple[str, Any], ...]) -> str:
    """``VLLM_X=1`` for a setting (what a revision's id carries in brackets)."""
    return ", ".join(f"{name}={value}" for name, value in setting)
