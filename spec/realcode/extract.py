"""Pick the routing gates out of rocm_aiter_mla.py with ``ast``; never run the module.

What is taken (sources §15 lists what each release needs):

* the ``AiterMLAHelper`` class, pruned to its constants, the predicates
  (``use_gluon_decode``, ``use_gluon_verify``, ``is_valid_num_heads``,
  ``get_actual_mla_num_heads``, ``get_mla_padded_q``, ``get_mla_unpadded_o``)
  and the helper methods they call;
* every module-level function, class or constant those reach, found by
  following free names statically (a retry loop on NameError would miss names
  reached only at call time, such as ``Path`` inside the native-H24 probe);
* from the metadata builder: the statements of ``__init__`` that set
  ``self._mtp_decode_qlen`` (and the other builder attributes the gate reads),
  and the test of the ``if`` of ``_build_decode`` that builds the persistent
  schedule (``use_persistent_metadata`` in every release, found by that call,
  not by the name) with the earlier statements of that method it depends on
  (a backward slice), and the route decisions found by where they flow;
* where a release has no ``use_gluon_verify`` (0.27), the inline verify test
  of ``forward_mqa``.

Everything taken is checked before it is interpreted: a free name must be
defined by the taken code or be one of the sandbox's stubs, an import must be
of a stubbed module, and no dunder attribute may be touched; the interpreter
(spec.realcode.interpreter) then refuses every construct outside its
allow-listed subset.  Anything else is refused with an error that names it.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field

from spec.realcode.source import Source, SourceError

HELPER = "AiterMLAHelper"
PREDICATES = (
    "use_gluon_decode",
    "use_gluon_verify",
    "is_valid_num_heads",
    "get_actual_mla_num_heads",
    "get_mla_padded_q",
    "get_mla_unpadded_o",
    "has_fp8_non_causal_qlen2_kernel",
)
# The decisions of _build_decode besides the persistent gate that decide the path (returned with it, under
# these vLLM names whatever the file calls its locals): 0.34's Triton verify, the DCP route (0.31 on) and the
# segmented DCP verify flag (0.29/0.30).
PATH_LOCALS = ("use_triton_verify", "dcp_route", "use_segmented_dcp_verify")
# Where each decision flows to (so a renamed local is still found): the AITER entry point the persistent gate
# guards, and the decode metadata's fields (vLLM's dataclass, read by forward_mqa) the other decisions feed.
# dcp_route is such a field itself (0.31.0 L1480); the Triton verify decides whether the metadata's kv-split
# count is computed (0.34.0 L1936), the segmented flag whether its row-view dcp_verify is (0.29.0 L1101).
PERSISTENT_SCHEDULE_CALL = "get_mla_metadata_v1"
DECISION_FIELDS = {
    "dcp_route": ("dcp_route", False),
    "use_triton_verify": ("triton_verify_num_kv_splits", True),
    "use_segmented_dcp_verify": ("dcp_verify", True),
}
# Values the harness hands the builder slices (the rest must be computed by the sliced code). The step's
# query length is found by where it flows (the ``max_qo_len`` parameter of the predicates _build_decode
# calls), so this is only the name vLLM gives it in every release 0.27.1-0.34.0.
QLEN = "max_qo_len"
INIT_INPUTS = ("self", "kv_cache_spec", "vllm_config")
HARNESS_BUILDER_ATTRS = (
    "num_heads",
    "dcp_world_size",
    "_kv_cache_dtype_str",
    "reorder_batch_threshold",
    "_kv_cache_bytes",
    "_decode_causal",
)
# Module-level imports of the real file whose names the sandbox provides as stubs.
STUB_NAMES = frozenset(
    {
        "functools",
        "math",
        "logger",
        "is_quantized_kv_cache",
        "Path",
        "Final",
        "ClassVar",
        "Enum",
        "torch",
        "envs",
        "on_gfx950",
        "on_gfx942",
        "get_cdna_version",
        "largest_power_of_2_divisor",
        "os",  # os.environ and os.getenv only (OS_ATTRIBUTES): knobs the model may not know (realcode.knobs)
    }
)
OS_ATTRIBUTES = frozenset({"environ", "getenv"})
STUB_MODULES = frozenset(
    {
        "os",
        "vllm.envs",
        "vllm.platforms.rocm",
        "vllm.platforms",
        "aiter.jit.core",
        "aiter.ops.triton.attention.mla",
        "functools",
        "math",
    }
)
SAFE_BUILTIN_NAMES = frozenset(
    {
        "abs",
        "all",
        "any",
        "bool",
        "dict",
        "enumerate",
        "float",
        "frozenset",
        "int",
        "isinstance",
        "len",
        "list",
        "max",
        "min",
        "range",
        "set",
        "sorted",
        "str",
        "sum",
        "tuple",
        "zip",
        "staticmethod",
        "classmethod",
        "property",
        "None",
        "True",
        "False",
        "Exception",
        "ValueError",
        "TypeError",
        "AssertionError",
        "ImportError",
        "OSError",
        "RuntimeError",
        "NotImplementedError",
        "KeyError",
        "ZeroDivisionError",
        "ModuleNotFoundError",
        "AttributeError",
        "getattr",
    }
)


class RefusedCode(SourceError):
    """The file asks for something the sandbox will not run."""


@dataclass
class Extracted:
    label: str
    module: ast.Module  # the taken definitions plus three synthesised functions
    predicates: tuple[str, ...]  # AiterMLAHelper predicates present in this release
    forward_source: str  # forward_mqa's source, for facts read off the text (kv_scale=1.0)
    init_attrs: tuple[str, ...] = field(
        default_factory=tuple
    )  # builder attributes computed by the init slice


def _loads(node: ast.AST) -> set[str]:
    """Names read in ``node`` that it does not bind itself (parameters, assignments, comprehensions)."""
    bound: set[str] = set()
    read: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (bound if isinstance(n.ctx, (ast.Store, ast.Del)) else read).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not node:
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return read - bound


def _helper_refs(node: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == HELPER
    }


def _self_attrs(node: ast.AST, ctx=ast.Load) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and isinstance(n.ctx, ctx)
    }


def _stored_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _check_safe(label: str, where: str, node: ast.AST) -> None:
    os_reads = {
        id(n.value)
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "os"
        if n.attr in OS_ATTRIBUTES
    }
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id == "os" and isinstance(n.ctx, ast.Load) and id(n) not in os_reads:
            raise RefusedCode(
                f"{label}: {where} reaches 'os' beyond os.environ and os.getenv "
                f"(line {getattr(n, 'lineno', '?')}), which is outside the stub set"
            )
        if isinstance(n, ast.Attribute) and n.attr.startswith("__") and n.attr.endswith("__"):
            raise RefusedCode(f"{label}: {where} touches the dunder attribute {n.attr!r}; refused")
        if isinstance(n, ast.Name) and n.id.startswith("__") and n.id.endswith("__"):
            raise RefusedCode(f"{label}: {where} reads {n.id!r}; refused")
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            raise RefusedCode(f"{label}: {where} declares global/nonlocal names; refused")
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name not in STUB_MODULES:
                    raise RefusedCode(f"{label}: {where} imports {a.name!r}, which is outside the stub set")
        if isinstance(n, ast.ImportFrom):
            if (n.module or "") not in STUB_MODULES:
                raise RefusedCode(
                    f"{label}: {where} imports from {n.module!r}, which is outside the stub set"
                )


def _defined_at_module(tree: ast.Module) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node  # an async def is taken only to be refused by name (the interpreter)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node
    return out


def _find_class(tree: ast.Module, predicate) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and predicate(n)), None)


def _method(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if cls is None:
        return None
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _backward_slice(
    label: str, body: list[ast.stmt], needed: set[str], inputs: tuple[str, ...], where: str
) -> list[ast.stmt]:
    """The statements of ``body`` (in order) that compute ``needed`` local names."""
    needed = set(needed) - set(inputs)
    taken: list[ast.stmt] = []
    for stmt in reversed(body):
        defines = _stored_names(stmt)
        if not defines & needed:
            continue
        taken.append(stmt)
        simple = isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt in body
        if simple:
            needed -= defines
        needed |= _loads(stmt) - set(inputs)
    taken.reverse()
    return taken


def extract(source: Source) -> Extracted:
    label, text = source.label, source.text
    try:
        tree = ast.parse(text, filename=label)
    except SyntaxError as e:
        raise SourceError(f"{label}: syntax error at line {e.lineno}: {e.msg}") from None
    helper = _find_class(tree, lambda c: c.name == HELPER)
    if helper is None:
        raise SourceError(f"{label}: no class {HELPER}; not a vLLM ROCm AITER MLA backend file")

    # 1. The helper, pruned: constants plus the predicates and the helper methods they call.
    methods = {n.name: n for n in helper.body if isinstance(n, ast.FunctionDef)}
    present = tuple(p for p in PREDICATES if p in methods)
    keep = set(present)
    frontier = list(present)
    while frontier:
        for ref in _helper_refs(methods[frontier.pop()]):
            if ref in methods and ref not in keep:
                keep.add(ref)
                frontier.append(ref)
    pruned_body = [n for n in helper.body if not isinstance(n, ast.FunctionDef) or n.name in keep]
    pruned_body = [
        n for n in pruned_body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    ]
    pruned = ast.ClassDef(
        name=HELPER, bases=[], keywords=[], body=pruned_body or [ast.Pass()], decorator_list=[]
    )
    for member in pruned_body:
        _check_safe(label, f"{HELPER}.{getattr(member, 'name', 'constant')}", member)

    # 2. The builder slices and the inline verify.
    builder = _find_class(tree, lambda c: _method(c, "_build_decode") is not None)
    build = _method(builder, "_build_decode")
    init = _method(builder, "__init__")
    if build is None or init is None:
        raise SourceError(f"{label}: no metadata builder with __init__ and _build_decode")
    gate_if = _persistent_gate_if(build)
    if gate_if is None:
        raise SourceError(
            f"{label}: _build_decode calls no {PERSISTENT_SCHEDULE_CALL} under an 'if' (the persistent gate)"
        )
    before = build.body[: build.body.index(gate_if)]
    stored_before = set().union(*(_stored_names(s) for s in before))
    path_locals = {role: local for role, local in _decision_locals(build).items() if local in stored_before}
    build_inputs = ("self", _qlen_local(build, methods))
    build_slice = _backward_slice(
        label, before, _loads(gate_if.test) | set(path_locals.values()), build_inputs, "_build_decode"
    )
    returned = ast.Tuple(
        elts=[
            gate_if.test,
            ast.Dict(
                keys=[ast.Constant(role) for role in path_locals],
                values=[ast.Name(local, ast.Load()) for local in path_locals.values()],
            ),
        ],
        ctx=ast.Load(),
    )
    build_fn = _function(
        "mla_spec_persistent_gate", _args(*build_inputs), [*build_slice, ast.Return(returned)]
    )
    missing = _loads(build_fn) - _module_or_stub(tree) - {HELPER}
    if missing:
        raise RefusedCode(
            f"{label}: the persistent gate reads {sorted(missing)}, "
            "which neither the slice nor the stubs define"
        )

    wanted_attrs = (_self_attrs(build_fn) - set(HARNESS_BUILDER_ATTRS)) | {"_mtp_decode_qlen"}
    init_slice: list[ast.stmt] = []
    init_attrs: set[str] = set()
    while wanted_attrs - init_attrs:
        attr = sorted(wanted_attrs - init_attrs)[0]
        init_attrs.add(attr)
        stmts = [s for s in init.body if attr in _self_attrs(s, ast.Store)]
        if not stmts:
            raise RefusedCode(
                f"{label}: the gate reads self.{attr}, which the builder's __init__ never sets "
                "and the harness does not model"
            )
        for s in stmts:
            if s not in init_slice:
                init_slice.append(s)
            wanted_attrs |= _self_attrs(s) - set(HARNESS_BUILDER_ATTRS)
    init_slice.sort(key=init.body.index)
    locals_needed = set().union(*(_loads(s) for s in init_slice)) - _module_or_stub(tree) - {HELPER}
    # The locals those statements read, computed anywhere before the last of them (0.34.0 sets the cache dtype
    # between its DCP statements).
    last = max(init.body.index(s) for s in init_slice)
    earlier = [s for s in init.body[:last] if s not in init_slice]
    init_slice = sorted(
        _backward_slice(label, earlier, locals_needed, INIT_INPUTS, "__init__") + init_slice,
        key=init.body.index,
    )
    init_fn = _function("mla_spec_builder_init", _args(*INIT_INPUTS), init_slice)

    functions = [build_fn, init_fn]
    inline = None
    if "use_gluon_verify" not in present:
        impl = _find_class(tree, lambda c: _method(c, "forward_mqa") is not None)
        inline = _inline_verify_test(_method(impl, "forward_mqa"))
        if inline is None:
            raise SourceError(f"{label}: neither use_gluon_verify nor an inline verify test in forward_mqa")
        functions.append(
            _function("mla_spec_inline_verify", _args("self", _metadata_local(inline)), [ast.Return(inline)])
        )
    for fn in functions:
        _check_safe(label, fn.name.replace("mla_spec_", ""), fn)
    body: list[ast.stmt] = [pruned, *functions]

    # 3. Module-level definitions reached from everything taken, transitively.
    module_defs = _defined_at_module(tree)
    taken: dict[str, ast.stmt] = {}
    frontier_names = set().union(*(_loads(n) for n in body))
    while frontier_names:
        name = frontier_names.pop()
        if name in taken or name == HELPER or name in STUB_NAMES or name in SAFE_BUILTIN_NAMES:
            continue
        node = module_defs.get(name)
        if node is None or isinstance(node, (ast.Import, ast.ImportFrom)):
            raise RefusedCode(f"{label}: the gate code reaches {name!r}, which is outside the stub set")
        _check_safe(label, name, node)
        taken[name] = node
        frontier_names |= _loads(node)
    order = {id(n): i for i, n in enumerate(tree.body)}
    module_nodes = sorted({id(n): n for n in taken.values()}.values(), key=lambda n: order[id(n)])
    module = ast.Module(body=[*module_nodes, *body], type_ignores=[])
    ast.fix_missing_locations(module)
    impl = _find_class(tree, lambda c: _method(c, "forward_mqa") is not None)
    forward = _method(impl, "forward_mqa")
    return Extracted(
        label, module, present, ast.unparse(forward) if forward else "", tuple(sorted(init_attrs))
    )


def _calls(node: ast.AST, name: str) -> bool:
    """Whether ``node`` calls a function or method named ``name``."""
    return any(
        isinstance(n, ast.Call)
        and (n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", None)) == name
        for n in ast.walk(node)
    )


def _persistent_gate_if(build: ast.FunctionDef) -> ast.If | None:
    """The statement of _build_decode whose test decides the persistent schedule: the top-level ``if`` whose
    body builds it (every release 0.27.1-0.34.0 tests one local there, ``use_persistent_metadata``, but any
    name or an inline condition is found the same way)."""
    return next(
        (
            s
            for s in build.body
            if isinstance(s, ast.If) and any(_calls(b, PERSISTENT_SCHEDULE_CALL) for b in s.body)
        ),
        None,
    )


def _qlen_local(build: ast.FunctionDef, methods: dict[str, ast.FunctionDef]) -> str:
    """The local of _build_decode holding the step's query length: the argument _build_decode passes as the
    ``max_qo_len`` parameter of an AiterMLAHelper predicate (``int(...)`` around it unwrapped; 0.34.0
    L1903), else vLLM's name for it."""
    for n in ast.walk(build):
        if not (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == HELPER
            and n.func.attr in methods
        ):
            continue
        params = [a.arg for a in methods[n.func.attr].args.args]
        if params[:1] in (["self"], ["cls"]):
            params = params[1:]
        arg = next((kw.value for kw in n.keywords if kw.arg == QLEN), None)
        if arg is None and QLEN in params and params.index(QLEN) < len(n.args):
            arg = n.args[params.index(QLEN)]
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "int" and arg.args:
            arg = arg.args[0]
        if isinstance(arg, ast.Name):
            return arg.id
    return QLEN


def _decision_locals(build: ast.FunctionDef) -> dict[str, str]:
    """The local of _build_decode that holds each decision of DECISION_FIELDS, by where it flows: the local
    passed as that metadata field, or (``guards``) the local whose ``if`` computes the local passed as it."""
    passed = {
        kw.arg: kw.value.id
        for n in ast.walk(build)
        if isinstance(n, ast.Call)
        for kw in n.keywords
        if kw.arg is not None and isinstance(kw.value, ast.Name)
    }
    out: dict[str, str] = {}
    for role, (field_name, guards) in DECISION_FIELDS.items():
        local = passed.get(field_name)
        if local is None:
            continue
        if not guards:
            out[role] = local
            continue
        guard = next(
            (
                s.test.id
                for s in build.body
                if isinstance(s, ast.If)
                and isinstance(s.test, ast.Name)
                and any(local in _stored_names(b) for b in s.body)
            ),
            None,
        )
        if guard is not None:
            out[role] = guard
    return out


def _module_or_stub(tree: ast.Module) -> set[str]:
    return set(_defined_at_module(tree)) | STUB_NAMES | SAFE_BUILTIN_NAMES


def _function(name: str, args: ast.arguments, body: list[ast.stmt]) -> ast.FunctionDef:
    """A plain ``def`` (no decorators, annotations or type parameters)."""
    if sys.version_info >= (3, 12):  # type_params is a field of FunctionDef from 3.12 on
        return ast.FunctionDef(
            name=name, args=args, body=body, decorator_list=[], returns=None, type_params=[]
        )
    return ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None)


def _args(*names: str) -> ast.arguments:
    return ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=n) for n in names],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )


def _metadata_local(test: ast.expr) -> str:
    """The local of forward_mqa the inline verify test reads the step's query length from (``decode`` in
    0.27.1 L1119, found by its ``.max_qo_len`` attribute, not by that name)."""
    return next(
        (
            n.value.id
            for n in ast.walk(test)
            if isinstance(n, ast.Attribute) and n.attr == QLEN and isinstance(n.value, ast.Name)
        ),
        "decode",
    )


def _inline_verify_test(forward: ast.FunctionDef | None) -> ast.expr | None:
    """The ``if`` test of forward_mqa that sends small-head multi-token verify to Gluon (vLLM 0.27)."""
    if forward is None:
        return None
    for n in ast.walk(forward):
        if isinstance(n, ast.If):
            src = ast.unparse(n.test)
            if "max_qo_len" in src and "num_heads" in src and "use_gluon" not in src and ">" in src:
                return n.test
    return None
