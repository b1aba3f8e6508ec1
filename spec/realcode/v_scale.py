"""The builder's fp8 V-scale correction, read from the file (issue 24 item 3).

vLLM 0.34.0 (sources §57) corrects an AITER fp8 kernel that leaves V unscaled in three places:

* ``__init__`` (L1384-1402) probes AITER once per query length: for an fp8 cache at DCP 1 with drafter
  steps it runs ``_aiter_fp8_mla_decode_drops_v_scale(heads, qlen, q_fp8)`` for ``qlen`` in
  ``2..min(_mtp_decode_qlen, 4)`` and keeps the lengths whose kernel dropped the scale;
* ``_build_decode`` (L2184-2188) passes the decode metadata
  ``fp8_v_scale_fix=(has_persistent_metadata and dcp_world_size == 1 and max_qo_len in those lengths)``;
* ``_forward_mqa`` (L3702-3703) multiplies the ASM output by ``k_scale`` where the field is set.

All three are read here from the file, so an edit of the probed range, of the guards or of the field is
proved, not taken from the model's formula (``mla_model.revisions.dcp_era.fp8_v_scale_fix``):

* the expression passed as the metadata's ``fp8_v_scale_fix``, where a local set ``False`` before the
  persistent gate and ``True`` inside it reads as the gate, and the locals it reads are sliced from the
  statements before the gate;
* the ``__init__`` statements that set the builder attributes it reads (those the main extraction does
  not compute already), with the locals they read;
* the probe: a module function reached from those statements whose body calls AITER's ``mla_decode_fwd``
  (it launches a kernel) is answered by the uninterpreted function :data:`DROPS_V_SCALE` of its
  ``(num_heads, qlen, q_fp8)`` arguments, which :func:`registry_answer` replaces with the AITER
  registry's answer (``mla_model.registry.probe_drops_v_scale``), as the executed harness's stand-in does
  (``mla_spec_stub.recorder.drops_v_scale``);
* whether forward_mqa (with the methods it calls) reads the field at all: a field nobody reads corrects
  nothing.

The extra code is appended to the main extraction's module as one function, so the same sandbox runs it;
a construct outside that subset is refused (:class:`~spec.realcode.extract.RefusedCode`) like any other.
The helpers below are :mod:`spec.realcode.extract`'s own, shared within the package.
"""

from __future__ import annotations

import ast
import copy
import inspect
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import z3

from mla_model.logic import Term
from mla_model.registry import Registry, probe_drops_v_scale
from spec.realcode.extract import (
    HARNESS_BUILDER_ATTRS,
    INIT_INPUTS,
    Extracted,
    RefusedCode,
    Substitute,
    backward_slice,
    builder_init_slice,
    calls_named,
    check_safe,
    defined_at_module,
    early_returns,
    find_class,
    method_named,
    module_closure,
    module_or_stub,
    names_read,
    persistent_gate_if,
    plain_args,
    plain_function,
    self_attrs,
    stored_names,
)

FIELD = "fp8_v_scale_fix"  # the decode metadata's field (0.34.0 L900)
FUNCTION = (
    "mla_spec_v_scale_fix"  # the synthesised function: (builder, kv_cache_spec, vllm_config, qlen, gate)
)
PROBE_STUB = "mla_spec_v_scale_probe"  # what the probe's calls are renamed to; the sandbox's builtin
GATE = "mla_spec_persistent_gate"  # the parameter standing for the persistent gate's outcome
PROBE_KERNEL = "mla_decode_fwd"  # a module function calling it launches AITER's decode: a probe
# The probe's answer: drops_v_scale(num_heads, qlen, q_fp8), uninterpreted until a registry answers it.
DROPS_V_SCALE = z3.Function(
    "mla_spec_drops_v_scale", z3.IntSort(), z3.IntSort(), z3.BoolSort(), z3.BoolSort()
)


@dataclass(frozen=True)
class VScale:
    """A file's V-scale correction, ready to run: the extraction with :data:`FUNCTION` appended, and the
    parameters of the probe whose calls it makes (bound to ``(num_heads, qlen, q_fp8)`` by position)."""

    extracted: Extracted
    probe_params: tuple[str, ...]


def read(extracted: Extracted) -> VScale | None:
    """The file's V-scale correction, or None where its builder passes no ``fp8_v_scale_fix`` to the decode
    metadata or forward_mqa never reads it (0.27.1-0.33.0: no correction)."""
    label = extracted.label
    tree = extracted.tree
    builder = find_class(tree, lambda c: method_named(c, "_build_decode") is not None)
    build, init = method_named(builder, "_build_decode"), method_named(builder, "__init__")
    if build is None or init is None:
        return None
    passed = [
        kw.value for n in ast.walk(build) if isinstance(n, ast.Call) for kw in n.keywords if kw.arg == FIELD
    ]
    if not passed or not _forward_reads_field(extracted.forward_source):
        return None
    if len(passed) > 1:
        lines = ", ".join(str(v.lineno) for v in passed)
        raise RefusedCode(
            f"{label}: _build_decode passes {FIELD} at lines {lines}; the lifted subset reads one"
        )
    value = passed[0]
    body = early_returns(build.body)
    gate_if = persistent_gate_if(body)
    if gate_if is None:  # extract() found it already; a file without one never gets here
        return None
    before = body[: body.index(gate_if)]
    qlen = _qlen_param(extracted)
    expr = _gate_read(label, value, body, gate_if, before)
    build_slice = backward_slice(label, before, names_read(expr), ("self", qlen, GATE), "_build_decode")

    module_defs = defined_at_module(tree)
    wanted = set().union(self_attrs(expr), *(self_attrs(s) for s in build_slice))
    known = set(HARNESS_BUILDER_ATTRS) | set(extracted.init_attrs)  # the main slice computes those already
    init_slice, _ = builder_init_slice(
        label, early_returns(init.body), wanted, known, f"the decode metadata's {FIELD}", tree
    )
    probe = _probe(init_slice, module_defs)
    stub = ast.Name(PROBE_STUB, ast.Load())
    renamed = (
        [Substitute(probe.name, stub).visit(copy.deepcopy(s)) for s in init_slice] if probe else init_slice
    )
    fn = plain_function(
        FUNCTION, plain_args(*INIT_INPUTS, qlen, GATE), [*renamed, *build_slice, ast.Return(expr)]
    )
    check_safe(label, "the V-scale correction", fn)

    # The module definitions it reaches that the extraction does not hold yet (stub and builtin names
    # stay stubs unless the file defines them).
    known = (
        set(defined_at_module(extracted.module)) | {PROBE_STUB} | (module_or_stub(tree) - set(module_defs))
    )
    extra = module_closure(label, tree, [fn], known, "the V-scale correction")
    module = ast.Module(body=[*extra, *extracted.module.body, fn], type_ignores=[])
    ast.fix_missing_locations(module)
    params = tuple(a.arg for a in probe.args.args) if probe else ()
    return VScale(replace(extracted, module=module), params)


def _forward_reads_field(forward_source: str) -> bool:
    """Whether forward_mqa (with the methods it calls, as extract() unparsed them) reads the field."""
    if not forward_source:
        return False
    return any(
        isinstance(n, ast.Attribute) and n.attr == FIELD and isinstance(n.ctx, ast.Load)
        for n in ast.walk(ast.parse(forward_source))
    )


def _qlen_param(extracted: Extracted) -> str:
    """The persistent gate's query-length parameter (extract() found it by where it flows)."""
    gate_fn = next(
        n
        for n in extracted.module.body
        if isinstance(n, ast.FunctionDef) and n.name == "mla_spec_persistent_gate"
    )
    return gate_fn.args.args[1].arg


def _gate_read(
    label: str, value: ast.expr, body: list[ast.stmt], gate_if: ast.If, before: list[ast.stmt]
) -> ast.expr:
    """The field's expression with each local that records the persistent gate (set ``False`` before it,
    ``True`` in its body: ``has_persistent_metadata``, whatever it is called) read as :data:`GATE`.  A
    local it reads that is set at or after the gate some other way is refused, naming it."""
    gate_at = body.index(gate_if)
    expr = copy.deepcopy(value)
    for name in sorted(names_read(value) - {"self"}):
        after = [s for s in body[gate_at:] if name in stored_names(s)]
        if not after:
            continue
        inside = [s for s in gate_if.body if _assigns_constant(s, name, True)]
        outside = [s for s in before if _assigns_constant(s, name, False)]
        if after == [gate_if] and inside and outside and not _stored_in(gate_if.orelse, name):
            expr = Substitute(name, ast.Name(GATE, ast.Load())).visit(expr)
            continue
        raise RefusedCode(
            f"{label}: line {value.lineno}: the decode metadata's {FIELD} reads {name}, set at line "
            f"{after[0].lineno} after the persistent gate in a form outside the lifted subset "
            "(the subset reads a local set False before the gate and True in its body); refused"
        )
    return expr


def _assigns_constant(stmt: ast.stmt, name: str, value: bool) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == name
        and isinstance(stmt.value, ast.Constant)
        and stmt.value.value is value
    )


def _stored_in(block: list[ast.stmt], name: str) -> bool:
    return any(name in stored_names(s) for s in block)


def _probe(init_slice: list[ast.stmt], module_defs: dict[str, ast.stmt]) -> ast.FunctionDef | None:
    """The module function the statements call that launches AITER's decode (0.34.0's
    ``_aiter_fp8_mla_decode_drops_v_scale``), if any."""
    for s in init_slice:
        for n in ast.walk(s):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                node = module_defs.get(n.func.id)
                if isinstance(node, ast.FunctionDef) and calls_named(node, PROBE_KERNEL):
                    return node
    return None


# -- the probe's answer ------------------------------------------------------------------------------------


def probe_stub(params: tuple[str, ...], answer: Any) -> Any:
    """The sandbox's stand-in for the probe: its call's ``(num_heads, qlen, q_fp8)``, bound by the probe's
    own parameter names, handed to ``answer`` (:func:`uninterpreted` while lifting, :func:`registry_probe`
    on a concrete shape)."""
    signature = inspect.Signature(
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
    )

    def probe(*args: Any, **kwargs: Any) -> Any:
        values = list(signature.bind(*args, **kwargs).arguments.values())
        if len(values) != 3:
            raise RefusedCode(
                f"the V-scale probe takes {len(values)} arguments, not (num_heads, qlen, q_fp8)"
            )
        return answer(*values)

    return probe


def uninterpreted(term_of: Any, sym_bool: Any) -> Any:
    """The probe's answer while lifting: :data:`DROPS_V_SCALE` of its arguments' z3 terms, wrapped by
    ``sym_bool`` (the explorer branches on it)."""
    return lambda heads, qlen, q_fp8: sym_bool(DROPS_V_SCALE(term_of(heads), term_of(qlen), term_of(q_fp8)))


def registry_probe(reg: Registry, arch: str) -> Any:
    """The probe's answer on a concrete shape: the registry's, as the executed harness gives it
    (``mla_spec_stub.recorder.drops_v_scale``)."""
    return lambda heads, qlen, q_fp8: bool(
        probe_drops_v_scale(reg, arch, int(heads), int(qlen), "fp8" if q_fp8 else "bf16")
    )


@cache
def _answer(reg: Registry, arch: Any) -> tuple[Any, Any]:
    """The registry's probe answers as a body over (num_heads, qlen, q_fp8) (z3 de Bruijn variables)."""
    heads, qlen, q_fp8 = z3.Var(0, z3.IntSort()), z3.Var(1, z3.IntSort()), z3.Var(2, z3.BoolSort())
    fp8 = probe_drops_v_scale(reg, arch, heads, qlen, "fp8")
    bf16 = probe_drops_v_scale(reg, arch, heads, qlen, "bf16")
    return DROPS_V_SCALE, z3.If(q_fp8, _bool(fp8), _bool(bf16))


def _bool(t: Term) -> Any:
    return z3.BoolVal(t) if isinstance(t, bool) else t


def registry_answer(term: Any, reg: Registry, arch: Any) -> Any:
    """``term`` with each probe call answered by ``reg`` on ``arch`` (a name or the prover's arch term)."""
    return z3.substitute_funs(term, _answer(reg, arch))
