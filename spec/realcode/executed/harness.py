"""The parent side of the executing harness: run a release's decode path for many shapes in one child.

:func:`execute` resolves the release (a version from the cached sdist tree,
a vLLM tree, or a lone ``rocm_aiter_mla.py`` inside one), starts
``python -m spec.realcode.executed.child`` confined
(:mod:`spec.realcode.executed.confine`: a scratch folder, an allow-listed
environment, limits, killed with mla-spec or after ``timeout`` quiet seconds),
sends the shapes and returns one record per shape.  The child never sees the
user's ``vllm`` or ``aiter``: its import guard answers both from the stubs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mla_model.shape import Shape
from spec.realcode.executed import confine
from spec.realcode.source import RELATIVE_PATH, SourceError, release_tree, release_version, tree_of

# What the harness gives vLLM where the Shape does not decide (configs.py reads them; an option of the
# same name overrides each). Kept here, free of torch, for the parent side.
DEFAULTS = {
    "max_num_seqs": 64,
    "max_model_len": 2048,
    "block_size": 1,
    "kv_len": 64,
    "kv_scale": 0.5,
    "q_scale": 0.25,
}
NEEDS_TORCH = (
    "executing a vLLM release needs torch: pip install 'mla-spec[conform]' (on a machine without a "
    "GPU first: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)
FORK_MIN = 16  # shapes below which a second forked worker costs more than it saves
GPU_FORK_MIN = 24  # the same on a GPU, where each worker also starts its own CUDA context


class HarnessError(RuntimeError):
    """The harness could not run the release (a name the stubs lack, an import that fails): one line."""


class ExecutionTimeout(HarnessError):
    """The release's code ran past the time limit (``--timeout``): its import or one step never ended."""


# Release files (path, size, mtime, tree) whose import ran past the time limit in this process: executing
# them again (bind runs the threshold and then the differential) would wait the limit again for nothing.
_IMPORT_HANGS: dict[tuple[str, int, int, str], str] = {}


@dataclass(frozen=True)
class ReleaseCode:
    label: str  # "vllm==0.28.0" or the path
    file: Path  # rocm_aiter_mla.py
    tree: Path | None  # the tree the stubs read the release's helper code from


def release_code(spec: str, tree: str | Path | None = None) -> ReleaseCode:
    """A release version, a vLLM tree, or a rocm_aiter_mla.py (inside a tree, or with ``tree`` given)."""
    version = release_version(spec)
    if version is not None:
        release_root = release_tree(version)
        return ReleaseCode(f"vllm=={version}", release_root / RELATIVE_PATH, release_root)
    p = Path(spec)
    if p.is_dir():
        p = p / RELATIVE_PATH
    if not p.is_file():
        raise SourceError(f"{spec}: no such file, directory or vLLM release")
    root = Path(tree) if tree is not None else tree_of(p)
    if root is None:
        raise SourceError(
            f"{spec}: executing the release needs the vLLM tree around the file (a vllm/ package "
            "above it); give the tree, or --shapes 0 to compare the gate functions only"
        )
    return ReleaseCode(str(spec), p, root)


def execute(
    code: ReleaseCode,
    shapes: Iterable[Shape],
    registry_id: str = "aiter-0.1.20",
    options: dict[str, Any] | None = None,
    seed: int = 0,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """One record per shape (see :mod:`spec.realcode.executed.child`), in order.

    ``timeout``: the seconds the child may spend on its import or one shape (default
    :func:`confine.time_limit`, the command's ``--timeout``); past it the child is killed and
    :class:`ExecutionTimeout` raised.

    Large batches are split over forked workers (one per core at most): shape ``i`` is seeded
    ``seed + i`` whichever worker runs it, so the records do not depend on the split.  The workers are
    forked by one child after it imported torch and the release, so both are loaded once, not once per
    worker (on the H200 acceptance machine ``import torch`` alone took 5.5 s, a case about 20 ms).  On a
    GPU the fork comes before anything touches CUDA (whose context does not survive a fork): each worker
    starts its own, about 0.45 s on the H200, so a GPU worker takes :data:`GPU_FORK_MIN` shapes or more.
    """
    shapes = list(shapes)
    workers = worker_count(len(shapes), str((options or {}).get("device", "cpu")))
    return _run_child(code, shapes, registry_id, options, seed, timeout, workers)


def worker_count(shapes: int, device: str) -> int:
    """How many workers a child forks for ``shapes`` shapes on ``device``: one per core at most, each with
    :data:`FORK_MIN` shapes or more (:data:`GPU_FORK_MIN` on a GPU)."""
    least = FORK_MIN if device == "cpu" else GPU_FORK_MIN
    return max(1, min(os.cpu_count() or 1, shapes // least))


def child_env(*dropped_prefixes: str) -> dict[str, str]:
    """The environment of a harness child: the caller's allow-listed variables
    (:func:`confine.allowed_environment`; never a ``VLLM_``/``AITER_`` knob: the release reads the stubs'
    answers, never the caller's settings), less any prefix named.  ``torch.cuda.is_available()`` answers
    through NVML there, which leaves CUDA untouched: the stubs ask it before a child forks its workers,
    and a CUDA driver started before a fork is unusable after it.  One OpenMP thread unless the caller
    says otherwise: a child's tensors are small and its forked workers run side by side, so torch's
    per-core thread pool in every worker only spins (the drop-in module's 173 decode steps of 0.33.0
    took 6.9 s on 2 cores with it, 0.6 s without)."""
    env = {k: v for k, v in confine.allowed_environment().items() if not k.startswith(dropped_prefixes)}
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_module(
    module: str,
    request: dict[str, Any],
    cwd: str,
    env: dict[str, str],
    timeout: float | None = None,
    device: str = "cpu",
) -> confine.Completed:
    """``python -m module`` confined in scratch folder ``cwd``, handed the JSON request on stdin; its
    output kept as text.  A step (loading torch, importing the release, one of the request's shapes) that
    runs past ``timeout`` seconds (default: the command's ``--timeout``) kills it, and raises
    :class:`ExecutionTimeout`."""
    limit = confine.time_limit() if timeout is None else timeout
    file = Path(str(request.get("file", "")))
    key = _file_key(file, request.get("tree"))
    if key in _IMPORT_HANGS:
        raise ExecutionTimeout(_IMPORT_HANGS[key])
    proc = confine.run(
        [sys.executable, "-m", module],
        input=json.dumps(request),
        cwd=cwd,
        env=env,
        timeout=limit,
        steps=len(request.get("shapes") or ()) + 2,
        device=device,
    )
    if proc.timed_out:
        # The executed children beat once torch is loaded, once the release is imported, then per step.
        where = f"importing {file.name}" if proc.beats == 1 else "one step" if proc.beats else "its start"
        message = (
            f"{file}: the release's code ran past the {limit:g} s limit (--timeout) on {where}; "
            "it and every process it started were killed"
        )
        if proc.beats == 1:
            _IMPORT_HANGS[key] = message
        raise ExecutionTimeout(message)
    return proc


def _file_key(file: Path, tree: Any) -> tuple[str, int, int, str]:
    try:
        st = file.stat()
    except OSError:
        return (str(file), -1, -1, str(tree))
    return (str(file.resolve()), st.st_size, st.st_mtime_ns, str(tree))


def _run_child(
    code: ReleaseCode,
    shapes: list[Shape],
    registry_id: str,
    options: dict[str, Any] | None,
    seed: int,
    timeout: float | None,
    workers: int = 1,
) -> list[dict[str, Any]]:
    request = {
        "file": str(code.file),
        "tree": str(code.tree) if code.tree else None,
        "registry": registry_id,
        "shapes": [s.to_json() for s in shapes],
        "options": options or {},
        "seed": seed,
        "workers": workers,
    }
    with tempfile.TemporaryDirectory(prefix="mla-spec-exec-") as scratch:
        env = child_env()
        device = str((options or {}).get("device", "cpu"))
        proc = run_module("spec.realcode.executed.child", request, scratch, env, timeout, device)
    return read_rows(proc.stdout, [proc.stderr], code.label, "the harness child")


def read_rows(stdout: str, stderrs: list[str], label: str, what: str) -> list[dict[str, Any]]:
    """The rows a child wrote (one JSON object a line, then ``{"done": true}``): a ``fatal`` line, or no
    ``done`` line (the child died; the last line of its stderr says why), is a :class:`HarnessError`."""
    rows, done = [], False
    for line in stdout.splitlines():
        row = json.loads(line)
        if "fatal" in row:
            if "No module named 'torch'" in row["fatal"]:
                raise HarnessError(NEEDS_TORCH)
            raise HarnessError(f"{label}: {row['fatal']}")
        if row.get("done"):
            done = True
            continue
        rows.append(row)
    if not done:
        if any("No module named 'torch'" in e for e in stderrs):
            raise HarnessError(NEEDS_TORCH)
        last = next((e.strip().splitlines()[-1] for e in stderrs if e.strip()), "no output")
        raise HarnessError(f"{label}: {what} stopped ({last})")
    return rows
