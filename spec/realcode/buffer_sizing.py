"""The query length the persistent buffers are sized for, read from the file (issue 24 item 3).

The builder's ``__init__`` sizes the persistent schedule's buffers with AITER's
``get_mla_metadata_info_v1(max_num_reqs, max_seqlen_qo, ...)``: vLLM 0.27.1-0.33.0 once, at
``_mtp_decode_qlen`` (0.28.0 L343-351); 0.34.0 once per qlen in ``1.._mtp_decode_qlen``, merged dimension
by dimension by ``_max_mla_metadata_info`` (L1256-1273).  The buffers then cover the largest
``max_seqlen_qo`` any of those calls asks for, which is what the executed harness records
(``spec.realcode.executed.child``: the largest sizing) and what the persistent gate must not exceed.

Read here: each such call of ``__init__`` (found by the AITER function it calls), its ``max_seqlen_qo``
argument (by keyword or position) with the comprehension around the call, as ``max(...)`` over that
comprehension; over several calls, the largest; and the ``__init__`` statements computing what it reads.
The result is one synthesised function appended to the extraction, run in the same sandbox.  A sizing call
under an ``if``, a loop or a ``with`` of ``__init__`` (sized only sometimes) is refused, naming its line.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from spec.realcode.extract import (
    HARNESS_BUILDER_ATTRS,
    INIT_INPUTS,
    Extracted,
    RefusedCode,
    backward_slice,
    builder_init_slice,
    calls_to,
    check_safe,
    early_returns,
    find_class,
    method_named,
    module_or_stub,
    names_read,
    plain_args,
    plain_function,
    self_attrs,
)

SIZING_CALL = "get_mla_metadata_info_v1"  # aiter/mla.py: the persistent buffers' sizes for (batch, qlen, ...)
QLEN_PARAMETER, QLEN_POSITION = "max_seqlen_qo", 1  # its query-length parameter
FUNCTION = "mla_spec_metadata_qlen"  # the synthesised function: (builder, kv_cache_spec, vllm_config)
_COMPREHENSIONS = (ast.GeneratorExp, ast.ListComp, ast.SetComp)


def read(extracted: Extracted) -> Extracted | None:
    """``extracted`` with :data:`FUNCTION` appended, or None where the builder's ``__init__`` calls no
    ``get_mla_metadata_info_v1`` (the buffers are then taken to cover ``_mtp_decode_qlen``)."""
    label = extracted.label
    tree = extracted.tree
    builder = find_class(tree, lambda c: method_named(c, "_build_decode") is not None)
    init = method_named(builder, "__init__")
    if init is None:
        return None
    body = early_returns(init.body)
    sized: list[ast.expr] = []
    holders: list[ast.stmt] = []
    for stmt in body:
        for call in calls_to(stmt, SIZING_CALL):
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)):
                raise RefusedCode(
                    f"{label}: line {call.lineno}: the builder's __init__ sizes the persistent buffers "
                    f"inside a {type(stmt).__name__.lower()} statement (sized only sometimes), which is "
                    "outside the lifted subset; refused"
                )
            sized.append(_qlen_asked(label, call, stmt))
            holders.append(stmt)
    if not sized:
        return None
    expr = sized[0] if len(sized) == 1 else _call("max", *sized)
    known = set(HARNESS_BUILDER_ATTRS) | set(extracted.init_attrs)  # the main slice computes those already
    init_slice, _ = builder_init_slice(
        label, body, self_attrs(expr), known, "the persistent buffers' sizing", tree
    )
    first = min(body.index(s) for s in holders)
    locals_needed = names_read(expr) - module_or_stub(tree) - set(INIT_INPUTS)
    locals_slice = backward_slice(label, body[:first], locals_needed, INIT_INPUTS, "__init__")
    statements = sorted({id(s): s for s in [*init_slice, *locals_slice]}.values(), key=body.index)
    fn = plain_function(FUNCTION, plain_args(*INIT_INPUTS), [*statements, ast.Return(expr)])
    check_safe(label, "the persistent buffers' sizing", fn)
    missing = names_read(fn) - module_or_stub(extracted.module)
    if missing:
        raise RefusedCode(
            f"{label}: the persistent buffers' sizing reads {sorted(missing)}, which neither the slice nor "
            "the stubs define"
        )
    module = ast.Module(body=[*extracted.module.body, fn], type_ignores=[])
    ast.fix_missing_locations(module)
    return replace(extracted, module=module)


def _qlen_asked(label: str, call: ast.Call, stmt: ast.stmt) -> ast.expr:
    """The call's ``max_seqlen_qo`` as an expression of ``__init__``: with the comprehensions around the
    call in ``stmt`` (innermost last), ``max`` over them."""
    arg = next((kw.value for kw in call.keywords if kw.arg == QLEN_PARAMETER), None)
    if (
        arg is None
        and len(call.args) > QLEN_POSITION
        and not isinstance(call.args[QLEN_POSITION], ast.Starred)
    ):
        arg = call.args[QLEN_POSITION]
    if arg is None:
        raise RefusedCode(
            f"{label}: line {call.lineno}: {SIZING_CALL} is called without a {QLEN_PARAMETER} the lifted "
            "subset reads (by keyword or second positional argument); refused"
        )
    around = [c for c in ast.walk(stmt) if isinstance(c, _COMPREHENSIONS) and _contains(c.elt, call)]
    generators = [g for c in around for g in c.generators]
    if not generators:
        return arg
    return _largest_over_range(arg, generators) or _call(
        "max", ast.GeneratorExp(elt=arg, generators=generators)
    )


def _largest_over_range(arg: ast.expr, generators: list[ast.comprehension]) -> ast.expr | None:
    """``max(q for q in range(a, b))`` (0.34.0's one qlen per call up to ``_mtp_decode_qlen``) as ``b - 1 if
    b > a else max(())``: the same value and the same ValueError on an empty range, without running over
    a range whose end has no bound in the proof's domain (``num_speculative_tokens`` is unbounded there).
    None for any other comprehension."""
    if len(generators) != 1:
        return None
    (g,) = generators
    if g.ifs or g.is_async or not (isinstance(g.target, ast.Name) and isinstance(arg, ast.Name)):
        return None
    if arg.id != g.target.id or not (isinstance(g.iter, ast.Call) and isinstance(g.iter.func, ast.Name)):
        return None
    if g.iter.func.id != "range" or g.iter.keywords or not 1 <= len(g.iter.args) <= 2:
        return None
    start, end = g.iter.args if len(g.iter.args) == 2 else (ast.Constant(0), g.iter.args[0])
    last = ast.BinOp(left=end, op=ast.Sub(), right=ast.Constant(1))
    non_empty = ast.Compare(left=end, ops=[ast.Gt()], comparators=[start])
    return ast.IfExp(test=non_empty, body=last, orelse=_call("max", ast.Tuple(elts=[], ctx=ast.Load())))


def _contains(node: ast.AST, target: ast.AST) -> bool:
    return any(n is target for n in ast.walk(node))


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(name, ast.Load()), args=list(args), keywords=[])
