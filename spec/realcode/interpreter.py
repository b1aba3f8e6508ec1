"""Our own evaluator for the gate definitions taken out of an untrusted ``rocm_aiter_mla.py``.

Python never compiles or executes input text on the AST path: each taken
definition is checked against :data:`ALLOWED_NODES` (the Python subset vLLM's
gates use, sources §15) and turned once into Python closures of this module
("closure compilation"), which are then called.  Functions, classes, enum
members and memoised functions of the input are objects of this module
(:class:`Function`, :class:`Class`, :class:`EnumMember`, :class:`Memo`), so no
Python function, frame, code object, generator, coroutine or traceback of input
code ever exists.

The input reaches other objects only through attribute names listed in
:data:`HOST_ATTRIBUTES` (per host type: the str methods the gates call, a tensor's
``shape``/``repeat``, the stubs' members), the instance attributes of plain
records (:data:`RECORD_TYPES`: the harness's builder and configuration stand-ins)
and the builtins of :data:`BUILTINS`.  Anything else is refused
(:class:`~spec.realcode.extract.RefusedCode`, naming the construct and its line):
at load time where the construct is visible in the text (one error, not one per
shape), at call time where it depends on a value's type.

Semantics are Python's where the gates use them: truth tests call ``bool`` at
the points Python does (so a symbolic value's ``__bool__`` forks the lifting's
paths), ``and``/``or`` return an operand, comparisons chain, arithmetic goes
through :mod:`operator` (so the symbolic values' dunders run), ``**``, ``<<``,
sequence repetition, ``range`` and format widths are bounded
(:class:`~spec.realcode.sandbox.GateRunaway` past the bounds).  Module-level
code never runs: module constants are evaluated the first time a gate reads them.
The interpreter's own stops (a deadline, a refusal, a lifting limit, recursion)
cannot be caught by an ``except`` or delayed by a ``finally`` of the input.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import re
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from spec.realcode.extract import SAFE_BUILTIN_NAMES, RefusedCode
from spec.realcode.source import SourceError
from spec.realcode.symexec import LiftingUnsupported

# ---- the subset ------------------------------------------------------------------------------------------

# Every AST node type the interpreter evaluates (annotations are never evaluated, so never checked).
ALLOWED_NODES: frozenset[type] = frozenset(
    getattr(ast, name)
    for name in (
        # module, definitions, statements
        "Module FunctionDef ClassDef arguments arg keyword alias Return Assign AugAssign AnnAssign For While "
        "If Raise Try ExceptHandler Assert Import ImportFrom Expr Pass Break Continue "
        # expressions
        "BoolOp BinOp UnaryOp IfExp Dict Set ListComp SetComp DictComp GeneratorExp comprehension Compare "
        "Call FormattedValue JoinedStr Constant Attribute Subscript Name List Tuple Slice "
        # contexts and operators
        "Load Store And Or Add Sub Mult Div Mod Pow LShift RShift BitOr BitXor BitAnd FloorDiv Invert Not "
        "UAdd USub Eq NotEq Lt LtE Gt GtE Is IsNot In NotIn"
    ).split()
)

# What a refusal calls the constructs outside the subset (the rest by their AST name).
_CONSTRUCT: dict[type, str] = {
    ast.Lambda: "a lambda",
    ast.NamedExpr: "an assignment expression (:=)",
    ast.Global: "a global declaration",
    ast.Nonlocal: "a nonlocal declaration",
    ast.Yield: "yield",
    ast.YieldFrom: "yield from",
    ast.Await: "await",
    ast.AsyncFunctionDef: "async def",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
    ast.With: "a with statement",
    ast.Delete: "del",
    ast.Starred: "a starred expression",
    ast.MatMult: "the @ operator",
    **({ast.Match: "a match statement"} if hasattr(ast, "Match") else {}),
    **({ast.TryStar: "try/except*"} if hasattr(ast, "TryStar") else {}),
}

# Attribute names the input may read on host (non-interpreted) objects, per host type (a type, or
# "module.QualName" for types this module does not import).  Interpreted classes, enum members and
# records (RECORD_TYPES) are read as described at their own classes.
HOST_ATTRIBUTES: dict[Any, frozenset[str]] = {
    str: frozenset(
        {
            "startswith",
            "endswith",
            "lower",
            "upper",
            "strip",
            "lstrip",
            "rstrip",
            "split",
            "join",
            "replace",
            "isdigit",
            "count",
            "find",
        }
    ),
    tuple: frozenset({"count", "index"}),
    list: frozenset({"count", "index", "append"}),
    dict: frozenset({"get", "items", "keys", "values"}),
    BaseException: frozenset({"args"}),
    types.ModuleType: frozenset(),  # the math stub: names in MATH_NAMES (below)
    # symbolic enumeration strings during lifting (spec.realcode.symexec.SymStr)
    "spec.realcode.symexec.SymStr": frozenset({"startswith", "lower"}),
    # the gates' tensors (get_mla_padded_q / get_mla_unpadded_o, run by the aiter-triton backend)
    "torch.Tensor": frozenset({"shape", "stride", "as_strided", "repeat", "repeat_interleave", "contiguous"}),
    # the sandbox's stubs (spec.realcode.sandbox) and memory.py's platform
    "spec.realcode.sandbox._Envs": frozenset(
        {"VLLM_ROCM_AITER_MLA_ASM_PADDING", "VLLM_ROCM_AITER_MLA_DCP_VERIFY"}
    ),
    "spec.realcode.sandbox._Logger": frozenset({"warning_once", "warning", "info", "info_once", "debug"}),
    "spec.analyses.memory._Platform": frozenset(
        {"get_device_total_memory", "get_device_name", "is_device_capability", "is_tpu", "is_cpu"}
    ),
}
# Host types whose own instance attributes (their __dict__, never a class attribute) the input may read
# and set: the harness's stand-ins for the builder, the configurations and the stub modules.
RECORD_TYPES: frozenset[Any] = frozenset({types.SimpleNamespace})
MATH_NAMES = frozenset({"ceil", "floor", "log2", "sqrt", "gcd", "isqrt", "inf", "prod", "comb"})

# The stub modules' names the code may read outside a decorator (checked at load time as well).
_MODULE_STUBS = {"math": MATH_NAMES, "functools": frozenset()}

MAX_LITERAL_CHARS = 10_000  # a string or bytes literal longer than this is refused
MAX_LITERAL_ITEMS = 1_000  # a collection display with more items than this is refused
MAX_SEQUENCE = 1 << 20  # a sequence repetition, range or format width past this is a runaway
MAX_INT_BITS = 1 << 16  # an integer literal or result wider than this is a runaway (sandbox's bound)


# Raised by the interpreter or the harness, never caught by an ``except`` of the input.
_UNCATCHABLE = (LiftingUnsupported, SourceError, RecursionError, MemoryError, KeyboardInterrupt, SystemExit)


class RefusedAtRun(RefusedCode, LiftingUnsupported):
    """A construct refused when a gate reaches it (it depends on a value's type): a bad input to a
    concrete call, and UNKNOWN to the lifting (never a path the code takes)."""


def refuse(label: str, node: ast.AST | None, what: str, at_run: bool = False) -> RefusedCode:
    line = getattr(node, "lineno", None)
    message = f"{label}: line {line}: {what}, which is outside the interpreted subset; refused"
    return RefusedAtRun(message) if at_run else RefusedCode(message)


def _runaway(message: str) -> Exception:
    from spec.realcode.sandbox import GateRunaway

    return GateRunaway(message)


# ---- bounded operations ------------------------------------------------------------------------------------


def _int_bits(x: Any) -> int:
    return x.bit_length() if type(x) is int else 0


def bounded_pow(base: Any, exp: Any) -> Any:
    """``base ** exp``, refused where two plain integers would make a number past MAX_INT_BITS bits."""
    if _int_bits(exp) and exp > 0 and _int_bits(base) > 1 and (_int_bits(base) - 1) * exp > MAX_INT_BITS:
        raise _runaway(f"the gates compute {base} ** {exp}, a number past {MAX_INT_BITS} bits")
    return base**exp


def bounded_lshift(value: Any, shift: Any) -> Any:
    if _int_bits(shift) and _int_bits(value) + shift > MAX_INT_BITS:
        raise _runaway(f"the gates compute {value} << {shift}, a number past {MAX_INT_BITS} bits")
    return value << shift


_SEQUENCES = (str, bytes, tuple, list)


def bounded_mul(a: Any, b: Any) -> Any:
    """``a * b``, refused where a sequence would be repeated past MAX_SEQUENCE items."""
    if isinstance(a, _SEQUENCES) or isinstance(b, _SEQUENCES):
        seq, n = (a, b) if isinstance(a, _SEQUENCES) else (b, a)
        if type(n) is int and len(seq) * n > MAX_SEQUENCE:
            raise _runaway(f"the gates repeat a {type(seq).__name__} {n} times, past {MAX_SEQUENCE} items")
    return a * b


def _check_format(template: str, printf: bool) -> None:
    """A format spec or printf template whose width could exceed MAX_SEQUENCE characters is a runaway."""
    if any(len(d) > 6 for d in re.findall(r"\d+", template)) or (printf and "*" in template):
        raise _runaway(f"the gates format with a width past {MAX_SEQUENCE} characters")


def bounded_mod(a: Any, b: Any) -> Any:
    """``a % b``; a printf-style template's widths are bounded."""
    if isinstance(a, str):
        _check_format(a, printf=True)
    return a % b


def bounded_range(*args: Any) -> range:
    r = range(*args)
    if len(r) > MAX_SEQUENCE:
        raise _runaway(f"the gates make a range of {len(r)} items, past {MAX_SEQUENCE}")
    return r


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: bounded_mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: bounded_mod,
    ast.Pow: bounded_pow,
    ast.LShift: bounded_lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.BitAnd: operator.and_,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}  # not: Python's truth test, in _e_UnaryOp
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: operator.contains(b, a),
    ast.NotIn: lambda a, b: not operator.contains(b, a),
}

# ---- interpreted objects -----------------------------------------------------------------------------------


class Function:
    """An interpreted function: parameters, defaults (evaluated by the interpreter) and a compiled body.
    ``run`` is the call itself (the interpreter's calls take it directly, skipping ``__call__``)."""

    def __init__(self, name: str, spec: _Params, body: Callable[[dict], Any]) -> None:
        self.__name__ = self.__qualname__ = name
        self.spec, self.body = spec, body
        bind, names = spec.bind, tuple(spec.positional)
        arity = len(names) if spec.plain else -1

        def run(*args: Any, **kwargs: Any) -> Any:
            f = dict(zip(names, args)) if len(args) == arity and not kwargs else bind(name, args, kwargs)
            r = body(f)
            return r.value if r is not None else None

        self.run = run

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return self.spec.signature()

    def __repr__(self) -> str:
        return f"<interpreted function {self.__name__}>"


class Memo:
    """``functools.lru_cache`` / ``functools.cache`` of an interpreted function: a memo with cache_clear."""

    def __init__(self, fn: Any, maxsize: int | None) -> None:
        self.fn, self.maxsize = fn, maxsize
        self.__name__ = getattr(fn, "__name__", "memo")
        self.memo: OrderedDict[Any, Any] = OrderedDict()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(kwargs.items())) if kwargs else args
        value = self.memo.get(key, _MISSING)
        if value is not _MISSING:
            if len(self.memo) > 1:
                self.memo.move_to_end(key)
            return value
        value = self.fn(*args, **kwargs)
        if self.maxsize != 0:
            self.memo[key] = value
            if self.maxsize is not None and len(self.memo) > self.maxsize:
                self.memo.popitem(last=False)
        return value

    def cache_clear(self) -> None:
        self.memo.clear()

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.fn)


class _Static:
    def __init__(self, fn: Any) -> None:
        self.fn = fn


class _ClassMethod(_Static):
    pass


class _Property(_Static):
    pass


class Class:
    """An interpreted class: its members by name (constants, functions, static/class methods, properties)."""

    def __init__(self, name: str, members: dict[str, Any]) -> None:
        self.__name__ = self.__qualname__ = name
        self.members = members

    def member(self, name: str) -> Any:
        try:
            value = self.members[name]
        except KeyError:
            raise AttributeError(
                f"type object {self.__name__!r} has no attribute {name!r}", name=name
            ) from None
        if isinstance(value, _ClassMethod):
            return types.MethodType(value.fn, self)
        if isinstance(value, _Static):
            return value.fn
        return value

    def __getattr__(self, name: str) -> Any:  # host code: AiterMLAHelper.use_gluon_decode, getattr(helper, p)
        if name.startswith("__"):
            raise AttributeError(name)
        return self.member(name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RefusedAtRun(
            f"the gate code instantiates class {self.__name__}, which the interpreter does not"
        )

    def __repr__(self) -> str:
        return f"<interpreted class {self.__name__}>"


class EnumMember:
    """A member of an interpreted Enum subclass: its ``name`` and ``value``, compared by identity."""

    __slots__ = ("cls", "name", "value")

    def __init__(self, cls: EnumClass, name: str, value: Any) -> None:
        self.cls, self.name, self.value = cls, name, value

    def __repr__(self) -> str:
        return f"<{self.cls.__name__}.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"{self.cls.__name__}.{self.name}"


class EnumClass(Class):
    """An interpreted ``class X(Enum)`` of constant members."""

    def __init__(self, name: str, members: dict[str, Any]) -> None:
        by_value: dict[Any, EnumMember] = {}
        made = {}
        for k, v in members.items():
            made[k] = by_value.setdefault(v, EnumMember(self, k, v))  # an alias shares the first member
        super().__init__(name, made)
        self.by_value = by_value

    def __iter__(self) -> Iterator[EnumMember]:
        return iter(self.by_value.values())

    def __len__(self) -> int:
        return len(self.by_value)

    def __getitem__(self, name: str) -> EnumMember:
        return self.members[name]

    def __call__(self, value: Any) -> EnumMember:
        try:
            return self.by_value[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not a valid {self.__name__}") from None


_INTERPRETED = (Class, EnumClass)


# ---- attribute access --------------------------------------------------------------------------------------


def _type_key(tp: type) -> str:
    return f"{tp.__module__}.{tp.__qualname__}"


_NAMES: dict[type, frozenset[str]] = {}


def _host_names(tp: type) -> frozenset[str]:
    """HOST_ATTRIBUTES' names for ``tp`` and its bases."""
    names = _NAMES.get(tp)
    if names is None:
        found: set[str] = set()
        for klass in tp.__mro__:
            found |= HOST_ATTRIBUTES.get(klass, frozenset()) | HOST_ATTRIBUTES.get(
                _type_key(klass), frozenset()
            )
        names = _NAMES[tp] = frozenset(found)
    return names


def _kind(obj: Any) -> str:
    return "module" if isinstance(obj, types.ModuleType) else f"{type(obj).__name__} object"


_CLASS, _MEMBER, _RECORD, _MODULE, _HOST = range(5)
_KINDS: dict[type, int] = {Class: _CLASS, EnumClass: _CLASS, EnumMember: _MEMBER}


def _kind_of(tp: type) -> int:
    kind = _KINDS.get(tp)
    if kind is None:
        if tp in RECORD_TYPES or _type_key(tp) in RECORD_TYPES:
            kind = _RECORD
        elif issubclass(tp, types.ModuleType):
            kind = _MODULE
        else:
            kind = _HOST
        _KINDS[tp] = kind
    return kind


def get_attribute(obj: Any, name: str, label: str, node: ast.AST | None) -> Any:
    """``obj.name`` as the subset allows it."""
    tp = type(obj)
    kind = _KINDS.get(tp)
    if kind is None:
        kind = _kind_of(tp)
    if kind == _RECORD:
        d = object.__getattribute__(obj, "__dict__")
        try:
            return d[name]
        except KeyError:
            raise AttributeError(
                f"{tp.__name__!r} object has no attribute {name!r}", name=name, obj=obj
            ) from None
    if kind == _CLASS:
        return obj.member(name)
    if kind == _MEMBER:
        if name in ("name", "value"):
            return getattr(obj, name)
    elif kind == _MODULE:
        if obj.__name__ == "math" and name in MATH_NAMES:
            return getattr(obj, name)
    elif name in _host_names(tp):
        return getattr(obj, name)
    raise refuse(label, node, f"reading attribute {name!r} of a {_kind(obj)}", at_run=True)


def set_attribute(obj: Any, name: str, value: Any, label: str, node: ast.AST | None) -> None:
    if _kind_of(type(obj)) == _RECORD and not name.startswith("__"):
        setattr(obj, name, value)
        return
    raise refuse(label, node, f"setting attribute {name!r} of a {_kind(obj)}", at_run=True)


# ---- the builtins ------------------------------------------------------------------------------------------


def _isinstance(obj: Any, cls: Any) -> bool:
    classes = cls if isinstance(cls, tuple) else (cls,)
    if any(isinstance(c, Class) for c in classes):
        if any(isinstance(c, EnumClass) and isinstance(obj, EnumMember) and obj.cls is c for c in classes):
            return True
        classes = tuple(c for c in classes if not isinstance(c, Class))
        return isinstance(obj, classes) if classes else False
    return isinstance(obj, cls)


# The builtins the input may call: extract.SAFE_BUILTIN_NAMES (the names extract lets the gates read), less
# the decorators (applied at load time, never values) and getattr (compiled as an attribute read, its name a
# literal checked at load time); range and isinstance bounded or taught our classes.
_NOT_VALUES = {"getattr", "staticmethod", "classmethod", "property", "None", "True", "False"}
BUILTINS: dict[str, Any] = {
    **{n: getattr(builtins, n) for n in SAFE_BUILTIN_NAMES - _NOT_VALUES},
    "range": bounded_range,
    "isinstance": _isinstance,
}  # getattr(obj, "literal") is compiled as an attribute read (the name is checked at load time)

# ---- compilation -------------------------------------------------------------------------------------------


class _Ret:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_BREAK, _CONTINUE = object(), object()


class _Params:
    """A function's parameters: binds a call's arguments into a fresh locals dict as Python does."""

    def __init__(self, name: str, args: ast.arguments, defaults: list[Any], kw_defaults: list[Any]) -> None:
        self.posonly = [a.arg for a in args.posonlyargs]
        self.positional = self.posonly + [a.arg for a in args.args]
        self.kwonly = [a.arg for a in args.kwonlyargs]
        self.keyword = set(self.positional[len(self.posonly) :]) | set(self.kwonly)
        self.vararg = args.vararg.arg if args.vararg else None
        self.kwarg = args.kwarg.arg if args.kwarg else None
        self.defaults = dict(zip(self.positional[len(self.positional) - len(defaults) :], defaults))
        self.defaults.update({k: v for k, v in zip(self.kwonly, kw_defaults) if v is not _NO_DEFAULT})
        self.required = [n for n in self.positional + self.kwonly if n not in self.defaults]
        self.size = len(self.positional) + len(self.kwonly) + bool(self.vararg) + bool(self.kwarg)
        self.plain = self.size == len(self.positional)  # positional parameters only

    def bind(self, fname: str, args: tuple, kwargs: dict) -> dict[str, Any]:
        positional = self.positional
        if not kwargs and self.plain and len(args) == len(positional):
            return dict(zip(positional, args))
        if len(args) > len(positional) and not self.vararg:
            raise TypeError(
                f"{fname}() takes {len(positional)} positional arguments but {len(args)} were given"
            )
        f = dict(zip(positional, args))
        if self.vararg:
            f[self.vararg] = tuple(args[len(positional) :])
        extra = {}
        for k, v in kwargs.items():
            if k in self.keyword:
                if k in f:
                    raise TypeError(f"{fname}() got multiple values for argument {k!r}")
                f[k] = v
            elif self.kwarg:
                extra[k] = v
            else:
                raise TypeError(f"{fname}() got an unexpected keyword argument {k!r}")
        if self.kwarg:
            f[self.kwarg] = extra
        if len(f) < self.size:
            for k, v in self.defaults.items():
                if k not in f:
                    f[k] = v
            missing = [n for n in self.required if n not in f]
            if missing:
                raise TypeError(f"{fname}() missing required arguments: {', '.join(map(repr, missing))}")
        return f

    def signature(self) -> inspect.Signature:
        P = inspect.Parameter
        params = [
            P(
                n,
                P.POSITIONAL_ONLY if n in self.posonly else P.POSITIONAL_OR_KEYWORD,
                default=self.defaults.get(n, P.empty),
            )
            for n in self.positional
        ]
        if self.vararg:
            params.append(P(self.vararg, P.VAR_POSITIONAL))
        params += [P(n, P.KEYWORD_ONLY, default=self.defaults.get(n, P.empty)) for n in self.kwonly]
        if self.kwarg:
            params.append(P(self.kwarg, P.VAR_KEYWORD))
        return inspect.Signature(params)


_NO_DEFAULT = _MISSING = object()


def _locals_of(fn: ast.FunctionDef) -> set[str]:
    """The names a function binds (its locals), not looking into comprehensions (their own scope)."""
    names = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    names |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a}
    todo: list[ast.AST] = list(fn.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.append(n.generators[0].iter)  # the first iterable is evaluated in the enclosing scope
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            names.add(n.target.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        todo.extend(ast.iter_child_nodes(n))
    return names


class Module:
    """One input module's taken definitions, checked and compiled; ``namespace`` holds its globals."""

    def __init__(
        self,
        module: ast.Module,
        label: str,
        stubs: dict[str, Any],
        importer: Callable[[str, ast.AST, bool], Any],
        builtins_override: dict[str, Any] | None = None,
    ) -> None:
        self.label = label
        check_subset(module, label)
        self.builtins = {**BUILTINS, **(builtins_override or {})}
        self.importer = importer
        self.namespace: dict[str, Any] = dict(stubs)
        self.pending: dict[str, Callable[[], None]] = {}  # module constants, evaluated when first read
        self.evaluating: set[str] = set()
        for node in module.body:
            self._define(node)

    # -- module level ----------------------------------------------------------------------------------

    def _define(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef):
            self.namespace[node.name] = self._function(node, module_level=True)
        elif isinstance(node, ast.ClassDef):
            self.namespace[node.name] = self._class(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            if isinstance(node, ast.AnnAssign) and node.value is None:
                return
            run = self._stmt(node, _Scope(self, None))
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]

            def evaluate(run=run) -> None:
                run(self.namespace)

            for n in names:
                self.pending[n] = evaluate
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return
        else:
            raise refuse(self.label, node, f"{type(node).__name__} at module level")

    def global_value(self, name: str) -> Any:
        """A module global, builtin or (on first read) a module constant evaluated now."""
        value = self.namespace.get(name, _MISSING)
        if value is not _MISSING:
            return value
        run = self.pending.get(name)
        if run is not None and name not in self.evaluating:
            self.evaluating.add(name)
            try:
                run()
            finally:
                self.evaluating.discard(name)
            for other in [k for k, v in self.pending.items() if v is run]:
                del self.pending[other]
            return self.namespace[name]
        value = self.builtins.get(name, _MISSING)
        if value is _MISSING:
            raise NameError(f"name {name!r} is not defined", name=name)
        return value

    def _class(self, node: ast.ClassDef) -> Class:
        bases = ", ".join(ast.unparse(b) for b in [*node.bases, *node.keywords])
        enum = bases == "Enum"
        if bases and not enum:
            raise refuse(self.label, node, f"class {node.name}({bases})")
        if node.decorator_list:
            raise refuse(self.label, node, f"a decorator on class {node.name}")
        scope = _Scope(self, None, class_body=True)
        members: dict[str, Any] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef):
                if enum:
                    raise refuse(self.label, stmt, f"a method in enum {node.name}")
                members[stmt.name] = self._function(stmt, module_level=False)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and all(
                isinstance(t, ast.Name)
                for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            ):
                if stmt.value is not None:
                    self._stmt(stmt, scope)(members)
            elif isinstance(stmt, ast.Pass) or (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            ):
                continue
            else:
                raise refuse(
                    self.label, stmt, f"a {type(stmt).__name__} statement in the body of class {node.name}"
                )
        return EnumClass(node.name, members) if enum else Class(node.name, members)

    def _function(self, node: ast.FunctionDef, module_level: bool) -> Any:
        top = _Scope(self, None)
        defaults = [self._expr(d, top)({}) for d in node.args.defaults]
        kw_defaults = [_NO_DEFAULT if d is None else self._expr(d, top)({}) for d in node.args.kw_defaults]
        spec = _Params(node.name, node.args, defaults, kw_defaults)
        scope = _Scope(self, _locals_of(node))
        fn: Any = Function(node.name, spec, self._block(node.body, scope))
        for deco in reversed(node.decorator_list):
            fn = self._decorate(fn, deco, module_level)
        return fn

    def _decorate(self, fn: Any, deco: ast.expr, module_level: bool) -> Any:
        text = ast.unparse(deco)
        name = text.split("(")[0].removeprefix("functools.")
        if name in ("lru_cache", "cache") and text.split("(")[0] in (
            "functools.lru_cache",
            "functools.cache",
        ):
            maxsize: int | None = 128 if name == "lru_cache" else None
            if isinstance(deco, ast.Call):
                args = {k.arg: k.value for k in deco.keywords}
                if deco.args:
                    args["maxsize"] = deco.args[0]
                if set(args) - {"maxsize", "typed"} or not all(
                    isinstance(v, ast.Constant) for v in args.values()
                ):
                    raise refuse(self.label, deco, f"the decorator @{text}")
                if "maxsize" in args:
                    maxsize = getattr(args["maxsize"], "value", None)
                if not (maxsize is None or type(maxsize) is int):
                    raise refuse(self.label, deco, f"the decorator @{text}")
            return Memo(fn, maxsize)
        if not module_level and text in ("staticmethod", "classmethod", "property"):
            return {"staticmethod": _Static, "classmethod": _ClassMethod, "property": _Property}[text](fn)
        raise refuse(self.label, deco, f"the decorator @{text}")

    # -- statements ------------------------------------------------------------------------------------

    def _block(self, body: list[ast.stmt], scope: _Scope) -> Callable[[dict], Any]:
        stmts = [self._stmt(s, scope) for s in body]
        if len(stmts) == 1:
            return stmts[0]

        def block(f: dict) -> Any:
            for s in stmts:
                r = s(f)
                if r is not None:
                    return r
            return None

        return block

    def _stmt(self, node: ast.stmt, scope: _Scope) -> Callable[[dict], Any]:
        method = getattr(self, f"_s_{type(node).__name__}", None)
        if method is None:
            raise refuse(self.label, node, f"a {type(node).__name__} statement here")
        return method(node, scope)

    def _s_Expr(self, node: ast.Expr, scope: _Scope) -> Callable[[dict], Any]:
        ev = self._expr(node.value, scope)

        def run(f: dict) -> None:
            ev(f)

        return run

    def _s_Pass(self, node: ast.Pass, scope: _Scope) -> Callable[[dict], Any]:
        return lambda f: None

    def _s_Break(self, node: ast.Break, scope: _Scope) -> Callable[[dict], Any]:
        return lambda f: _BREAK

    def _s_Continue(self, node: ast.Continue, scope: _Scope) -> Callable[[dict], Any]:
        return lambda f: _CONTINUE

    def _s_Return(self, node: ast.Return, scope: _Scope) -> Callable[[dict], Any]:
        if node.value is None:
            return lambda f: _Ret(None)
        if isinstance(node.value, ast.Constant):
            ret = _Ret(node.value.value)  # immutable: one for every return of this constant
            return lambda f: ret
        ev = self._expr(node.value, scope)
        return lambda f: _Ret(ev(f))

    def _s_Assign(self, node: ast.Assign, scope: _Scope) -> Callable[[dict], Any]:
        ev = self._expr(node.value, scope)
        stores = [self._store(t, scope) for t in node.targets]
        if len(stores) == 1:
            store = stores[0]

            def run1(f: dict) -> None:
                store(f, ev(f))

            return run1

        def run(f: dict) -> None:
            v = ev(f)
            for s in stores:
                s(f, v)

        return run

    def _s_AnnAssign(self, node: ast.AnnAssign, scope: _Scope) -> Callable[[dict], Any]:
        if node.value is None:
            return lambda f: None
        return self._s_Assign(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno), scope)

    def _s_AugAssign(self, node: ast.AugAssign, scope: _Scope) -> Callable[[dict], Any]:
        if not isinstance(node.target, (ast.Name, ast.Attribute, ast.Subscript)):
            raise refuse(self.label, node, "this augmented assignment")
        op = _INPLACE.get(type(node.op)) or _BINARY[type(node.op)]
        load_node = _as_load(node.target)
        load, store, value = (
            self._expr(load_node, scope),
            self._store(node.target, scope),
            self._expr(node.value, scope),
        )

        def run(f: dict) -> None:
            store(f, op(load(f), value(f)))

        return run

    def _s_If(self, node: ast.If, scope: _Scope) -> Callable[[dict], Any]:
        test, body = self._expr(node.test, scope), self._block(node.body, scope)
        orelse = self._block(node.orelse, scope) if node.orelse else None

        def run(f: dict) -> Any:
            if test(f):
                return body(f)
            if orelse is not None:
                return orelse(f)
            return None

        return run

    def _s_While(self, node: ast.While, scope: _Scope) -> Callable[[dict], Any]:
        test, body = self._expr(node.test, scope), self._block(node.body, scope)
        orelse = self._block(node.orelse, scope) if node.orelse else None

        def run(f: dict) -> Any:
            while test(f):
                r = body(f)
                if r is _BREAK:
                    return None
                if r is not None and r is not _CONTINUE:
                    return r
            return orelse(f) if orelse is not None else None

        return run

    def _s_For(self, node: ast.For, scope: _Scope) -> Callable[[dict], Any]:
        it, store, body = (
            self._expr(node.iter, scope),
            self._store(node.target, scope),
            self._block(node.body, scope),
        )
        orelse = self._block(node.orelse, scope) if node.orelse else None

        def run(f: dict) -> Any:
            for v in it(f):
                store(f, v)
                r = body(f)
                if r is _BREAK:
                    return None
                if r is not None and r is not _CONTINUE:
                    return r
            return orelse(f) if orelse is not None else None

        return run

    def _s_Raise(self, node: ast.Raise, scope: _Scope) -> Callable[[dict], Any]:
        exc = self._expr(node.exc, scope) if node.exc else None
        cause = self._expr(node.cause, scope) if node.cause else None
        has_cause = node.cause is not None

        def run(f: dict) -> Any:
            if exc is None:
                current = f.get(_HANDLING)
                if current is None:
                    raise RuntimeError("No active exception to reraise")
                raise current
            e = _exception(exc(f))
            if has_cause:
                c = cause(f)  # type: ignore[misc]
                e.__cause__ = None if c is None else _exception(c)
                e.__suppress_context__ = True
            raise e

        return run

    def _s_Assert(self, node: ast.Assert, scope: _Scope) -> Callable[[dict], Any]:
        test = self._expr(node.test, scope)
        msg = self._expr(node.msg, scope) if node.msg else None

        def run(f: dict) -> None:
            if not test(f):
                raise AssertionError(msg(f)) if msg is not None else AssertionError

        return run

    def _s_Try(self, node: ast.Try, scope: _Scope) -> Callable[[dict], Any]:
        body = self._block(node.body, scope)
        handlers = []
        for h in node.handlers:
            kinds = self._expr(h.type, scope) if h.type is not None else None
            handlers.append((kinds, h.name, self._block(h.body, scope)))
        orelse = self._block(node.orelse, scope) if node.orelse else None
        final = self._block(node.finalbody, scope) if node.finalbody else None

        def attempt(f: dict) -> Any:
            try:
                r = body(f)
            except _UNCATCHABLE:
                raise  # the interpreter's own stop: no except of the input catches it
            except Exception as e:
                for kinds, name, handler in handlers:
                    if kinds is None or _matches(e, kinds(f)):
                        outer = f.get(_HANDLING)
                        f[_HANDLING] = e
                        if name:
                            f[name] = e
                        try:
                            return handler(f)
                        finally:
                            f[_HANDLING] = outer
                            if name:
                                f.pop(name, None)
                raise
            if orelse is not None and r is None:
                return orelse(f)
            return r

        if final is None:
            return attempt

        def with_finally(f: dict) -> Any:
            try:
                r = attempt(f)
            except _UNCATCHABLE:
                raise  # nor does a finally of the input delay it
            except BaseException:
                stop = final(f)
                if stop is not None:
                    return stop  # a return/break in finally drops the exception, as in Python
                raise
            stop = final(f)
            return stop if stop is not None else r

        return with_finally

    def _s_Import(self, node: ast.Import, scope: _Scope) -> Callable[[dict], Any]:
        # "import a.b as c" binds the module a.b; "import a.b" binds the package a
        stores = [
            (
                self._store(ast.Name(id=a.asname or a.name.split(".")[0], ctx=ast.Store()), scope),
                a.name,
                not a.asname,
            )
            for a in node.names
        ]

        def run(f: dict) -> None:
            for store, module, top in stores:
                store(f, self.importer(module, node, top))

        return run

    def _s_ImportFrom(self, node: ast.ImportFrom, scope: _Scope) -> Callable[[dict], Any]:
        module = node.module or ""
        stores = [
            (self._store(ast.Name(id=a.asname or a.name, ctx=ast.Store()), scope), a.name) for a in node.names
        ]

        def run(f: dict) -> None:
            m = self.importer(module, node, False)
            for store, name in stores:
                try:
                    value = get_attribute(m, name, self.label, node)
                except AttributeError:
                    raise ImportError(f"cannot import name {name!r} from {module!r}", name=module) from None
                store(f, value)

        return run

    # -- targets ---------------------------------------------------------------------------------------

    def _store(self, node: ast.expr, scope: _Scope) -> Callable[[dict, Any], None]:
        label = self.label
        if isinstance(node, ast.Name):
            name = node.id
            if scope.is_module:
                ns = self.namespace

                def store_global(f: dict, v: Any) -> None:
                    ns[name] = v

                return store_global

            def store(f: dict, v: Any) -> None:
                f[name] = v

            return store
        if isinstance(node, ast.Attribute):
            obj, attr = self._expr(node.value, scope), node.attr

            def store_attr(f: dict, v: Any) -> None:
                set_attribute(obj(f), attr, v, label, node)

            return store_attr
        if isinstance(node, ast.Subscript):
            obj, key = self._expr(node.value, scope), self._expr(node.slice, scope)

            def store_item(f: dict, v: Any) -> None:
                target = obj(f)
                if not isinstance(target, (dict, list)):
                    raise refuse(label, node, f"assigning an item of a {_kind(target)}", at_run=True)
                target[key(f)] = v

            return store_item
        if isinstance(node, (ast.Tuple, ast.List)):
            stores = [self._store(e, scope) for e in node.elts]

            def store_seq(f: dict, v: Any) -> None:
                values = tuple(v)
                if len(values) != len(stores):
                    raise ValueError(f"expected {len(stores)} values to unpack, got {len(values)}")
                for s, x in zip(stores, values):
                    s(f, x)

            return store_seq
        raise refuse(self.label, node, f"assigning to a {type(node).__name__}")

    # -- expressions -----------------------------------------------------------------------------------

    def _expr(self, node: ast.expr, scope: _Scope) -> Callable[[dict], Any]:
        method = getattr(self, f"_e_{type(node).__name__}", None)
        if method is None:
            raise refuse(self.label, node, f"a {type(node).__name__} expression here")
        return method(node, scope)

    def _e_Constant(self, node: ast.Constant, scope: _Scope) -> Callable[[dict], Any]:
        value = node.value
        return lambda f: value

    def _e_Name(self, node: ast.Name, scope: _Scope) -> Callable[[dict], Any]:
        name, glob = node.id, self.global_value
        if scope.class_body:

            def class_name(f: dict) -> Any:
                return f[name] if name in f else glob(name)

            return class_name
        if _is_local(name, scope):

            def local(f: dict) -> Any:
                try:
                    return f[name]
                except KeyError:
                    raise _unbound(name) from None

            return local
        get = self.namespace.get

        def global_(f: dict) -> Any:
            v = get(name, _MISSING)
            return v if v is not _MISSING else glob(name)

        return global_

    def _e_Attribute(self, node: ast.Attribute, scope: _Scope) -> Callable[[dict], Any]:
        obj, name, label = self._expr(node.value, scope), node.attr, self.label

        def attr(f: dict) -> Any:
            o = obj(f)
            if type(o) is Class:  # AiterMLAHelper.<constant or static method>: its members in place
                v = o.members.get(name, _MISSING)
                if v is not _MISSING and type(v) is not _ClassMethod:
                    return v.fn if type(v) is _Static else v
            return get_attribute(o, name, label, node)

        return attr

    def _e_Subscript(self, node: ast.Subscript, scope: _Scope) -> Callable[[dict], Any]:
        obj, key = self._expr(node.value, scope), self._expr(node.slice, scope)
        label = self.label

        def item(f: dict) -> Any:
            target = obj(f)
            if isinstance(target, Class) and not isinstance(target, EnumClass):
                raise refuse(label, node, f"subscripting class {target.__name__}", at_run=True)
            return target[key(f)]

        return item

    def _e_Slice(self, node: ast.Slice, scope: _Scope) -> Callable[[dict], Any]:
        parts = [
            self._expr(p, scope) if p is not None else (lambda f: None)
            for p in (node.lower, node.upper, node.step)
        ]
        lo, hi, st = parts
        return lambda f: slice(lo(f), hi(f), st(f))

    def _e_Tuple(self, node: ast.Tuple, scope: _Scope) -> Callable[[dict], Any]:
        elts = [self._expr(e, scope) for e in node.elts]
        return lambda f: tuple([e(f) for e in elts])

    def _e_List(self, node: ast.List, scope: _Scope) -> Callable[[dict], Any]:
        elts = [self._expr(e, scope) for e in node.elts]
        return lambda f: [e(f) for e in elts]

    def _e_Set(self, node: ast.Set, scope: _Scope) -> Callable[[dict], Any]:
        elts = [self._expr(e, scope) for e in node.elts]
        return lambda f: {e(f) for e in elts}

    def _e_Dict(self, node: ast.Dict, scope: _Scope) -> Callable[[dict], Any]:
        if any(k is None for k in node.keys):
            raise refuse(self.label, node, "a ** in a dict display")
        pairs = [(self._expr(k, scope), self._expr(v, scope)) for k, v in zip(node.keys, node.values)]  # type: ignore[arg-type]

        def display(f: dict) -> dict:
            d = {}
            for k, v in pairs:
                d[k(f)] = v(f)
            return d

        return display

    def _e_BinOp(self, node: ast.BinOp, scope: _Scope) -> Callable[[dict], Any]:
        op = _BINARY.get(type(node.op))
        if op is None:
            raise refuse(self.label, node, _CONSTRUCT.get(type(node.op), type(node.op).__name__))
        return self._binary(op, node.left, node.right, scope)

    def _binary(self, op: Callable[[Any, Any], Any], left: ast.expr, right: ast.expr, scope: _Scope) -> Any:
        """``op(left, right)``, with a local or a constant operand read in place (the common gate shapes:
        ``num_heads >= m``, ``max_qo_len != 1``), so each costs one closure call, not three."""
        a = self._expr(left, scope)
        if isinstance(right, ast.Constant):
            c = right.value
            name = left.id if isinstance(left, ast.Name) and _is_local(left.id, scope) else None
            if name is not None:

                def local_const(f: dict) -> Any:
                    try:
                        x = f[name]
                    except KeyError:
                        raise _unbound(name) from None
                    return op(x, c)

                return local_const
            return lambda f: op(a(f), c)
        b = self._expr(right, scope)
        return lambda f: op(a(f), b(f))

    def _e_UnaryOp(self, node: ast.UnaryOp, scope: _Scope) -> Callable[[dict], Any]:
        operand = self._expr(node.operand, scope)
        if isinstance(node.op, ast.Not):
            return lambda f: not operand(f)
        op = _UNARY[type(node.op)]
        return lambda f: op(operand(f))

    def _e_BoolOp(self, node: ast.BoolOp, scope: _Scope) -> Callable[[dict], Any]:
        values = [self._expr(v, scope) for v in node.values]
        first, rest = values[0], values[1:]
        if isinstance(node.op, ast.And):

            def and_(f: dict) -> Any:
                v = first(f)
                for ev in rest:
                    if not v:
                        return v
                    v = ev(f)
                return v

            return and_

        def or_(f: dict) -> Any:
            v = first(f)
            for ev in rest:
                if v:
                    return v
                v = ev(f)
            return v

        return or_

    def _e_IfExp(self, node: ast.IfExp, scope: _Scope) -> Callable[[dict], Any]:
        test, body, orelse = (self._expr(n, scope) for n in (node.test, node.body, node.orelse))
        return lambda f: body(f) if test(f) else orelse(f)

    def _e_Compare(self, node: ast.Compare, scope: _Scope) -> Callable[[dict], Any]:
        left = self._expr(node.left, scope)
        ops = [_COMPARE[type(o)] for o in node.ops]
        rights = [self._expr(c, scope) for c in node.comparators]
        if len(ops) == 1:
            return self._binary(ops[0], node.left, node.comparators[0], scope)
        pairs = list(zip(ops, rights))
        last = len(pairs) - 1

        def chain(f: dict) -> Any:
            a = left(f)
            for i, (op, right) in enumerate(pairs):
                b = right(f)
                r = op(a, b)
                if i == last or not r:
                    return r
                a = b
            return None

        return chain

    def _e_JoinedStr(self, node: ast.JoinedStr, scope: _Scope) -> Callable[[dict], Any]:
        parts = [self._expr(v, scope) for v in node.values]
        return lambda f: "".join([p(f) for p in parts])

    def _e_FormattedValue(self, node: ast.FormattedValue, scope: _Scope) -> Callable[[dict], Any]:
        value = self._expr(node.value, scope)
        spec = self._expr(node.format_spec, scope) if node.format_spec else None
        convert = {-1: None, 115: str, 114: repr, 97: ascii}[node.conversion]

        def formatted(f: dict) -> str:
            v = value(f)
            if convert is not None:
                v = convert(v)
            s = spec(f) if spec is not None else ""
            if s:
                _check_format(s, printf=False)
            return format(v, s)

        return formatted

    def _e_Call(self, node: ast.Call, scope: _Scope) -> Callable[[dict], Any]:
        if isinstance(node.func, ast.Name) and node.func.id == "getattr" and not _is_local("getattr", scope):
            # getattr(obj, "public_literal"[, default]): checked at load time (check_subset)
            obj = self._expr(node.args[0], scope)
            name = node.args[1].value  # type: ignore[attr-defined]
            default = self._expr(node.args[2], scope) if len(node.args) == 3 else None
            label = self.label

            def getattr_(f: dict) -> Any:
                o = obj(f)
                try:
                    return get_attribute(o, name, label, node)
                except AttributeError:
                    if default is None:
                        raise
                    return default(f)

            return getattr_
        fn = self._expr(node.func, scope)
        args = [self._expr(a, scope) for a in node.args]
        kw = [(str(k.arg), self._expr(k.value, scope)) for k in node.keywords]  # no ** (check_subset)
        # An interpreted function is entered through its run closure; anything else is called as it is.
        if not kw and not args:

            def call0(f: dict) -> Any:
                c = fn(f)
                return c.run() if type(c) is Function else c()

            return call0
        if not kw and len(args) == 1:
            a0 = args[0]

            def call1(f: dict) -> Any:
                c = fn(f)
                return (c.run if type(c) is Function else c)(a0(f))

            return call1
        if not kw:

            def call_n(f: dict) -> Any:
                c = fn(f)
                return (c.run if type(c) is Function else c)(*[a(f) for a in args])

            return call_n

        def call(f: dict) -> Any:
            c = fn(f)
            return (c.run if type(c) is Function else c)(*[a(f) for a in args], **{k: v(f) for k, v in kw})

        return call

    # comprehensions: their own scope (the enclosing locals copied in), the first iterable evaluated outside

    def _comprehension(self, node: Any, scope: _Scope, elts: list[ast.expr]) -> Callable[[dict], Iterator]:
        inner_names = set(scope.locals or ()) | {
            n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        }
        inner = _Scope(self, inner_names)
        gens = []
        for i, g in enumerate(node.generators):
            if g.is_async:
                raise refuse(self.label, node, "an async comprehension")
            it = self._expr(g.iter, scope if i == 0 else inner)
            gens.append((it, self._store(g.target, inner), [self._expr(c, inner) for c in g.ifs]))
        values = [self._expr(e, inner) for e in elts]
        class_body = scope.class_body

        def produce(f: dict, first: Any) -> Iterator:
            local = {} if class_body else dict(f)

            def walk(level: int, iterable: Any) -> Iterator:
                it, store, ifs = gens[level]
                for v in iterable:
                    store(local, v)
                    if all(c(local) for c in ifs):
                        if level + 1 == len(gens):
                            yield tuple(e(local) for e in values)
                        else:
                            yield from walk(level + 1, gens[level + 1][0](local))

            return walk(0, first)

        first_iter = gens[0][0]
        return lambda f: produce(f, iter(first_iter(f)))

    def _e_ListComp(self, node: ast.ListComp, scope: _Scope) -> Callable[[dict], Any]:
        gen = self._comprehension(node, scope, [node.elt])
        return lambda f: [v for (v,) in gen(f)]

    def _e_SetComp(self, node: ast.SetComp, scope: _Scope) -> Callable[[dict], Any]:
        gen = self._comprehension(node, scope, [node.elt])
        return lambda f: {v for (v,) in gen(f)}

    def _e_DictComp(self, node: ast.DictComp, scope: _Scope) -> Callable[[dict], Any]:
        gen = self._comprehension(node, scope, [node.key, node.value])
        return lambda f: {k: v for k, v in gen(f)}

    def _e_GeneratorExp(self, node: ast.GeneratorExp, scope: _Scope) -> Callable[[dict], Any]:
        gen = self._comprehension(node, scope, [node.elt])
        return lambda f: (v for (v,) in gen(f))


_HANDLING = "\0handling"  # the locals key of the exception being handled (no input name can collide)

_INPLACE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.iadd,
    ast.Sub: operator.isub,
    ast.BitOr: operator.ior,
    ast.BitAnd: operator.iand,
}


def _as_load(node: ast.expr) -> ast.expr:
    copy = type(node)(**{f: getattr(node, f) for f in node._fields})
    copy.ctx = ast.Load()  # type: ignore[attr-defined]
    return ast.copy_location(copy, node)


def _exception(value: Any) -> BaseException:
    if isinstance(value, type) and issubclass(value, BaseException):
        return value()
    if isinstance(value, BaseException):
        return value
    raise TypeError("exceptions must derive from BaseException")


def _matches(e: BaseException, kinds: Any) -> bool:
    classes = kinds if isinstance(kinds, tuple) else (kinds,)
    for c in classes:
        if not (isinstance(c, type) and issubclass(c, BaseException)):
            raise TypeError("catching classes that do not inherit from BaseException is not allowed")
    return isinstance(e, classes)


def _is_local(name: str, scope: _Scope) -> bool:
    return not scope.class_body and scope.locals is not None and name in scope.locals


def _unbound(name: str) -> UnboundLocalError:
    return UnboundLocalError(f"cannot access local variable {name!r} where it is not associated with a value")


class _Scope:
    """Where a name is looked up: a function's locals (a set of names), a class body, or the module."""

    def __init__(self, module: Module, local_names: set[str] | None, class_body: bool = False) -> None:
        self.locals, self.class_body = local_names, class_body
        self.is_module = local_names is None and not class_body


# ---- the static walk ---------------------------------------------------------------------------------------


def _annotations(tree: ast.AST) -> set[int]:
    """The ids of annotation subtrees (never evaluated, so never checked)."""
    out: set[int] = set()
    for n in ast.walk(tree):
        ann: list[Any] = []
        if isinstance(n, ast.arg):
            ann = [n.annotation]
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            ann = [n.returns]
        elif isinstance(n, ast.AnnAssign):
            ann = [n.annotation]
        out |= {id(x) for a in ann if a is not None for x in ast.walk(a)}
    return out


def _outside_loop(node: ast.AST, in_loop: bool = False) -> ast.AST | None:
    """A break or continue outside a loop (Python's compiler refuses it; ast.parse does not)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
            child_in_loop = False
        elif isinstance(node, (ast.For, ast.While)):
            child_in_loop = any(child is b for b in node.body) or (
                in_loop and any(child is b for b in node.orelse)
            )
        else:
            child_in_loop = in_loop
        if isinstance(child, (ast.Break, ast.Continue)) and not child_in_loop:
            return child
        inner = _outside_loop(child, child_in_loop)
        if inner is not None:
            return inner
    return None


def check_subset(tree: ast.AST, label: str) -> None:
    """Refuse, naming the first construct and its line, anything in ``tree`` outside the subset."""
    stray = _outside_loop(tree)
    if stray is not None:
        raise refuse(label, stray, f"a {type(stray).__name__.lower()} outside a loop")
    skip = _annotations(tree)
    decorators = {
        id(x) for n in ast.walk(tree) for d in getattr(n, "decorator_list", ()) for x in ast.walk(d)
    }
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and id(n) not in decorators:
            allowed = _MODULE_STUBS.get(n.value.id)
            if allowed is not None and n.attr not in allowed:
                raise refuse(label, n, f"reading attribute {n.attr!r} of module {n.value.id}")
        tp = type(n)
        if tp not in ALLOWED_NODES:
            raise refuse(label, n, _CONSTRUCT.get(tp, f"the construct {tp.__name__}"))
        if isinstance(n, ast.Attribute) and n.attr.startswith("__"):
            raise refuse(label, n, f"the attribute {n.attr!r}")
        if isinstance(n, ast.Attribute) and n.attr in ("format", "format_map"):
            raise refuse(label, n, f"str.{n.attr} (a format string's fields reach attributes)")
        if isinstance(n, ast.Name) and n.id.startswith("__"):
            raise refuse(label, n, f"the name {n.id!r}")
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.startswith("__"):
            raise refuse(label, n, f"the definition of {n.name!r}")
        if isinstance(n, ast.ImportFrom) and (n.level or any(a.name == "*" for a in n.names)):
            raise refuse(label, n, "a star import" if n.level == 0 else "a relative import")
        if isinstance(n, ast.Constant):
            v = n.value
            if isinstance(v, (str, bytes)) and len(v) > MAX_LITERAL_CHARS:
                raise refuse(label, n, f"a literal of {len(v)} characters (past {MAX_LITERAL_CHARS})")
            if type(v) is int and v.bit_length() > MAX_INT_BITS:
                raise refuse(label, n, f"an integer literal past {MAX_INT_BITS} bits")
        if isinstance(n, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            items = len(n.keys) if isinstance(n, ast.Dict) else len(n.elts)
            if items > MAX_LITERAL_ITEMS:
                raise refuse(label, n, f"a display of {items} items (past {MAX_LITERAL_ITEMS})")
        if isinstance(n, ast.keyword) and n.arg is None:
            raise refuse(label, n, "argument unpacking (**)")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr":
            name = n.args[1] if len(n.args) > 1 else None
            if (
                n.keywords
                or len(n.args) not in (2, 3)
                or not (isinstance(name, ast.Constant) and isinstance(name.value, str))
                or name.value.startswith("_")
            ):
                raise refuse(label, n, "getattr with a computed or private attribute name")
        if isinstance(n, ast.FunctionDef) and any(
            isinstance(s, (ast.FunctionDef, ast.ClassDef)) for s in ast.walk(n) if s is not n
        ):
            inner = next(
                s for s in ast.walk(n) if s is not n and isinstance(s, (ast.FunctionDef, ast.ClassDef))
            )
            raise refuse(label, inner, f"a nested definition ({inner.name} inside {n.name})")
