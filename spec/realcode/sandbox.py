"""Interpret the extracted gate definitions against platform stubs, and call them.

The definitions are evaluated by our own interpreter (:mod:`spec.realcode.interpreter`: an
allow-listed subset of Python; Python's ``compile``/``exec``/``eval`` never see the input).
Its globals are: the taken definitions, the builtins of ``interpreter.BUILTINS``, imports
answered from the stubbed modules (every other one refused), and the stubs below.  The stubs
read a :class:`Platform` (arch, the ``VLLM_ROCM_AITER_MLA_ASM_PADDING`` mode, the KV dtype
rules) that the caller sets per shape; its values may be plain or symbolic (see
:mod:`spec.realcode.symexec`).

Bounded: every call of the real code runs under a deadline (:data:`CALL_LIMIT_S`, which check and bind set
from ``--timeout``); recursion past Python's limit, and an integer ``**`` or ``<<``, a repetition, a range
or a format width past the interpreter's bounds (``interpreter.MAX_INT_BITS``, ``MAX_SEQUENCE``) are
stopped, each as :class:`GateRunaway` (a :class:`~spec.realcode.symexec.LiftingUnsupported`, so check
reports UNKNOWN, exit 3, never a pass).

Pitfalls handled (sources §15): every ``lru_cache`` in the namespace
is cleared before each call (a cached arch answer would leak between shapes);
``vllm.platforms.rocm`` is always stubbed (unstubbed, the real code silently
decides "not gfx950"); the predicates are called by keyword, filtered through
their signatures (they grow across releases).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import signal
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mla_model.revisions.dcp_era import AITER_HAS_SEGMENTED_MLA
from spec.realcode import interpreter
from spec.realcode.extract import HELPER, STUB_MODULES, Extracted, RefusedCode
from spec.realcode.symexec import LiftingUnsupported

CALL_LIMIT_S = 30.0  # seconds one call of a real gate function may take (check/bind: their --timeout)


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


@dataclass
class Platform:
    """What the stubs answer: set before each call (plain values or symbolic ones)."""

    arch: Any = "gfx950"
    mode: Any = "auto"
    dcp_verify: str | None = None  # VLLM_ROCM_AITER_MLA_DCP_VERIFY's declared default (None: unknown)
    # knobs the model does not know (spec.realcode.knobs), fixed for the loaded code: name -> value (None:
    # unset; for an envs knob, the declared default stands in for unset before it gets here)
    knobs: dict[str, Any] = field(default_factory=dict)


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
    """The interpreted definitions of one rocm_aiter_mla.py, callable under a Platform."""

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
        envs = _envs_stub(p)
        environ = {name: str(value) for name, value in p.knobs.items() if value is not None}
        os_stub = types.SimpleNamespace(
            environ=environ, getenv=lambda name, default=None: environ.get(name, default)
        )
        platforms = types.SimpleNamespace(rocm=rocm)
        # AITER's segmented MLA decode, which vLLM's DCP verify loads (every pinned AITER has it; the model's
        # scope, mla_model.revisions.dcp_era.AITER_HAS_SEGMENTED_MLA)
        segmented = (
            types.SimpleNamespace(mla_decode_fwd=_segmented_mla_decode) if AITER_HAS_SEGMENTED_MLA else None
        )
        modules: dict[str, Any] = {
            "aiter.ops.triton.attention.mla": segmented,
            "vllm.envs": envs,
            "vllm.platforms.rocm": rocm,
            "vllm.platforms": platforms,
            "vllm": types.SimpleNamespace(envs=envs, platforms=platforms),
            "functools": functools,
            "math": math,
            "os": os_stub,
        }

        def stub_import(name: str, node: ast.AST, top: bool) -> Any:
            """The stub of module ``name`` (its top-level package's where ``top``: ``import a.b``)."""
            if name == "aiter.jit.core":
                raise ImportError("mla-spec sandbox: AITER sources are not available (native H24 off)")
            if name not in STUB_MODULES or modules.get(name) is None:
                raise ImportError(f"mla-spec sandbox: import of {name!r} refused")
            return modules[name.split(".")[0]] if top else modules[name]

        stubs: dict[str, Any] = {
            "functools": functools,
            "math": math,
            "logger": _Logger(),
            "is_quantized_kv_cache": _is_quantized_kv_cache,
            "Path": _NoFilePath,
            "Final": None,
            "ClassVar": None,
            "torch": types.SimpleNamespace(),
            "envs": envs,
            "os": os_stub,
            "on_gfx950": rocm.on_gfx950,
            "on_gfx942": rocm.on_gfx942,
            "get_cdna_version": rocm.get_cdna_version,
            # vllm/utils/math_utils.py L37-39 (0.33.0): the lowest set bit
            "largest_power_of_2_divisor": lambda n: n & (-n),
        }
        try:
            with deadline(CALL_LIMIT_S, f"{self.label}: defining the gates"):
                self.module = interpreter.Module(
                    extracted.module, self.label, stubs, stub_import, builtins_override
                )
        except RecursionError:
            raise GateRunaway(f"{self.label}: defining the gates recurses past Python's limit") from None
        except NameError as e:
            raise RefusedCode(
                f"{self.label}: defining the gates needs {e.name!r}, which is outside the stub set"
            ) from None
        self.namespace = self.module.namespace  # the interpreted module's globals
        self.helper = self.namespace[HELPER]
        self._caches = [v for v in self.namespace.values() if isinstance(v, interpreter.Memo)]
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


def _knob_reader(name: str) -> Callable[[_Envs], Any]:
    def read(self: _Envs) -> Any:
        return self._platform.knobs[name]

    return read


def _envs_stub(platform: Platform) -> _Envs:
    """``vllm.envs`` for the gates: the modelled knobs, and each knob of ``platform.knobs`` at its value
    (a subclass of :class:`_Envs` whose attributes the interpreter lets the input read)."""
    if not platform.knobs:
        return _Envs(platform)
    names = tuple(platform.knobs)
    members: dict[str, Any] = {"__module__": __name__}
    for name in names:
        members[name] = property(_knob_reader(name))
    cls = type("_Envs", (_Envs,), members)
    interpreter.HOST_ATTRIBUTES[cls] = frozenset(names)
    return cls(platform)


def _segmented_mla_decode(*args: Any, **kwargs: Any) -> Any:
    """Present so the DCP verify's import probe succeeds; the gates never call the kernel."""
    raise RefusedCode("the gate code called AITER's segmented MLA decode, which only the harness runs")


def _cdna(arch: Any) -> Any:
    """get_cdna_version(): 3 on gfx942 (CDNA3), 4 on gfx950 (CDNA4)."""
    return 3 if arch == "gfx942" else 4
