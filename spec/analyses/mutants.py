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

**DCP gate mutants** (:func:`dcp_mutants`, ``mla-spec mutate --dcp``) mutate
vLLM 0.34.0's DCP routing (rocm_aiter_mla.py 0.34.0 L424-463, L485-506,
L590-650; the persistent gate L2044-2064):

* the module functions ``_select_dcp_decode_route``, ``_asm_dcp_verify_heads``,
  ``_asm_dcp_verify_configured``, ``_segmented_dcp_verify_supported``,
  ``_segmented_mla_fits_lds``, ``_triton_dcp_verify_supported``,
  ``_asm_causal_verify_unsupported`` and ``_is_row_view_dcp_route``: the whole body;
* the values of the module constants ``_NATIVE_CPRR_HEADS`` (16, 32, 64, 128)
  and ``_MIN_CPRR_QLEN`` (3);
* the persistent gate's DCP term (``not _is_row_view_dcp_route(dcp_route)``):
  only the gate's mutants that change it.

They take the operators above and, for the shapes of code these gates have:
``ror`` also swaps ``in``/``not in``; ``flip``, a returned ``True``/``False``
made the other; ``elem``, one element of a tuple left out (variant ``k``);
``const`` also on the integers of a constant table; ``route``, a
``_DCPDecodeRoute`` member replaced by each other member (variant: its name).
The 0.28.0 set keeps its own operators (its mutants and ids are unchanged).
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
DCP_RELEASE = "0.34.0"
DCP_FUNCTIONS = (
    "_select_dcp_decode_route",
    "_asm_dcp_verify_heads",
    "_asm_dcp_verify_configured",
    "_segmented_dcp_verify_supported",
    "_segmented_mla_fits_lds",
    "_triton_dcp_verify_supported",
    "_asm_causal_verify_unsupported",
    "_is_row_view_dcp_route",
)
DCP_CONSTANTS = ("_NATIVE_CPRR_HEADS", "_MIN_CPRR_QLEN")
DCP_REGIONS = (*DCP_FUNCTIONS, *DCP_CONSTANTS, GATE)
DCP_ROUTE = "_DCPDecodeRoute"  # the enum whose members the `route` operator swaps
DCP_TERM = "dcp"  # the persistent gate's mutants in the DCP set are those whose change names it
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
_DCP_ROR = {**_ROR, ast.In: ast.NotIn, ast.NotIn: ast.In}
_DCP_SYMBOL = {**_SYMBOL, ast.In: "in", ast.NotIn: "not in"}


class MutationError(ValueError):
    """The release file lacks a region the operators expect (one line)."""


@dataclass(frozen=True)
class Mutant:
    id: str
    function: str  # one of REGIONS (DCP_REGIONS for a DCP gate mutant)
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


def _dcp_regions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """The DCP regions of a 0.34.0-era file: module functions, constant values, the persistent gate."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    constants = {
        t.id: n.value
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }
    out: list[tuple[str, ast.AST]] = []
    for name in DCP_FUNCTIONS:
        if name not in functions:
            raise MutationError(f"no module function {name}")
        out.append((name, functions[name]))
    for name in DCP_CONSTANTS:
        if name not in constants:
            raise MutationError(f"no module constant {name}")
        out.append((name, constants[name]))
    return out + [r for r in _regions(tree) if r[0] == GATE]


def _route_members(tree: ast.Module) -> tuple[str, ...]:
    """The members of ``_DCPDecodeRoute`` as the file defines them."""
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == DCP_ROUTE:
            return tuple(
                t.id
                for a in n.body
                if isinstance(a, ast.Assign)
                for t in a.targets
                if isinstance(t, ast.Name)
            )
    raise MutationError(f"no class {DCP_ROUTE}")


def _nodes(root: ast.AST) -> list[ast.expr]:
    """Every expression under ``root`` (itself included), in source order; only expressions are mutated."""
    found = [n for n in ast.walk(root) if isinstance(n, ast.expr)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset, -_end(n)[0], -_end(n)[1]))


def _end(node: ast.expr) -> tuple[int, int]:
    """Where ``node`` ends (line, column); ``ast.parse`` sets both on every expression."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    return node.end_lineno, node.end_col_offset


def _variants(
    region: str,
    root: ast.AST,
    node: ast.expr,
    parent: dict[int, ast.AST],
    routes: tuple[str, ...] | None = None,
) -> Iterator[tuple[str, str | None, ast.expr, str]]:
    """(operator, variant, mutated node, what) for one node; ``routes``: the DCP set's (module docstring)."""
    ror, symbol = (_ROR, _SYMBOL) if routes is None else (_DCP_ROR, _DCP_SYMBOL)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in ror:
        op = type(node.ops[0])
        yield (
            "ror",
            None,
            ast.Compare(node.left, [ror[op]()], node.comparators),
            f"{symbol[op]} -> {symbol[ror[op]]}",
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
            f"`{ast.unparse(node)}` -> `{ast.unparse(node.operand)}`",
        )
    elif condition and not (
        isinstance(node, ast.Compare)
        and type(node.ops[0]) in ror
        and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
    ):
        # (negating `a == b` is ror's `a != b`: one mutant, not two; `in` likewise where ror swaps it)
        # the gate's whole value, or a condition opening with `not x`, starts where its first operand
        # does: "whole" keeps the ids apart
        leads_with_not = isinstance(node, ast.BoolOp) and isinstance(node.values[0], ast.UnaryOp)
        yield (
            "negate",
            "whole" if node is root or leads_with_not else None,
            ast.UnaryOp(ast.Not(), node),
            f"negate `{ast.unparse(node)}`",
        )
    table = routes is not None and region in DCP_CONSTANTS and (node is root or p is root)
    if (
        isinstance(node, ast.Constant)
        and type(node.value) is int
        and (isinstance(p, (ast.Compare, ast.BoolOp)) or table)
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
    if routes is not None:
        yield from _dcp_variants(node, p, routes)


def _dcp_variants(
    node: ast.expr, p: ast.AST | None, routes: tuple[str, ...]
) -> Iterator[tuple[str, str | None, ast.expr, str]]:
    """The DCP set's own operators (``flip``, ``elem``, ``route``) for one node."""
    if isinstance(p, ast.Return) and isinstance(node, ast.Constant) and type(node.value) is bool:
        yield "flip", None, ast.Constant(not node.value), f"return {node.value} -> return {not node.value}"
    if isinstance(node, ast.Tuple) and len(node.elts) >= 2:
        for k, elt in enumerate(node.elts):
            rest = node.elts[:k] + node.elts[k + 1 :]
            yield "elem", str(k), ast.Tuple(rest, ast.Load()), f"drop element {k}: {ast.unparse(elt)}"
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == DCP_ROUTE
        and node.attr in routes
    ):
        for other in routes:
            if other != node.attr:
                new = ast.Attribute(ast.Name(DCP_ROUTE, ast.Load()), other, ast.Load())
                yield "route", other, new, f"{DCP_ROUTE}.{node.attr} -> {other}"


def _changes_dcp_term(root: ast.AST, node: ast.expr, operator: str, variant: str | None) -> bool:
    """Whether a persistent-gate mutant changes the gate's DCP term (an operand naming ``dcp``)."""
    if not isinstance(root, ast.BoolOp):
        return False
    terms = [v for v in root.values if DCP_TERM in ast.unparse(v)]
    if operator == "drop" and node is root:
        return root.values[int(variant or 0)] in terms
    return any(node is n for t in terms for n in ast.walk(t))


def _offsets(text: str) -> list[int]:
    """Byte offset of each line's start (ast columns are UTF-8 byte offsets)."""
    starts, pos = [0], 0
    for line in text.encode().splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def generate(text: str, dcp: bool = False) -> list[Mutant]:
    """Every mutant of a release file's text, in region then source order; each compiles and differs.

    ``dcp``: the DCP gate mutants (module docstring) instead of the 0.28.0 set.
    """
    tree = ast.parse(text)
    lines = _offsets(text)
    original = text.encode()
    out: list[Mutant] = []
    routes = _route_members(tree) if dcp else None
    for region, root in _dcp_regions(tree) if dcp else _regions(tree):
        parent = {id(c): n for n in ast.walk(root) for c in ast.iter_child_nodes(n)}
        for node in _nodes(root):
            for operator, variant, new, what in _variants(region, root, node, parent, routes):
                if dcp and region == GATE and not _changes_dcp_term(root, node, operator, variant):
                    continue
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


def dcp_mutants(release: str = DCP_RELEASE) -> tuple[str, list[Mutant]]:
    """(the release file's text, its DCP gate mutants)."""
    text = fetch_release(release).read_text()
    return text, generate(text, dcp=True)


def shadow_tree(release: str, mutated: str, where: Path, relative: Path = RELATIVE_PATH) -> Path:
    """A vLLM tree under ``where`` that is the release's, with ``relative`` (default ``rocm_aiter_mla.py``)
    replaced by ``mutated``.

    Every other entry is a symlink into the cached release tree, so the harness,
    the shipped tests and the lifted revision see the mutant as a release file
    (its helper code and executed ``reorder_batch_threshold`` are the release's).
    Called again on the same ``where``, it replaces one more file.  Returns the
    replaced file's path.
    """
    real = release_tree(release)
    src, dst = real, where
    for part in relative.parts:
        if dst.is_symlink():  # a folder an earlier call linked whole: now it holds a replaced file
            dst.unlink()
        dst.mkdir(parents=True, exist_ok=True)
        for entry in os.listdir(src):
            if entry != part and not os.path.lexists(dst / entry):
                os.symlink(src / entry, dst / entry)
        src, dst = src / part, dst / part
    if dst.is_symlink():
        dst.unlink()
    dst.write_text(mutated)
    return dst
