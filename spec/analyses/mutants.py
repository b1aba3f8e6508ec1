"""Mutants of a vLLM release's real ``rocm_aiter_mla.py``, made at run time by AST mutation operators.

No vLLM text lives in this repository: the operators walk the parsed release
file (``spec.realcode.source.fetch_release``) and each mutant is a splice of
that file's own text (the mutated expression's span, replaced by
``ast.unparse`` of the mutated node, in parentheses).  Everything outside the
span is byte-identical to the release.

Regions (the routing code):

* ``AiterMLAHelper.use_gluon_decode``, ``use_gluon_verify``,
  ``get_mla_padded_q`` and ``get_actual_mla_num_heads``: the whole body;
* ``AiterMLAMetadataBuilder._build_decode``: the value of the
  ``use_persistent_metadata = ...`` assignment;
* ``AiterMLAMetadataBuilder.__init__``: the value of the
  ``self._mtp_decode_qlen = ...`` assignment.

Operators (each applied at every site of the region where it applies):

``ror``     relational operator replacement: ``<``/``<=`` and ``>``/``>=``
            swap (the boundary), ``==``/``!=`` swap;
``drop``    one operand of a BoolOp left out (variant ``k``: the k-th operand);
``negate``  a condition negated: an ``if`` test, a boolean ``return`` value,
            the persistent gate's whole value; an existing ``not x`` becomes ``x``
            (not for ``a == b``/``a != b``, where it is ``ror``'s mutant);
``const``   an integer constant of a comparison or BoolOp, ``+1`` and ``-1``;
``andor``   ``and`` <-> ``or`` of a BoolOp;
``minmax``  ``max(...)`` <-> ``min(...)`` (``get_actual_mla_num_heads`` has no
            comparison, constant or BoolOp; this is its only operator).

Each mutant's id is ``<function>/<operator>/L<line>.<col>[/<variant>]`` (the
line and column of the mutated node in the release file), stable for one
release file; its site is ``<function>:<line>``.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spec.realcode.source import RELATIVE_PATH, fetch_release, release_tree

RELEASE = "0.28.0"
HELPER = "AiterMLAHelper"
BUILDER = "AiterMLAMetadataBuilder"
HELPER_FUNCTIONS = ("use_gluon_decode", "use_gluon_verify", "get_mla_padded_q", "get_actual_mla_num_heads")
GATE = "use_persistent_metadata"  # the assignment in _build_decode
QLEN = "_mtp_decode_qlen"  # the assignment in __init__
REGIONS = (*HELPER_FUNCTIONS, GATE, QLEN)
# Regions the lifted revision (spec.realcode.revision) does not read: a symbolic
# EQUIVALENT there says nothing (head padding is the model's; get_mla_padded_q takes tensors).
NOT_LIFTED = frozenset({"get_mla_padded_q"})

_ROR = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class MutationError(ValueError):
    """The release file lacks a region the operators expect (one line)."""


@dataclass(frozen=True)
class Mutant:
    id: str
    function: str  # one of REGIONS
    operator: str
    line: int
    description: str
    start: int  # byte span of the mutated node in the release file
    end: int
    replacement: str

    @property
    def site(self) -> str:
        return f"{self.function}:{self.line}"

    def apply(self, original: bytes) -> str:
        return (original[: self.start] + self.replacement.encode() + original[self.end :]).decode()


def _regions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if HELPER not in classes or BUILDER not in classes:
        raise MutationError(f"no class {HELPER} or {BUILDER}")
    methods = {
        c: {f.name: f for f in classes[c].body if isinstance(f, ast.FunctionDef)} for c in (HELPER, BUILDER)
    }
    out: list[tuple[str, ast.AST]] = []
    for name in HELPER_FUNCTIONS:
        if name not in methods[HELPER]:
            raise MutationError(f"no {HELPER}.{name}")
        out.append((name, methods[HELPER][name]))
    for method, name, target in (
        ("_build_decode", GATE, lambda t: isinstance(t, ast.Name) and t.id == GATE),
        ("__init__", QLEN, lambda t: isinstance(t, ast.Attribute) and t.attr == QLEN),
    ):
        fn = methods[BUILDER].get(method)
        found = (
            [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and any(target(t) for t in n.targets)]
            if fn
            else []
        )
        if len(found) != 1:
            raise MutationError(f"{BUILDER}.{method}: {len(found)} assignments to {name}, expected 1")
        out.append((name, found[0].value))
    return out


def _nodes(root: ast.AST) -> list[ast.expr]:
    """Every expression under ``root`` (itself included), in source order; only expressions are mutated."""
    found = [n for n in ast.walk(root) if isinstance(n, ast.expr)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset, -_end(n)[0], -_end(n)[1]))


def _end(node: ast.expr) -> tuple[int, int]:
    """Where ``node`` ends (line, column); ``ast.parse`` sets both on every expression."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    return node.end_lineno, node.end_col_offset


def _variants(
    region: str, root: ast.AST, node: ast.expr, parent: dict[int, ast.AST]
) -> Iterator[tuple[str, str | None, ast.expr, str]]:
    """(operator, variant, mutated node, what) for one node."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _ROR:
        op = type(node.ops[0])
        yield (
            "ror",
            None,
            ast.Compare(node.left, [_ROR[op]()], node.comparators),
            f"{_SYMBOL[op]} -> {_SYMBOL[_ROR[op]]}",
        )
    if isinstance(node, ast.BoolOp):
        name = "and" if isinstance(node.op, ast.And) else "or"
        for k in range(len(node.values)):
            rest = node.values[:k] + node.values[k + 1 :]
            yield (
                "drop",
                str(k),
                rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest),
                f"drop operand {k} of `{name}`: {ast.unparse(node.values[k])}",
            )
        yield (
            "andor",
            None,
            ast.BoolOp(ast.Or() if name == "and" else ast.And(), node.values),
            f"`{name}` -> `{'or' if name == 'and' else 'and'}`",
        )
    p = parent.get(id(node))
    condition = (
        (isinstance(p, ast.If) and p.test is node)
        or (node is root and region == GATE)
        or (isinstance(p, ast.Return) and isinstance(node, (ast.BoolOp, ast.Compare, ast.UnaryOp)))
    )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield (
            "negate",
            None,
            node.operand,
            f"`not {ast.unparse(node.operand)}` -> `{ast.unparse(node.operand)}`",
        )
    elif condition and not (isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Eq, ast.NotEq))):
        # (negating `a == b` is ror's `a != b`: one mutant, not two)
        # the gate's whole value starts where its first operand does: "whole" keeps the ids apart
        yield (
            "negate",
            "whole" if node is root else None,
            ast.UnaryOp(ast.Not(), node),
            f"negate `{ast.unparse(node)}`",
        )
    if (
        isinstance(node, ast.Constant)
        and type(node.value) is int
        and isinstance(p, (ast.Compare, ast.BoolOp))
    ):
        for d in (1, -1):
            yield (
                "const",
                f"{d:+d}",
                ast.Constant(node.value + d),
                f"constant {node.value} -> {node.value + d}",
            )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
        other = "min" if node.func.id == "max" else "max"
        yield (
            "minmax",
            None,
            ast.Call(ast.Name(other, ast.Load()), node.args, node.keywords),
            f"{node.func.id}(...) -> {other}(...)",
        )


def _offsets(text: str) -> list[int]:
    """Byte offset of each line's start (ast columns are UTF-8 byte offsets)."""
    starts, pos = [0], 0
    for line in text.encode().splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def generate(text: str) -> list[Mutant]:
    """Every mutant of a release file's text, in region then source order; each compiles and differs."""
    tree = ast.parse(text)
    lines = _offsets(text)
    original = text.encode()
    out: list[Mutant] = []
    for region, root in _regions(tree):
        parent = {id(c): n for n in ast.walk(root) for c in ast.iter_child_nodes(n)}
        for node in _nodes(root):
            for operator, variant, new, what in _variants(region, root, node, parent):
                end_line, end_col = _end(node)
                start = lines[node.lineno - 1] + node.col_offset
                end = lines[end_line - 1] + end_col
                mid = f"/{operator}/L{node.lineno}.{node.col_offset}" + (f"/{variant}" if variant else "")
                m = Mutant(
                    region + mid,
                    region,
                    operator,
                    node.lineno,
                    what[:120],
                    start,
                    end,
                    f"({ast.unparse(ast.fix_missing_locations(new))})",
                )
                mutated = m.apply(original)
                if mutated == text:
                    continue
                compile(mutated, "<mutant>", "exec")
                out.append(m)
    if len({m.id for m in out}) != len(out):
        raise MutationError("two mutants share an id")
    return out


def release_mutants(release: str = RELEASE) -> tuple[str, list[Mutant]]:
    """(the release file's text, its mutants)."""
    text = fetch_release(release).read_text()
    return text, generate(text)


def shadow_tree(release: str, mutated: str, where: Path) -> Path:
    """A vLLM tree under ``where`` that is the release's, with ``rocm_aiter_mla.py`` replaced by ``mutated``.

    Every other entry is a symlink into the cached release tree, so the harness,
    the shipped tests and the lifted revision see the mutant as a release file
    (its helper code and executed ``reorder_batch_threshold`` are the release's).
    Returns the mutant's path.
    """
    real = release_tree(release)
    src, dst = real, where
    for part in RELATIVE_PATH.parts:
        dst.mkdir(parents=True, exist_ok=True)
        for entry in os.listdir(src):
            if entry != part:
                os.symlink(src / entry, dst / entry)
        src, dst = src / part, dst / part
    dst.write_text(mutated)
    return dst
