"""Memory: the bytes the persistent decode metadata and the reduce scratch take, from the real code.

For a release and a shape, :func:`measure` runs the release's ``AiterMLAMetadataBuilder.__init__`` with
``max_num_seqs`` sequences, its sizing calls answered by AITER's own ``get_mla_metadata_info_v1``, reads
back the six buffers the builder allocates, and runs AITER's ``mla_decode_fwd`` on meta tensors for the
largest decode step (``max_num_seqs`` requests of ``_mtp_decode_qlen`` tokens) to measure the reduce
scratch it allocates (:mod:`spec.realcode.executed.memory_child`, :mod:`spec.realcode.aiter_sizing`).
Both are a function of the threshold (through ``_mtp_decode_qlen``), the padded heads and
``max_num_seqs``; nothing here computes them.

The default ``max_num_seqs`` is vLLM's own: the release's ``EngineArgs.get_batch_defaults`` evaluated
with a platform that reports the arch's GPU (:func:`default_max_num_seqs`).

:func:`over_budget` measures every bundled deployment (:mod:`mla_model.deployments`) on both archs for
each release, and returns those whose metadata plus scratch exceed a byte budget (``check
--memory-budget``).  Results are cached per (release, AITER, max_num_seqs, code) under
``$XDG_CACHE_HOME/mla-spec/memory/``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mla_model.deployments import Deployment, deployments
from mla_model.shape import ARCHS, Shape
from spec.realcode import cache_io, interpreter, source
from spec.realcode.aiter_sizing import DEFAULT_AITER, AiterCode, aiter_code
from spec.realcode.executed.harness import (
    NEEDS_TORCH,
    HarnessError,
    ReleaseCode,
    child_env,
    release_code,
    run_module,
)
from spec.realcode.extract import RefusedCode
from spec.realcode.sandbox import CALL_LIMIT_S, deadline
from spec.realcode.source import SourceError, cache_dir
from spec.realcode.symexec import LiftingUnsupported

# What vLLM's platform reports for each arch's GPU, which get_batch_defaults reads: the device name and its
# memory (AMD Instinct MI300X: 192 GB HBM3; MI355X: 288 GB HBM3E; sources §58).
GPU = {
    "gfx942": SimpleNamespace(name="AMD Instinct MI300X", memory=192 << 30),
    "gfx950": SimpleNamespace(name="AMD Instinct MI355X", memory=288 << 30),
}
ARG_UTILS = Path("vllm/engine/arg_utils.py")
_CODE = (
    Path(__file__),
    Path(__file__).parents[1] / "realcode" / "aiter_sizing.py",
    Path(__file__).parents[1] / "realcode" / "executed" / "memory_child.py",
)


@dataclass(frozen=True)
class Memory:
    """One release's persistent decode buffers and reduce scratch for one shape, measured."""

    release: str
    aiter: str
    shape: Shape
    max_num_seqs: int
    threshold: int | None
    mtp_decode_qlen: int | None
    sizing: tuple[dict[str, Any], ...]  # each get_mla_metadata_info_v1 call, as vLLM made it
    buffers: dict[str, dict[str, Any]] | None  # buffer name -> {"shape", "dtype", "bytes"}
    scratch: dict[str, Any] | None  # {"rows", "qlen", "heads", "tensors", "bytes"} or {"error"}
    error: str | None

    @property
    def metadata_bytes(self) -> int | None:
        return None if self.buffers is None else sum(b["bytes"] for b in self.buffers.values())

    @property
    def scratch_bytes(self) -> int | None:
        return None if not self.scratch or "bytes" not in self.scratch else int(self.scratch["bytes"])

    @property
    def total_bytes(self) -> int | None:
        if self.metadata_bytes is None:
            return None
        return self.metadata_bytes + (self.scratch_bytes or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "aiter": self.aiter,
            "max_num_seqs": self.max_num_seqs,
            "threshold": self.threshold,
            "mtp_decode_qlen": self.mtp_decode_qlen,
            "sizing": list(self.sizing),
            "buffers": self.buffers,
            "metadata_bytes": self.metadata_bytes,
            "scratch": self.scratch,
            "scratch_bytes": self.scratch_bytes,
            "total_bytes": self.total_bytes,
            "error": self.error,
        }


# --- vLLM's default max_num_seqs -------------------------------------------------------------------


class _Platform:
    """``current_platform`` for get_batch_defaults: the arch's GPU; remembers that it was asked."""

    def __init__(self, arch: str) -> None:
        self.gpu, self.asked = GPU[arch], set[str]()

    def get_device_total_memory(self, *a: Any) -> int:
        self.asked.add("memory")
        return int(self.gpu.memory)

    def get_device_name(self, *a: Any) -> str:
        self.asked.add("name")
        return str(self.gpu.name)

    def is_device_capability(self, *a: Any) -> bool:
        return False  # a CUDA compute capability (GB10's); no ROCm GPU has one

    def is_tpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False


def default_max_num_seqs(version: str, arch: str = "gfx950") -> int:
    """``max_num_seqs`` when the user gives none to ``vllm serve`` on the arch's GPU, for a release."""
    return tree_default_max_num_seqs(source.release_tree(version), arch)


@cache
def tree_default_max_num_seqs(root: Path, arch: str = "gfx950") -> int:
    """``max_num_seqs`` when the user gives none to ``vllm serve`` on the arch's GPU: the tree's
    ``EngineArgs.get_batch_defaults`` evaluated (its OPENAI_API_SERVER entry), then capped by the default
    ``max_num_batched_tokens`` as ``_set_default_max_num_seqs_and_batched_tokens_args`` does (0.34.0
    vllm/engine/arg_utils.py L2984-3076, L3214-3271).  The method is evaluated by our own interpreter
    (spec.realcode.interpreter), never by Python's: the tree is as untrusted as the gate file."""
    path = root / ARG_UTILS
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        raise SourceError(f"{root}: cannot read {ARG_UTILS}: {e}") from None
    fn = next(
        (
            node
            for cls in tree.body
            if isinstance(cls, ast.ClassDef) and cls.name == "EngineArgs"
            for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name == "get_batch_defaults"
        ),
        None,
    )
    if fn is None:
        raise SourceError(f"{root}: {ARG_UTILS} has no EngineArgs.get_batch_defaults")
    fn.decorator_list, fn.returns = [], None
    for a in fn.args.args:
        a.annotation = None
    fn.body = [s for s in fn.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    usage = SimpleNamespace(LLM_CLASS="LLM_CLASS", OPENAI_API_SERVER="OPENAI_API_SERVER", ENGINE_CONTEXT="E")
    platform = _Platform(arch)
    stubs: dict[str, Any] = {"current_platform": platform, "UsageContext": usage, "GiB_bytes": 1 << 30}

    def no_import(name: str, node: ast.AST, top: bool) -> Any:
        raise RefusedCode(
            f"{path}: get_batch_defaults imports {name!r}, which the interpreter does not answer"
        )

    try:
        with deadline(CALL_LIMIT_S, f"{path}: get_batch_defaults"):
            module = interpreter.Module(ast.Module([fn], []), str(path), stubs, no_import)
            tokens, seqs = module.namespace["get_batch_defaults"](None, 1)
    except (LiftingUnsupported, RecursionError, NameError, AttributeError, TypeError) as e:
        raise SourceError(f"{path}: cannot evaluate EngineArgs.get_batch_defaults: {e}") from None
    if platform.asked != {"memory", "name"}:  # its try/except would have fallen back to the small tier
        raise SourceError(f"{root}: get_batch_defaults did not read the GPU's memory and name")
    return int(min(seqs[usage.OPENAI_API_SERVER], tokens[usage.OPENAI_API_SERVER]))


# --- measuring -------------------------------------------------------------------------------------


def _code(release: str | ReleaseCode) -> ReleaseCode:
    """The release's code (``source.release_tree`` looked up at call time, so a test may replace it)."""
    return release if isinstance(release, ReleaseCode) else release_code(release)


def _cache_file(code: ReleaseCode, aiter: AiterCode, max_num_seqs: int, registry: str) -> Path:
    h = hashlib.sha256()
    for part in (code.file, aiter.attention, aiter.mla, *_CODE):
        h.update(part.read_bytes())
    h.update(f"{code.tree}|{max_num_seqs}|{registry}".encode())
    return cache_dir().parent / "memory" / f"{h.hexdigest()[:24]}.json"


def _is_entry(data: Any) -> bool:
    """A cached entry as written: one row (a JSON object) per shape key (anything else is rebuilt)."""
    return isinstance(data, dict) and all(isinstance(row, dict) for row in data.values())


def _key(shape: Shape) -> str:
    return json.dumps(shape.to_json(), sort_keys=True)


def measure(
    release: str | ReleaseCode,
    shapes: list[Shape],
    max_num_seqs: int,
    aiter: str = DEFAULT_AITER,
    registry: str = "aiter-0.1.20",
    timeout: float = 900,
) -> list[Memory]:
    """One :class:`Memory` per shape, in order (cached; the misses run in one harness child)."""
    code, acode = _code(release), aiter_code(aiter)
    cached_file = _cache_file(code, acode, max_num_seqs, registry)
    cached: dict[str, Any] = cache_io.read_json(cached_file, _is_entry) or {}
    todo = list({_key(s): s for s in shapes if _key(s) not in cached}.values())
    if todo:
        cache_io.ensure_writable(cached_file.parent)  # before the child runs, not after
        request = {
            "file": str(code.file),
            "tree": str(code.tree) if code.tree else None,
            "registry": registry,
            "aiter": {"label": acode.label, "attention": str(acode.attention), "mla": str(acode.mla)},
            "shapes": [s.to_json() for s in todo],
            "options": {"max_num_seqs": max_num_seqs},
        }
        with tempfile.TemporaryDirectory(prefix="mla-spec-memory-") as scratch:
            proc = run_module("spec.realcode.executed.memory_child", request, scratch, child_env(), timeout)
        done = False
        for line in proc.stdout.splitlines():
            row = json.loads(line)
            if "fatal" in row:
                raise HarnessError(NEEDS_TORCH if "No module named 'torch'" in row["fatal"] else row["fatal"])
            if row.get("done"):
                done = True
                continue
            cached[_key(Shape.from_json(row["shape"]))] = row
        if not done:
            if "No module named 'torch'" in proc.stderr:
                raise HarnessError(NEEDS_TORCH)
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise HarnessError(f"{code.label}: the memory child stopped ({last})")
        cache_io.write_json(cached_file, cached)
    return [_memory(code.label, acode.label, s, max_num_seqs, cached[_key(s)]) for s in shapes]


def _memory(release: str, aiter: str, shape: Shape, max_num_seqs: int, row: dict[str, Any]) -> Memory:
    return Memory(
        release=release,
        aiter=aiter,
        shape=shape,
        max_num_seqs=max_num_seqs,
        threshold=row.get("threshold"),
        mtp_decode_qlen=row.get("mtp_decode_qlen"),
        sizing=tuple(row.get("sizing") or ()),
        buffers=row.get("buffers"),
        scratch=row.get("scratch"),
        error=row.get("error"),
    )


# --- deployments and the budget --------------------------------------------------------------------


def deployment_shapes() -> list[tuple[Deployment, str, Shape]]:
    """Every bundled deployment with each of its drafter spellings, on each arch, as the Shape the builder
    is built for (DCP 1; the query fields do not reach ``__init__``)."""
    return [
        (
            dep,
            method,
            Shape(
                arch=arch,
                num_heads=dep.num_heads,
                kv_cache_dtype=dep.kv_cache_dtype,
                spec_method=method,
                num_spec_tokens=dep.num_spec_tokens,
            ),
        )
        for dep in deployments()
        for method in dep.spec_methods
        for arch in ARCHS
    ]


@dataclass(frozen=True)
class OverBudget:
    target: str  # the revision or release checked
    deployment: str  # its label, with the drafter spelling and the arch
    memory: Memory

    def to_json(self) -> dict[str, Any]:
        return {"revision": self.target, "deployment": self.deployment, **self.memory.to_json()}


def over_budget(
    targets: list[Any], budget: int, max_num_seqs: int | None = None
) -> tuple[list[OverBudget], list[str]]:
    """The (target, deployment) pairs whose metadata plus scratch exceed ``budget`` bytes, and a note per
    target that could not be measured.  A target is a model revision id or a real revision
    (:func:`release_of` names the release that runs it)."""
    found, notes = [], []
    points = deployment_shapes()
    for target in targets:
        label = target if isinstance(target, str) else str(target.id)
        release = release_of(target)
        if release is None:
            notes.append(
                f"{label}: not measured (it models no vLLM release, so there is no builder to execute)"
            )
            continue
        try:
            code = _code(release)
            seqs = max_num_seqs or _default_for(code)
            rows = measure(code, [s for _, _, s in points], seqs)
        except (SourceError, HarnessError, OSError) as e:
            notes.append(f"{label}: not measured ({' '.join(str(e).split())})")
            continue
        for (dep, method, shape), m in zip(points, rows):
            total = m.total_bytes
            if total is not None and total > budget:
                spelling = "" if method == dep.spec_methods[0] else f" ({method})"
                found.append(OverBudget(label, f"{dep.label}{spelling} {shape.arch}", m))
    return found, notes


def _default_for(code: ReleaseCode) -> int:
    """vLLM's default max_num_seqs for a release (its tree's own code): the larger of the two archs'."""
    if code.tree is None:
        raise SourceError(f"{code.label}: no vLLM tree to read the default max_num_seqs from; give it")
    return max(tree_default_max_num_seqs(code.tree, arch) for arch in GPU)


def human(n: int | None) -> str:
    """Bytes for a person: ``12.3 MiB (12,897,812 B)``."""
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n:,} B)"
    return f"{n:,} B"


def release_of(target: Any) -> str | None:
    """The release that runs a check or explain target: a model revision's release (None for one that
    models no release, main-pre-51011), a real revision's own release or file."""
    from mla_model.revisions import RELEASE_OF_REVISION

    if isinstance(target, str):
        version = RELEASE_OF_REVISION.get(target)
        return None if version is None else f"vllm=={version}"
    return str(target.id) if str(target.id).startswith("vllm==") else str(target.source)


def for_shape(target: Any, shape: Shape, max_num_seqs: int | None = None) -> tuple[Memory | None, str | None]:
    """The memory of one shape on the target's release (:func:`measure`), with ``max_num_seqs`` or vLLM's
    default for the shape's arch; or None and why it could not be measured."""
    release = release_of(target)
    if release is None:
        return None, f"{target} models no vLLM release, so there is no builder to execute"
    try:
        code = _code(release)
        if max_num_seqs is None:
            if code.tree is None:
                raise SourceError(f"{code.label}: no vLLM tree to read the default max_num_seqs from")
            max_num_seqs = tree_default_max_num_seqs(code.tree, shape.arch)
        return measure(code, [shape], max_num_seqs)[0], None
    except (SourceError, HarnessError, OSError) as e:
        return None, " ".join(str(e).split())
