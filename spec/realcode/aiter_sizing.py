"""AITER's own buffer sizing, executed: ``get_mla_metadata_info_v1`` and ``mla_decode_fwd``'s reduce scratch.

The code is AITER's, read at run time and never copied into this repository:

* **where it comes from** (:func:`aiter_code`): a version is the ``amd-aiter`` wheel on PyPI, fetched
  once with pip into ``$XDG_CACHE_HOME/mla-spec/aiter/<version>/`` (a wheel is a zip: only
  ``aiter/ops/attention.py`` and ``aiter/mla.py`` are kept; nothing is installed or imported); a path is
  an AITER checkout or installed package (the folder holding ``aiter/``), or a wheel file;
* **how it runs** (:func:`load`): the named function and the module-level functions and constants it
  reaches are taken out of the file with ``ast`` and executed in a namespace where what needs a GPU is
  answered for one arch: ``get_gfx()`` the arch, ``get_cu_num()`` and
  ``torch.cuda.get_device_properties(...).multi_processor_count`` its compute units
  (:data:`mla_model.emulation.CU_NUM`), ``is_experimental_enabled()`` False (the harness child's
  environment has no ``AITER_`` knob), ``dtypes`` the harness's (so AITER compares the very dtype objects
  vLLM passes), the compiled kernels (``aiter.mla_decode_stage1_asm_fwd``, ``aiter.mla_reduce_v1``, ...)
  no-ops; every ``torch`` allocation is made on the ``meta`` device and recorded, so
  ``mla_decode_fwd``'s scratch is measured, not computed.  A name the file reaches that is none of
  these is bound to a placeholder that raises :class:`AiterUnsupported` naming it when used.

Loading needs torch (the functions build torch dtypes); :func:`aiter_code` does not.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from spec.realcode import cache_io
from spec.realcode.source import SourceError, cache_dir, is_release, pip_failure

PACKAGE = "amd-aiter"
FILES = {"attention": "aiter/ops/attention.py", "mla": "aiter/mla.py"}
# The one amd-aiter release PyPI holds (pip download amd-aiter==x lists the versions; sources §58).
DEFAULT_AITER = "0.1.7.post2.dev18"


class AiterUnsupported(RuntimeError):
    """AITER's code reached something the executor does not answer (a compiled op, a name it lacks)."""


@dataclass(frozen=True)
class AiterCode:
    label: str  # "amd-aiter==0.1.7.post2.dev18" or the path
    attention: Path  # aiter/ops/attention.py
    mla: Path  # aiter/mla.py


def aiter_dir(version: str) -> Path:
    return cache_dir().parent / "aiter" / version


def aiter_code(source: str = DEFAULT_AITER) -> AiterCode:
    """The two AITER files of a PyPI version (fetched once), an AITER tree or package, or a wheel file."""
    p = Path(source)
    if p.suffix == ".whl" and p.is_file():
        return _from_wheel(p, Path(tempfile.mkdtemp(prefix="mla-spec-aiter-")), str(p))
    if p.is_dir():
        root = p if (p / FILES["attention"]).is_file() else p.parent
        files = {k: root / v for k, v in FILES.items()}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise SourceError(f"{source}: not an AITER tree or package (no {missing[0]})")
        return AiterCode(str(p), files["attention"], files["mla"])
    version = source.removeprefix(f"{PACKAGE}==")
    if not is_release(version):
        raise SourceError(f"{source}: no such AITER tree, wheel or {PACKAGE} version")
    root = aiter_dir(version)
    files = {k: root / Path(v).name for k, v in FILES.items()}
    if all(_readable(f) for f in files.values()):
        return AiterCode(f"{PACKAGE}=={version}", files["attention"], files["mla"])
    cache_io.ensure_writable(root)
    with cache_io.locked(root), tempfile.TemporaryDirectory(prefix="mla-spec-aiter-pip-") as tmp:
        if all(_readable(f) for f in files.values()):  # fetched by another process while this one waited
            return AiterCode(f"{PACKAGE}=={version}", files["attention"], files["mla"])
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        cmd += [f"{PACKAGE}=={version}", "-d", tmp]
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            output = proc.stdout + proc.stderr
            raise SourceError(pip_failure(output, f"{PACKAGE} {version}", f"{PACKAGE} {version} is not"))
        return _from_wheel(wheels[0], root, f"{PACKAGE}=={version}")


def _readable(file: Path) -> bool:
    """A kept file is there and is UTF-8 text (else it is fetched again)."""
    try:
        file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return True


def _from_wheel(wheel: Path, root: Path, label: str) -> AiterCode:
    """Keep the two files of the wheel under ``root`` (each written whole under a temporary name, then
    renamed: :func:`spec.realcode.cache_io.write_bytes`)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in FILES.values():
                cache_io.write_bytes(root / Path(name).name, z.read(name))
    except (KeyError, zipfile.BadZipFile, OSError) as e:
        raise SourceError(f"{wheel}: not an AITER wheel with {', '.join(FILES.values())} ({e})") from None
    return AiterCode(label, root / "attention.py", root / "mla.py")


# --- executing the code ---------------------------------------------------------------------------


class _Missing:
    """A name AITER's code reaches that the executor does not answer: raises, naming it, when used."""

    def __init__(self, name: str, why: str) -> None:
        self._name, self._why = name, why

    def _fail(self, *a: Any, **k: Any) -> Any:
        raise AiterUnsupported(f"AITER's code reached {self._name}, which {self._why}")

    __call__ = _fail

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._fail()

    def __getitem__(self, key: Any) -> Any:
        self._fail()


@dataclass
class Allocations:
    """The tensors AITER's code allocated through ``torch`` during one call (all on the meta device)."""

    tensors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(t["bytes"] for t in self.tensors)


class _Cuda:
    def __init__(self, cu_num: int) -> None:
        self.cu_num = cu_num

    def current_device(self) -> int:
        return 0

    def get_device_properties(self, device: Any = 0) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(multi_processor_count=self.cu_num)

    def is_available(self) -> bool:
        return True


_ALLOCATORS = ("empty", "zeros", "ones", "full", "empty_strided", "randn", "rand")


class _Torch:
    """``torch`` as AITER's code sees it: the real module, but every allocation on the meta device and
    recorded, and ``torch.cuda`` answering for the arch."""

    def __init__(self, cu_num: int, record: Allocations) -> None:
        import torch

        self._torch, self.cuda, self._record = torch, _Cuda(cu_num), record

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._torch, name)
        if name in _ALLOCATORS:
            return functools.partial(self._allocate, value)
        if name.endswith("_like") and name[:-5] in _ALLOCATORS:
            return functools.partial(self._allocate_like, value)
        return value

    def _allocate(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = "meta"
        kwargs.pop("pin_memory", None)
        t = fn(*args, **kwargs)
        self._keep(t)
        return t

    def _allocate_like(self, fn: Callable, other: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = "meta"
        t = fn(other, *args, **kwargs)
        self._keep(t)
        return t

    def _keep(self, t: Any) -> None:
        self._record.tensors.append(
            {
                "shape": list(t.shape),
                "dtype": str(t.dtype).replace("torch.", ""),
                "bytes": t.numel() * t.element_size(),
            }
        )


class _Kernels:
    """``aiter`` as the Python wrappers call it: the compiled ops run nothing (the scratch is already
    allocated when they are called); anything else is unsupported."""

    OPS_PREFIXES = ("mla_", "mla_decode", "mla_reduce", "get_mla_metadata_v1")

    def __init__(self, dtypes: Any) -> None:
        self.dtypes = dtypes

    def __getattr__(self, name: str) -> Any:
        if name.startswith(self.OPS_PREFIXES):
            return lambda *a, **k: None
        raise AiterUnsupported(f"AITER's code reached aiter.{name}, which the executor does not answer")


def _loaded_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_BENIGN_DECORATORS = {"functools.lru_cache", "functools.cache", "lru_cache", "cache"}


def _decorator_name(d: ast.expr) -> str:
    target = d.func if isinstance(d, ast.Call) else d
    return ast.unparse(target)


def load(path: Path, name: str, arch: str, dtypes: Any, record: Allocations) -> Callable[..., Any]:
    """AITER's function ``name`` from ``path``, runnable for ``arch`` (see the module docstring).

    Module-level functions and constants it reaches are taken along (their caching decorators dropped,
    so an arch answer is not cached across arches); a function decorated otherwise (``compile_ops``: a
    compiled kernel, ``triton.jit``) or a name from an import is answered by the stubs or bound to a
    placeholder that refuses it by name when used.
    """
    from mla_model.emulation import CU_NUM

    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise SourceError(f"{path}: cannot read AITER's code: {e}") from None
    defs: dict[str, ast.stmt] = {}
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for t in node.targets:
                defs[cast(ast.Name, t).id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            defs[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if name not in defs:
        raise AiterUnsupported(f"{path} defines no {name}")
    cu_num = CU_NUM[arch]
    stubs: dict[str, Any] = {
        "math": math,
        "functools": functools,
        "torch": _Torch(cu_num, record),
        "dtypes": dtypes,
        "aiter": _Kernels(dtypes),
        "get_gfx": lambda: arch,
        "get_cu_num": lambda: cu_num,
        "is_experimental_enabled": lambda: False,
    }
    namespace: dict[str, Any] = {"__name__": f"mla_spec_aiter_{path.stem}", **stubs}
    taken: list[ast.stmt] = []
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n in seen or n in stubs:
            continue
        seen.add(n)
        found = defs.get(n)
        if found is None:
            if n in imported:
                namespace[n] = _Missing(n, "is imported from outside the file and not answered")
            continue
        node = found
        if isinstance(node, ast.FunctionDef):
            kept = [d for d in node.decorator_list if _decorator_name(d) not in _BENIGN_DECORATORS]
            if kept:
                namespace[n] = _Missing(n, f"is a compiled or JIT function (@{_decorator_name(kept[0])})")
                continue
            node = copy.copy(node)
            node.decorator_list = []
        if isinstance(node, ast.ClassDef):
            namespace[n] = _Missing(n, "is a class the executor does not take")
            continue
        taken.append(node)
        todo.extend(_loaded_names(node))
    for node in sorted(taken, key=lambda x: x.lineno):
        module = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
        try:
            exec(compile(module, str(path), "exec"), namespace)  # noqa: S102  (AITER's own code, see above)
        except Exception as e:  # noqa: BLE001  (a constant computed from something unanswered)
            for t in getattr(node, "targets", []) or [getattr(node, "target", None)]:
                if isinstance(t, ast.Name):
                    namespace[t.id] = _Missing(t.id, f"could not be computed ({type(e).__name__}: {e})")
    return namespace[name]
