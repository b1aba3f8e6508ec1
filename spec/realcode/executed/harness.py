"""The parent side of the executing harness: run a release's decode path for many shapes in one child.

:func:`execute` resolves the release (a version from the cached sdist tree,
a vLLM tree, or a lone ``rocm_aiter_mla.py`` inside one), starts
``python -m spec.realcode.executed.child`` in a scratch working directory,
sends the shapes and returns one record per shape.  The child never sees the
user's ``vllm`` or ``aiter``: its import guard answers both from the stubs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mla_model.shape import Shape
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
CHUNK_MIN = 250  # shapes below which a second child costs more (its ~1.5 s start) than it saves
FORK_MIN = 16  # shapes below which a second forked worker costs more than it saves


class HarnessError(RuntimeError):
    """The harness could not run the release (a name the stubs lack, an import that fails): one line."""


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
    timeout: float = 1800,
) -> list[dict[str, Any]]:
    """One record per shape (see :mod:`spec.realcode.executed.child`), in order.

    Large batches are split over one worker per core; shape ``i`` is seeded ``seed + i`` whichever
    worker runs it, so the records do not depend on the split.  On the CPU the workers are forked by one
    child after it imported torch and the release (once, not once per worker); on a GPU, whose context
    does not survive a fork, each is a child of its own.
    """
    shapes = list(shapes)
    if str((options or {}).get("device", "cpu")) == "cpu":
        workers = max(1, min(os.cpu_count() or 1, len(shapes) // FORK_MIN))
        return _run_child(code, shapes, registry_id, options, seed, timeout, workers)
    workers = max(1, min(os.cpu_count() or 1, len(shapes) // CHUNK_MIN))
    bounds = [len(shapes) * w // workers for w in range(workers + 1)]
    chunks = [(shapes[a:b], seed + a) for a, b in zip(bounds, bounds[1:])]
    if len(chunks) == 1:
        return _run_child(code, chunks[0][0], registry_id, options, chunks[0][1], timeout)
    with ThreadPoolExecutor(len(chunks)) as pool:
        parts = list(pool.map(lambda c: _run_child(code, c[0], registry_id, options, c[1], timeout), chunks))
    return [row for part in parts for row in part]


def child_env(*dropped_prefixes: str) -> dict[str, str]:
    """The environment of a harness child: the user's, less every ``VLLM_``/``AITER_`` knob (the release
    reads the stubs' answers, never the caller's settings) and any other prefix named."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "AITER_", *dropped_prefixes))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_module(
    module: str, request: dict[str, Any], cwd: str, env: dict[str, str], timeout: float | None
) -> subprocess.CompletedProcess:
    """``python -m module`` in ``cwd``, handed the JSON request on stdin; its output kept as text."""
    return subprocess.run(
        [sys.executable, "-m", module],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def _run_child(
    code: ReleaseCode,
    shapes: list[Shape],
    registry_id: str,
    options: dict[str, Any] | None,
    seed: int,
    timeout: float,
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
        env.setdefault("OMP_NUM_THREADS", "1")  # small tensors: one thread per child, children side by side
        proc = run_module("spec.realcode.executed.child", request, scratch, env, timeout)
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
