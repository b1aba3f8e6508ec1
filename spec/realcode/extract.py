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
import copy
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
# The decisions of _build_decode besides the persistent gate that decide the path, returned with it under
# these vLLM names whatever the file calls its locals: the two Gluon decisions as the builder makes them (its
# own call sites' arguments, 0.34.0 L1903-1914), 0.34's Triton verify, the DCP route (0.31 on) and the
# segmented DCP verify flag (0.29/0.30).  Where each flows to (so a renamed local is still found): the AITER
# entry point the persistent gate guards, and the decode metadata's fields (vLLM's dataclass, read by
# forward_mqa) the other decisions feed.  use_gluon_decode, use_gluon_verify (0.29 on) and dcp_route are such
# fields themselves (0.34.0 L2180-2181, 0.31.0 L1480); the Triton verify decides whether the metadata's
# kv-split count is computed (0.34.0 L1936), the segmented flag whether its row-view dcp_verify is (0.29.0
# L1101).
PERSISTENT_SCHEDULE_CALL = "get_mla_metadata_v1"
# What loads or is the Gluon MLA kernel forward_mqa calls: vLLM's loader (0.27.1 L1131) and AITER's entry
# points it returns (aiter.ops.triton.gluon: mla_gluon, the older mla_decode_gluon).
GLUON_ENTRY_POINTS = ("_get_mla_gluon", "mla_gluon", "mla_decode_gluon")
DECISION_FIELDS = {
    "use_gluon_decode": ("use_gluon_decode", False),
    "use_gluon_verify": ("use_gluon_verify", False),
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
    # forward_mqa's source with the impl's methods it calls (0.34's body is _forward_mqa), for facts read
    # off the text (kv_scale=1.0)
    forward_source: str
    init_attrs: tuple[str, ...] = field(
        default_factory=tuple
    )  # builder attributes computed by the init slice
    # whether the attention impl (the class with forward_mqa) calls use_gluon_verify itself (0.28.0 L1234);
    # from 0.29 it reads the builder's decision off the decode metadata
    impl_calls_verify: bool = False
    # the whole file as extract() parsed it, for the readers that take more of it (v_scale, buffer_sizing);
    # never changed by them
    tree: ast.Module = field(default_factory=lambda: ast.Module(body=[], type_ignores=[]), compare=False)


def names_read(node: ast.AST) -> set[str]:
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


def self_attrs(node: ast.AST, ctx=ast.Load) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and isinstance(n.ctx, ctx)
    }


def stored_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def check_safe(label: str, where: str, node: ast.AST) -> None:
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


def defined_at_module(tree: ast.Module) -> dict[str, ast.stmt]:
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


def find_class(tree: ast.Module, predicate) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and predicate(n)), None)


def method_named(cls: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if cls is None:
        return None
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def backward_slice(
    label: str, body: list[ast.stmt], needed: set[str], inputs: tuple[str, ...], where: str
) -> list[ast.stmt]:
    """The statements of ``body`` (in order) that compute ``needed`` local names."""
    needed = set(needed) - set(inputs)
    taken: list[ast.stmt] = []
    for stmt in reversed(body):
        defines = stored_names(stmt)
        if not defines & needed:
            continue
        taken.append(stmt)
        simple = isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt in body
        if simple:
            needed -= defines
        needed |= names_read(stmt) - set(inputs)
    taken.reverse()
    return taken


def builder_init_slice(
    label: str, init_body: list[ast.stmt], wanted: set[str], known: set[str], reader: str, tree: ast.Module
) -> tuple[list[ast.stmt], set[str]]:
    """The statements of the builder's ``__init__`` (``init_body``) that set the attributes ``wanted`` but
    ``known`` (the harness's, or those computed already), then those the statements read in turn, with the
    locals they read computed anywhere before the last of them (0.34.0 sets the cache dtype between its DCP
    statements); in order, and with the attributes taken.  An attribute ``__init__`` never sets is refused,
    naming ``reader``, which reads it."""
    taken: list[ast.stmt] = []
    attrs: set[str] = set()
    wanted = set(wanted) - known
    while wanted - attrs:
        attr = sorted(wanted - attrs)[0]
        attrs.add(attr)
        stmts = [s for s in init_body if attr in self_attrs(s, ast.Store)]
        if not stmts:
            raise RefusedCode(
                f"{label}: {reader} reads self.{attr}, which the builder's __init__ never sets "
                "and the harness does not model"
            )
        for s in stmts:
            if s not in taken:
                taken.append(s)
            wanted |= self_attrs(s) - known
    if not taken:
        return [], attrs
    taken.sort(key=init_body.index)
    locals_needed = set().union(*(names_read(s) for s in taken)) - module_or_stub(tree) - {HELPER}
    last = max(init_body.index(s) for s in taken)
    earlier = [s for s in init_body[:last] if s not in taken]
    sliced = backward_slice(label, earlier, locals_needed, INIT_INPUTS, "__init__")
    return sorted(sliced + taken, key=init_body.index), attrs


def extract(source: Source) -> Extracted:
    label, text = source.label, source.text
    try:
        tree = ast.parse(text, filename=label)
    except SyntaxError as e:
        raise SourceError(f"{label}: syntax error at line {e.lineno}: {e.msg}") from None
    helper = find_class(tree, lambda c: c.name == HELPER)
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
        check_safe(label, f"{HELPER}.{getattr(member, 'name', 'constant')}", member)

    # 2. The builder slices and the inline verify.
    builder = find_class(tree, lambda c: method_named(c, "_build_decode") is not None)
    build = method_named(builder, "_build_decode")
    init = method_named(builder, "__init__")
    if build is None or init is None:
        raise SourceError(f"{label}: no metadata builder with __init__ and _build_decode")
    build_body = early_returns(build.body)
    gate_if = persistent_gate_if(build_body)
    if gate_if is None:
        raise SourceError(
            f"{label}: _build_decode calls no {PERSISTENT_SCHEDULE_CALL} under an 'if' (the persistent gate)"
        )
    before = build_body[: build_body.index(gate_if)]
    path_decisions = _decisions(label, build, build_body, before)
    build_inputs = ("self", _qlen_local(build, methods))
    build_slice = backward_slice(
        label,
        before,
        names_read(gate_if.test).union(*(names_read(d) for d in path_decisions.values())),
        build_inputs,
        "_build_decode",
    )
    returned = ast.Tuple(
        elts=[
            gate_if.test,
            ast.Dict(
                keys=[ast.Constant(role) for role in path_decisions],
                values=list(path_decisions.values()),
            ),
        ],
        ctx=ast.Load(),
    )
    build_fn = plain_function(
        "mla_spec_persistent_gate", plain_args(*build_inputs), [*build_slice, ast.Return(returned)]
    )
    missing = names_read(build_fn) - module_or_stub(tree) - {HELPER}
    if missing:
        raise RefusedCode(
            f"{label}: the persistent gate reads {sorted(missing)}, "
            "which neither the slice nor the stubs define"
        )

    wanted_attrs = (self_attrs(build_fn) - set(HARNESS_BUILDER_ATTRS)) | {"_mtp_decode_qlen"}
    init_slice, init_attrs = builder_init_slice(
        label, early_returns(init.body), wanted_attrs, set(HARNESS_BUILDER_ATTRS), "the gate", tree
    )
    init_fn = plain_function("mla_spec_builder_init", plain_args(*INIT_INPUTS), init_slice)

    functions = [build_fn, init_fn]
    inline = None
    if "use_gluon_verify" not in present:
        impl = find_class(tree, lambda c: method_named(c, "forward_mqa") is not None)
        inline = _inline_verify_test(method_named(impl, "forward_mqa"), defined_at_module(tree))
        if inline is None:
            raise SourceError(f"{label}: neither use_gluon_verify nor an inline verify test in forward_mqa")
        functions.append(
            plain_function(
                "mla_spec_inline_verify",
                plain_args("self", _metadata_local(label, inline, module_or_stub(tree))),
                [ast.Return(inline)],
            )
        )
    for fn in functions:
        check_safe(label, fn.name.replace("mla_spec_", ""), fn)
    body: list[ast.stmt] = [pruned, *functions]

    # 3. Module-level definitions reached from everything taken, transitively.
    known = {HELPER} | STUB_NAMES | SAFE_BUILTIN_NAMES
    module_nodes = module_closure(label, tree, body, known, "the gate code")
    module = ast.Module(body=[*module_nodes, *body], type_ignores=[])
    ast.fix_missing_locations(module)
    impl = find_class(tree, lambda c: method_named(c, "forward_mqa") is not None)
    forward = method_named(impl, "forward_mqa")
    return Extracted(
        label,
        module,
        present,
        "\n\n".join(ast.unparse(m) for m in _called_methods(impl, forward)),
        tuple(sorted(init_attrs)),
        impl is not None and calls_named(impl, "use_gluon_verify"),
        tree,
    )


def module_closure(
    label: str, tree: ast.Module, roots: list[ast.stmt], known: set[str], what: str
) -> list[ast.stmt]:
    """The module-level definitions of ``tree`` that ``roots`` read, transitively, in the file's order, each
    checked (:func:`check_safe`); names in ``known`` are not taken.  A name that is neither, or an import,
    is refused: ``what`` reaches it."""
    module_defs = defined_at_module(tree)
    taken: dict[str, ast.stmt] = {}
    frontier = set().union(*(names_read(n) for n in roots))
    while frontier:
        name = frontier.pop()
        if name in taken or name in known:
            continue
        node = module_defs.get(name)
        if node is None or isinstance(node, (ast.Import, ast.ImportFrom)):
            raise RefusedCode(f"{label}: {what} reaches {name!r}, which is outside the stub set")
        check_safe(label, name, node)
        taken[name] = node
        frontier |= names_read(node)
    order = {id(n): i for i, n in enumerate(tree.body)}
    return sorted({id(n): n for n in taken.values()}.values(), key=lambda n: order[id(n)])


def _called_methods(cls: ast.ClassDef | None, method: ast.FunctionDef | None) -> list[ast.FunctionDef]:
    """``method`` and the methods of ``cls`` it calls on ``self``, transitively, in the class's order."""
    if cls is None or method is None:
        return []
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    taken, todo = {method.name}, [method]
    while todo:
        for n in ast.walk(todo.pop()):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and n.attr in methods
                and n.attr not in taken
            ):
                taken.add(n.attr)
                todo.append(methods[n.attr])
    return [m for m in methods.values() if m.name in taken]


def calls_to(node: ast.AST, name: str) -> list[ast.Call]:
    """The calls in ``node`` of a function or method named ``name``, in walk order."""
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call)
        and (n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", None)) == name
    ]


def calls_named(node: ast.AST, name: str) -> bool:
    """Whether ``node`` calls a function or method named ``name``."""
    return bool(calls_to(node, name))


def early_returns(body: list[ast.stmt]) -> list[ast.stmt]:
    """A method body with every ``if`` whose branch always leaves the method (return or raise) followed by
    its ``else`` instead of enclosing it: ``if x: raise E`` ``else: S`` reads as ``if x: raise E`` then
    ``S``, the same code in the early-return form every release 0.27.1-0.34.0 writes, so the gate and the
    decisions are found at the method's top level either way.  The nodes are copies; ``body`` is kept."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.If) and stmt.orelse and _leaves(stmt.body):
            out.append(ast.If(test=stmt.test, body=stmt.body, orelse=[], lineno=stmt.lineno))
            out += early_returns(stmt.orelse)
        else:
            out.append(stmt)
    return out


def _leaves(block: list[ast.stmt]) -> bool:
    """Whether a statement list always leaves its method: it ends in return or raise, or in an ``if`` whose
    branches both do."""
    last = block[-1] if block else None
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _leaves(last.body) and _leaves(last.orelse)


def persistent_gate_if(body: list[ast.stmt]) -> ast.If | None:
    """The statement of _build_decode whose test decides the persistent schedule: the top-level ``if`` whose
    body builds it (every release 0.27.1-0.34.0 tests one local there, ``use_persistent_metadata``, but any
    name or an inline condition is found the same way)."""
    return next(
        (
            s
            for s in body
            if isinstance(s, ast.If) and any(calls_named(b, PERSISTENT_SCHEDULE_CALL) for b in s.body)
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


def _decisions(
    label: str, build: ast.FunctionDef, body: list[ast.stmt], before: list[ast.stmt]
) -> dict[str, ast.expr]:
    """Each decision of DECISION_FIELDS that _build_decode makes, as the expression that holds it, found by
    where it flows: the local passed as that metadata field, or (``guards``) the test of the top-level
    ``if`` that computes the local passed as it (a local, a call of a helper, any condition).  A field the
    metadata is given but whose decision is made some other way, or after the persistent gate, is refused
    naming it and its line: taken as "never", it would be a silently wrong route."""
    passed = {
        kw.arg: kw.value
        for n in ast.walk(build)
        if isinstance(n, ast.Call)
        for kw in n.keywords
        if kw.arg in {field_name for field_name, _ in DECISION_FIELDS.values()}
    }
    out: dict[str, ast.expr] = {}
    for role, (field_name, guards) in DECISION_FIELDS.items():
        value = passed.get(field_name)
        if value is None or (role == "use_segmented_dcp_verify" and "dcp_route" in out):
            continue  # from 0.31 on the route decides the row view (dcp_verify); 0.29/0.30 have no route
        if not isinstance(value, ast.Name):
            raise RefusedCode(
                f"{label}: line {value.lineno}: the decode metadata's {field_name} is passed an expression, "
                "not a local of _build_decode, which is outside the lifted subset; refused"
            )
        local = value.id
        setters = [s for s in body if local in stored_names(s)]
        gate = len(before)  # the persistent gate's index in body
        decision: ast.expr | None = None
        if not guards:
            if setters and all(body.index(s) < gate for s in setters):
                decision = ast.Name(local, ast.Load())
        else:
            setter = next((s for s in setters if isinstance(s, ast.If)), None)
            if isinstance(setter, ast.If):
                decision = _read_at_gate(setter.test, body, body.index(setter), gate)
        if decision is None:
            lines = ", ".join(str(s.lineno) for s in setters) or "none"
            raise RefusedCode(
                f"{label}: line {value.lineno}: the decode metadata's {field_name} is decided in a form "
                f"outside the lifted subset (its {local} set by the statements at line {lines} of "
                "_build_decode; the subset reads a top-level 'if' whose test the persistent gate can read, "
                "or a local set before the gate); refused"
            )
        out[role] = decision
    return out


def _read_at_gate(test: ast.expr, body: list[ast.stmt], at: int, gate: int) -> ast.expr | None:
    """``test``, evaluated by the statement ``body[at]``, as the persistent gate (``body[gate]``) can read
    it: the same expression where nothing between the two changes what it reads; where a temporary it
    reads is set between them, after the gate (``t = cond`` then ``if t:``), with what it was set to.
    None where neither holds."""
    lo, hi = sorted((at, gate))
    return _read_through(test, body[lo + 1 : hi], substitute=at > gate, fields=True)


def _read_through(test: ast.expr, between: list[ast.stmt], substitute: bool, fields: bool) -> ast.expr | None:
    """``test`` as read before the statements ``between``: unchanged where none of them changes what it
    reads; else (``substitute``) with each local they set once (``t = v``, the last first) replaced by
    ``v``, read before that statement in turn; without ``fields``, a field read ``t = x.y`` ends the
    reading there, the test reading ``t``.  None where a statement changes what it reads some other way."""
    while True:
        changed = [s for s in between if names_read(test) & stored_names(s)]
        if not changed:
            return test
        last = changed[-1]
        if not (isinstance(last, ast.Assign) and len(last.targets) == 1):
            return None
        (target,) = last.targets
        if not (isinstance(target, ast.Name) and sum(target.id in stored_names(s) for s in between) == 1):
            return None
        if not fields and isinstance(last.value, (ast.Attribute, ast.Subscript)):
            return test  # where the test's data comes from: read there
        if not substitute:
            return None
        test = Substitute(target.id, last.value).visit(copy.deepcopy(test))
        between = between[: between.index(last)]


class Substitute(ast.NodeTransformer):
    """Every read of one local replaced by an expression."""

    def __init__(self, name: str, value: ast.expr) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id == self.name and isinstance(node.ctx, ast.Load):
            return copy.deepcopy(self.value)
        return node


def module_or_stub(tree: ast.Module) -> set[str]:
    return set(defined_at_module(tree)) | STUB_NAMES | SAFE_BUILTIN_NAMES


def plain_function(name: str, args: ast.arguments, body: list[ast.stmt]) -> ast.FunctionDef:
    """A plain ``def`` (no decorators, annotations or type parameters)."""
    if sys.version_info >= (3, 12):  # type_params is a field of FunctionDef from 3.12 on
        return ast.FunctionDef(
            name=name, args=args, body=body, decorator_list=[], returns=None, type_params=[]
        )
    return ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None)


def plain_args(*names: str) -> ast.arguments:
    return ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=n) for n in names],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )


def _metadata_local(label: str, test: ast.expr, module: set[str]) -> str:
    """The local of forward_mqa the inline verify test reads the step from (``decode`` in 0.27.1 L1119,
    whatever it is called): the one local it reads besides ``self``; another is refused, naming them."""
    read = sorted(names_read(test) - module - {"self", HELPER})
    if len(read) != 1 or isinstance(test, ast.Name):  # a bare local: a temporary not read through
        raise RefusedCode(
            f"{label}: line {test.lineno}: forward_mqa's inline Gluon verify test reads "
            f"{read or 'no local'}, not the one decode metadata local the lifted subset takes; refused"
        )
    return read[0]


def _inline_verify_test(forward: ast.FunctionDef | None, module: dict[str, ast.stmt]) -> ast.expr | None:
    """The test of forward_mqa that sends small-head multi-token verify to Gluon (vLLM 0.27, which has no
    use_gluon_verify predicate), found by what it guards: the top-level ``if`` whose body loads the Gluon
    kernel (GLUON_ENTRY_POINTS) and whose test does not read the metadata's ``use_gluon_decode`` field (the
    decode branch's); a temporary it reads is read through (``t = cond`` then ``if t:``)."""
    if forward is None:
        return None
    body = early_returns(forward.body)
    for i, stmt in enumerate(body):
        if not isinstance(stmt, ast.If):
            continue
        # the test with its temporaries read through (``t = cond`` then ``if t:``), not the field reads
        # that give it the metadata (``decode = attn_metadata.decode``); which fields it reads, through both
        test = _read_through(stmt.test, body[:i], substitute=True, fields=False) or stmt.test
        whole = _read_through(stmt.test, body[:i], substitute=True, fields=True) or stmt.test
        if any(
            calls_named(b, name) for b in stmt.body for name in GLUON_ENTRY_POINTS
        ) and "use_gluon_decode" not in _attributes(whole, module):
            return test
    return None


def _attributes(node: ast.AST, module: dict[str, ast.stmt]) -> set[str]:
    """The attributes ``node`` reads, with those of the module functions it calls, transitively."""
    out: set[str] = set()
    seen: set[str] = set()
    todo = [node]
    while todo:
        for n in ast.walk(todo.pop()):
            if isinstance(n, ast.Attribute):
                out.add(n.attr)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in seen:
                seen.add(n.func.id)
                if isinstance(module.get(n.func.id), ast.FunctionDef):
                    todo.append(module[n.func.id])
    return out
