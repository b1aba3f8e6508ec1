"""Execute the extracted gate definitions against platform stubs, and call them.

The namespace the code runs in has only: the taken definitions, a small set of
pure builtins, an ``__import__`` that answers the stubbed modules and refuses
every other one, and the stubs below.  The stubs read a :class:`Platform`
(arch, the ``VLLM_ROCM_AITER_MLA_ASM_PADDING`` mode, the KV dtype rules) that
the caller sets per shape; its values may be plain or symbolic (see
:mod:`spec.realcode.symexec`).

Bounded: every call of the real code runs under a deadline (:data:`CALL_LIMIT_S`, which check and bind set
from ``--timeout``), recursion past Python's limit and an integer ``**`` or ``<<`` whose result would exceed
:data:`MAX_INT_BITS` bits are stopped, each as :class:`GateRunaway` (a
:class:`~spec.realcode.symexec.LiftingUnsupported`, so check reports UNKNOWN, exit 3, never a pass).

Pitfalls handled (sources §15): every ``lru_cache`` in the namespace
is cleared before each call (a cached arch answer would leak between shapes);
``vllm.platforms.rocm`` is always stubbed (unstubbed, the real code silently
decides "not gfx950"); the predicates are called by keyword, filtered through
their signatures (they grow across releases).
"""

from __future__ import annotations
import __future__

import ast
import builtins
import contextlib
import copy
import functools
import inspect
import math
import signal
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mla_model.revisions.dcp_era import AITER_HAS_SEGMENTED_MLA
from spec.realcode.extract import HELPER, SAFE_BUILTIN_NAMES, STUB_MODULES, Extracted, RefusedCode
from spec.realcode.symexec import LiftingUnsupported

CALL_LIMIT_S = 30.0  # seconds one call of a real gate function may take (check/bind: their --timeout)
MAX_INT_BITS = 1 << 16  # a gate computes routing values; an integer this wide is a runaway computation


class GateRunaway(LiftingUnsupported):
    """A real gate function that loops, recurses or computes a huge number: stopped, never waited for."""


def set_call_limit(seconds: float) -> None:
    """How long one call of the real code may run (check and bind pass their ``--timeout``)."""
    global CALL_LIMIT_S
    CALL_LIMIT_S = float(seconds)


class deadline:
    """Raise :class:`GateRunaway` in the code running here once ``seconds`` pass (the main thread's
    interval timer; elsewhere, where no signal can be delivered, the code runs unbounded).  Inside
    :func:`alarm_handler` the handler is already in place, and the deadline only arms and disarms the
    timer."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.armed = False
        self.previous: Any = None  # the handler to put back, where this deadline installed its own

    def __enter__(self) -> deadline:
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return self
        if not _HANDLER:
            self.previous = signal.signal(signal.SIGALRM, _expire)
        _RUNNING.append(self)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        self.armed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _RUNNING.pop()
            if self.previous is not None:
                signal.signal(signal.SIGALRM, self.previous)


_RUNNING: list[deadline] = []  # the deadlines armed, innermost last
_HANDLER: list[Any] = []  # the handlers alarm_handler replaced, while it is in place


def _expire(signum: int, frame: Any) -> None:
    if not _RUNNING:  # inside alarm_handler with no deadline armed: an alarm nothing here asked for
        return
    d = _RUNNING[-1]
    raise GateRunaway(f"{d.what} ran past the {d.seconds:g} s limit (--timeout): a loop that does not end?")


@contextlib.contextmanager
def alarm_handler() -> Iterator[None]:
    """The deadlines' SIGALRM handler in place for a stretch of many calls (lifting makes thousands), so
    each :class:`deadline` inside only arms the timer; the previous handler is back afterwards."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    _HANDLER.append(signal.signal(signal.SIGALRM, _expire))
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, _HANDLER.pop())


def _int_bits(x: Any) -> int:
    return x.bit_length() if isinstance(x, int) and not isinstance(x, bool) else 0


def bounded_pow(base: Any, exp: Any) -> Any:
    """``base ** exp``, refused where two plain integers would make a number past MAX_INT_BITS bits."""
    if _int_bits(exp) and exp > 0 and _int_bits(base) > 1 and (_int_bits(base) - 1) * exp > MAX_INT_BITS:
        raise GateRunaway(f"the gates compute {base} ** {exp}, a number past {MAX_INT_BITS} bits")
    return base**exp


def bounded_lshift(value: Any, shift: Any) -> Any:
    if _int_bits(shift) and _int_bits(value) + shift > MAX_INT_BITS:
        raise GateRunaway(f"the gates compute {value} << {shift}, a number past {MAX_INT_BITS} bits")
    return value << shift


class _BoundArithmetic(ast.NodeTransformer):
    """``a ** b`` and ``a << b`` in the release's gates become calls that refuse runaway sizes."""

    CALLS = {ast.Pow: "__mla_spec_pow__", ast.LShift: "__mla_spec_lshift__"}

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        name = self.CALLS.get(type(node.op))
        if name is None:
            return node
        call = ast.Call(ast.Name(name, ast.Load()), [node.left, node.right], [])
        return ast.copy_location(call, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        name = self.CALLS.get(type(node.op))
        if name is None or not isinstance(node.target, ast.Name):
            return node
        load = ast.Name(node.target.id, ast.Load())
        value = ast.Call(ast.Name(name, ast.Load()), [load, node.value], [])
        return ast.copy_location(ast.Assign([node.target], value), node)


@dataclass
class Platform:
    """What the stubs answer: set before each call (plain values or symbolic ones)."""

    arch: Any = "gfx950"
    mode: Any = "auto"
    dcp_verify: str | None = None  # VLLM_ROCM_AITER_MLA_DCP_VERIFY's declared default (None: unknown)


class _Logger:
    def warning_once(self, *a: Any, **k: Any) -> None: ...
    def warning(self, *a: Any, **k: Any) -> None: ...
    def info(self, *a: Any, **k: Any) -> None: ...
    def info_once(self, *a: Any, **k: Any) -> None: ...
    def debug(self, *a: Any, **k: Any) -> None: ...


class _NoFilePath:
    """``Path`` in the sandbox: any use is an OSError, as if AITER's sources were absent."""

    def __init__(self, *a: Any, **k: Any) -> None:
        raise OSError("mla-spec sandbox: no file access")


def _is_quantized_kv_cache(kv_cache_dtype: Any) -> Any:
    """vLLM's is_quantized_kv_cache for this backend's dtypes: the fp8 spellings."""
    return kv_cache_dtype.startswith("fp8")


class LoadedCode:
    """The executed definitions of one rocm_aiter_mla.py, callable under a Platform."""

    def __init__(
        self, extracted: Extracted, platform: Platform | None = None, builtins_override: dict | None = None
    ):
        self.extracted = extracted
        self.label = extracted.label
        self.platform = platform or Platform()
        p = self.platform
        rocm = types.SimpleNamespace(
            on_gfx950=lambda: p.arch == "gfx950",
            on_gfx942=lambda: p.arch == "gfx942",
            get_cdna_version=lambda: _cdna(p.arch),
        )
        envs = _Envs(p)
        platforms = types.SimpleNamespace(rocm=rocm)
        # AITER's segmented MLA decode, which vLLM's DCP verify loads (every pinned AITER has it; the model's
        # scope, mla_model.revisions.dcp_era.AITER_HAS_SEGMENTED_MLA)
        segmented = (
            types.SimpleNamespace(mla_decode_fwd=_segmented_mla_decode) if AITER_HAS_SEGMENTED_MLA else None
        )
        modules = {
            "aiter.ops.triton.attention.mla": segmented,
            "vllm.envs": envs,
            "vllm.platforms.rocm": rocm,
            "vllm.platforms": platforms,
            "vllm": types.SimpleNamespace(envs=envs, platforms=platforms),
            "functools": functools,
            "math": math,
        }

        def stub_import(name, globals=None, locals=None, fromlist=(), level=0):
            if name == "aiter.jit.core":
                raise ImportError("mla-spec sandbox: AITER sources are not available (native H24 off)")
            if name not in STUB_MODULES or modules.get(name) is None:
                raise ImportError(f"mla-spec sandbox: import of {name!r} refused")
            return modules[name] if fromlist else modules[name.split(".")[0]]

        safe = {n: getattr(builtins, n) for n in SAFE_BUILTIN_NAMES if hasattr(builtins, n)}
        safe.update(builtins_override or {})
        safe["__import__"] = stub_import
        safe["getattr"] = _public_getattr
        safe["__build_class__"] = builtins.__build_class__
        self.namespace: dict[str, Any] = {
            "__builtins__": safe,
            "__name__": "mla_spec_sandbox",
            "functools": functools,
            "math": math,
            "logger": _Logger(),
            "is_quantized_kv_cache": _is_quantized_kv_cache,
            "Path": _NoFilePath,
            "Final": None,
            "ClassVar": None,
            "torch": types.SimpleNamespace(),
            "envs": envs,
            "on_gfx950": rocm.on_gfx950,
            "on_gfx942": rocm.on_gfx942,
            "get_cdna_version": rocm.get_cdna_version,
            # vllm/utils/math_utils.py L37-39 (0.33.0): the lowest set bit
            "largest_power_of_2_divisor": lambda n: n & (-n),
            "__mla_spec_pow__": bounded_pow,
            "__mla_spec_lshift__": bounded_lshift,
        }
        from enum import Enum

        self.namespace["Enum"] = Enum
        module = ast.fix_missing_locations(_BoundArithmetic().visit(copy.deepcopy(extracted.module)))
        code = compile(
            module,
            f"<{self.label}: extracted gates>",
            "exec",
            flags=__future__.annotations.compiler_flag,
            dont_inherit=True,
        )
        try:
            exec(code, self.namespace)  # only the extracted, checked definitions run here
        except NameError as e:
            raise RefusedCode(
                f"{self.label}: defining the gates needs {e.name!r}, which is outside the stub set"
            ) from None
        self.helper = self.namespace[HELPER]
        self._caches = [v for v in self.namespace.values() if hasattr(v, "cache_clear")]
        self._params: dict[str, tuple[str, ...]] = {}
        self._cached_for: Any = None  # the platform the lru_caches were filled under

    # -- calling ---------------------------------------------------------------------------

    def clear_caches(self) -> None:
        for fn in self._caches:
            fn.cache_clear()
        self._cached_for = None

    def refresh_caches(self) -> None:
        """Clear every lru_cache unless it was filled under this very (plain) platform."""
        key = (self.platform.arch, self.platform.mode)
        if not all(isinstance(k, str) for k in key) or key != self._cached_for:
            self.clear_caches()
            self._cached_for = key if all(isinstance(k, str) for k in key) else None

    def has(self, predicate: str) -> bool:
        return predicate in self.extracted.predicates

    def call(self, predicate: str, **kwargs: Any) -> Any:
        """Call ``AiterMLAHelper.<predicate>`` with the keyword arguments its signature takes."""
        fn = getattr(self.helper, predicate)
        params = self.params(predicate)
        self.refresh_caches()
        return self._guard(fn, **{k: v for k, v in kwargs.items() if k in params})

    def params(self, predicate: str) -> tuple[str, ...]:
        if predicate not in self._params:
            self._params[predicate] = tuple(inspect.signature(getattr(self.helper, predicate)).parameters)
        return self._params[predicate]

    def builder(self, attrs: dict[str, Any], kv_cache_spec: Any, vllm_config: Any) -> Any:
        """A stub builder whose __init__ slice has run (sets _mtp_decode_qlen, the DCP configuration and
        friends)."""
        builder = types.SimpleNamespace(**attrs)
        self.refresh_caches()
        self._guard(self.namespace["mla_spec_builder_init"], builder, kv_cache_spec, vllm_config)
        return builder

    def persistent_gate(self, builder: Any, max_qo_len: Any) -> Any:
        self.refresh_caches()
        return self._guard(self.namespace["mla_spec_persistent_gate"], builder, max_qo_len)

    def inline_verify(self, impl: Any, max_qo_len: Any) -> Any:
        self.refresh_caches()
        return self._guard(
            self.namespace["mla_spec_inline_verify"], impl, types.SimpleNamespace(max_qo_len=max_qo_len)
        )

    def _guard(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        name = getattr(fn, "__name__", fn)
        try:
            with deadline(CALL_LIMIT_S, f"{self.label}: {name}"):
                return fn(*args, **kwargs)
        except RecursionError:
            raise GateRunaway(f"{self.label}: {name} recurses past Python's limit") from None
        except NameError as e:
            raise RefusedCode(
                f"{self.label}: {getattr(fn, '__name__', fn)} reaches {e.name!r} at call time, "
                "which is outside the stub set"
            ) from None
        except AttributeError as e:
            if isinstance(e.obj, types.SimpleNamespace):
                raise RefusedCode(
                    f"{self.label}: {getattr(fn, '__name__', fn)} reads {e.name!r}, which the harness "
                    "does not model"
                ) from None
            raise


class _Envs:
    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    @property
    def VLLM_ROCM_AITER_MLA_ASM_PADDING(self) -> Any:  # noqa: N802 - vLLM's name
        return self._platform.mode

    @property
    def VLLM_ROCM_AITER_MLA_DCP_VERIFY(self) -> str:  # noqa: N802 - vLLM's name (0.31.0/0.32.0 only)
        """The release's declared default (0.31.0 ``segmented``, 0.32.0 ``auto``): the modelled scope
        (dcp_era), read from the vllm/envs.py beside the gate file."""
        if self._platform.dcp_verify is None:
            raise RefusedCode(
                "the gate code reads VLLM_ROCM_AITER_MLA_DCP_VERIFY, and no vllm/envs.py beside the file "
                "declares its default"
            )
        return self._platform.dcp_verify


def _public_getattr(obj: Any, name: str, *default: Any) -> Any:
    """``getattr`` for the real code's ``getattr(kv_cache_spec, "cache_dtype_str", None)``: public names
    only, so no dunder reaches the sandbox's objects."""
    if not isinstance(name, str) or name.startswith("_"):
        raise RefusedCode(f"the gate code reads attribute {name!r} by getattr, which the sandbox refuses")
    return getattr(obj, name, *default)


def _segmented_mla_decode(*args: Any, **kwargs: Any) -> Any:
    """Present so the DCP verify's import probe succeeds; the gates never call the kernel."""
    raise RefusedCode("the gate code called AITER's segmented MLA decode, which only the harness runs")


def _cdna(arch: Any) -> Any:
    """get_cdna_version(): 3 on gfx942 (CDNA3), 4 on gfx950 (CDNA4)."""
    return 3 if arch == "gfx942" else 4
