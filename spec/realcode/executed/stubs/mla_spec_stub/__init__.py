"""Shared state of the stub ``vllm``/``aiter`` packages inside one harness child.

Nothing here is vLLM's or AITER's.  The child sets :data:`STATE` before each
step: the platform the stubs answer (arch, the small-head mode knob), the
release tree real helper code is read from, the AITER registry the recorder
fails from, and the list the recorder appends kernel calls to.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class StubMissing(AttributeError):
    """The release reached a name the harness does not stub (named in the message)."""


class StandInFault(RuntimeError):
    """The kernel stand-in (:data:`State.kernel`) failed on a recorded call: a harness fault, not vLLM's."""


@dataclass
class State:
    arch: str = "gfx950"
    asm_padding_mode: str = "auto"
    tree: Path | None = None  # root of the release tree (holds vllm/...)
    registry: Any = None  # mla_model.registry.Registry
    gluon_build: bool = True
    calls: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    kernel: Any = (
        None  # callable(entry, call, tensors) -> None; fills the output (replay), or None (record only)
    )
    timer: Any = None  # callable(fn, device) -> ms: the replay's kernel clock, or None (nothing timed)
    dcp_rank: int = 0  # the DCP rank get_dcp_group() answers (conformance.dcp_replay sets it per rank)
    device: Any = "cpu"  # the worker's device, where vLLM's workspace manager allocates (the harness sets it)


STATE = State()


def cpu_torch_shims() -> None:
    """Where torch has no GPU, answer the one CUDA query the release makes outside a kernel.

    rocm_aiter_mla.py 0.34.0 L3375 asks ``torch.cuda.is_current_stream_capturing()``
    before warming the Triton verify kernel; a CPU-only torch raises there.
    The harness never captures a graph, so the answer is False.  From 0.34.0 the
    builder also reads the device's CU count when CPRR is configured
    (:func:`_device_properties`).
    """
    import torch

    if not torch.cuda.is_available():
        torch.cuda.is_current_stream_capturing = lambda: False
        torch.cuda.get_device_properties = _device_properties


def _device_properties(device: Any = None) -> Any:
    """``torch.cuda.get_device_properties`` on a machine without a GPU: the platform's CU count.

    rocm_aiter_mla.py 0.34.0 L1099 caps CPRR's KV splits per batch at
    ``multi_processor_count`` (a CU count on ROCm); the answer is the stub
    platform's ``num_compute_units()`` for the shape's arch.
    """
    from vllm.platforms import current_platform

    return Bag("device_properties", multi_processor_count=current_platform.num_compute_units())


def strict(module_name: str) -> Any:
    """A module ``__getattr__`` that names any attribute the stub does not define."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise StubMissing(f"the release reaches {module_name}.{name}, which the harness does not stub")

    return __getattr__


def prefill_only(name: str, what: str) -> Any:
    """Stand-in for a prefill-only vLLM helper: decode never reaches it, so reaching it is a harness fault."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StubMissing(f"the release reaches the prefill {what} {name}, which the harness does not drive")

    refuse.__name__ = name
    return refuse


class Bag:
    """A config or layer object holding exactly the attributes the harness gives it.

    Reading any other attribute is a harness fault naming it (:class:`StubMissing`),
    so a value vLLM would have and the harness forgot never reads as a release error.
    """

    def __init__(self, _name: str, **fields: Any) -> None:
        object.__setattr__(self, "_name", _name)
        self.__dict__.update(fields)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise StubMissing(f"the release reads {self._name}.{name}, which the harness does not set")


@functools.cache
def parsed_release_file(relpath: str) -> tuple[Path, ast.Module]:
    """The release tree's file, parsed once per child (the tree does not change under a child)."""
    if STATE.tree is None:
        raise StubMissing(f"no release tree to read {relpath} from (pass a vLLM tree or a release version)")
    path = STATE.tree / relpath
    try:
        return path, ast.parse(path.read_text())
    except OSError as e:
        raise StubMissing(f"the release tree has no readable {relpath}: {e}") from None


@functools.cache
def _top_level_code(relpath: str, names: tuple[str, ...]) -> Any:
    path, tree = parsed_release_file(relpath)
    wanted = {}
    for node in tree.body:
        name = getattr(node, "name", None)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        if name in names:
            wanted[name] = node
    missing = [n for n in names if n not in wanted]
    if missing:
        raise StubMissing(f"{relpath} of this release defines no {', '.join(missing)}")
    return compile(ast.Module(body=[wanted[n] for n in names], type_ignores=[]), str(path), "exec")


def release_defs(relpath: str, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    """Execute the release's own top-level definitions ``names`` of ``relpath`` into ``namespace``.

    Used where a stub stands for vLLM code whose behaviour we must not restate
    (the reorder threshold, ``is_quantized_kv_cache``): the definitions are cut
    out of the release tree's file with ``ast`` and run here, unchanged.
    """
    exec(_top_level_code(relpath, tuple(names)), namespace)


@functools.cache
def _method_codes(relpath: str, class_name: str, names: tuple[str, ...], optional: bool) -> dict[str, Any]:
    path, tree = parsed_release_file(relpath)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            found = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef) and f.name in names}
            missing = [n for n in names if n not in found]
            if missing and not optional:
                raise StubMissing(f"{relpath}:{class_name} of this release defines no {', '.join(missing)}")
            return {
                name: compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec")
                for name, fn in found.items()
            }
    raise StubMissing(f"{relpath} of this release defines no class {class_name}")


def class_method_defs(
    relpath: str, class_name: str, names: tuple[str, ...], namespace: dict[str, Any], optional: bool = False
) -> dict[str, Any]:
    """The release's own methods ``names`` of ``class_name`` in ``relpath``, compiled in ``namespace``.

    Decorators are kept (a ``@property`` comes back as a property), so the
    result can be set on a stub class as it is.  With ``optional``, names the
    release does not define are left out instead of refused.
    """
    out = {}
    for name, code in _method_codes(relpath, class_name, tuple(names), optional).items():
        scratch: dict[str, Any] = {}
        exec(code, namespace, scratch)
        out[name] = scratch[name]
    return out
