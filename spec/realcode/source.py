"""Find ``rocm_aiter_mla.py``: a file, a vLLM tree or installed package, or a release.

A release (``0.28.0``) is fetched from PyPI with pip into the user cache
(``$XDG_CACHE_HOME/mla-spec/vllm/<version>/rocm_aiter_mla.py``).  The sdist
(about 40 MB, against about 300 MB for a wheel) is enough: pip unpacks it,
fails at "Preparing metadata" because vLLM's build needs torch, and
``--no-clean`` keeps the unpacked tree, from which only this file is copied
(sources §15).  Nothing of vLLM is built, imported or
installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

RELATIVE_PATH = Path("vllm/v1/attention/backends/mla/rocm_aiter_mla.py")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?([a-z0-9.+-]*)$")


class SourceError(ValueError):
    """The input names no readable rocm_aiter_mla.py (one line for the user)."""


@dataclass(frozen=True)
class Source:
    label: str  # "vllm==0.28.0" or the path
    path: Path
    text: str


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mla-spec" / "vllm"


def release_version(spec: str) -> str | None:
    """The version a release spec names, ``0.28.0`` or ``vllm==0.28.0`` (one spelling everywhere); None for
    a path."""
    bare = spec[len("vllm==") :] if spec.startswith("vllm==") else spec
    return bare if is_release(bare) else None


def is_release(spec: str) -> bool:
    return bool(_VERSION.match(spec)) and not Path(spec).exists()


# What the cache keeps of a release's sdist: the Python tree (the harness reads
# real helper code beyond rocm_aiter_mla.py from it), the shipped attention
# tests (``mla-spec vllm-tests``), and the files that pin AITER.
_KEPT = ("vllm/**/*.py", "tests/v1/attention/**/*", "requirements/**/*", "docker/**/*", "PKG-INFO")


def release_tree(version: str) -> Path:
    """The cached tree of release ``version`` (downloaded once with pip; see the module docstring)."""
    root = cache_dir() / version / "tree"
    if (root / RELATIVE_PATH).is_file():
        return root
    with tempfile.TemporaryDirectory(prefix="mla-spec-pip-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, PIP_DISABLE_PIP_VERSION_CHECK="1")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "--no-clean",
            f"vllm=={version}",
            "-d",
            os.path.join(tmp, "out"),
        ]
        output = _download_with_progress(cmd, env, Path(tmp), f"vLLM {version} sdist", root)
        found = sorted(Path(tmp).glob(f"pip-*/vllm_*/{RELATIVE_PATH}")) or sorted(
            Path(tmp).rglob(str(RELATIVE_PATH))
        )
        if not found:
            if "No matching distribution" in output or "Could not find a version" in output:
                raise SourceError(f"vLLM release {version} does not exist on PyPI")
            last = (output.strip().splitlines() or ["no output"])[-1]
            raise SourceError(f"could not fetch vLLM {version} from PyPI: {last}")
        copy_tree(found[0].parents[len(RELATIVE_PATH.parts) - 1], root)
    return root


_SIZE = re.compile(r"Downloading \S+ \(([\d.]+) (kB|MB|GB)\)")
_UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


def _download_with_progress(cmd: list[str], env: dict[str, str], tmp: Path, what: str, cache: Path) -> str:
    """Run pip, showing on stderr where the download is cached and a progress bar: the size pip announces,
    the bytes written so far into its temporary directory.  Both are drawn on a terminal only (the bar is
    transient), so nothing is left in a log and an error stays one line.  Returns pip's output."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    lines: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    console = Console(stderr=True)
    if console.is_terminal:
        console.print(f"mla-spec: fetching the {what} from PyPI once; cached in {cache}", highlight=False)
    columns = (TextColumn(what), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("download", total=None)
        deadline = time.monotonic() + 900
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                break
            size = next((m for m in map(_SIZE.search, list(lines)) if m), None)
            total = float(size.group(1)) * _UNITS[size.group(2)] if size else None
            written = sum(_size(p) for p in tmp.rglob("*"))  # the download, then its unpacking: capped
            progress.update(task, total=total, completed=min(written, total) if total else written)
            time.sleep(0.2)
    proc.wait()
    reader.join(timeout=5)
    return "".join(lines)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:  # pip removed it meanwhile
        return 0


def copy_tree(unpacked: Path, root: Path) -> None:
    """Copy the kept parts of an unpacked sdist to ``root`` (atomically: a partial copy is never seen)."""
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for pattern in _KEPT:
        for f in unpacked.glob(pattern):
            if f.is_file():
                target = staging / f.relative_to(unpacked)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)


def fetch_release(version: str) -> Path:
    """The release's rocm_aiter_mla.py, from the cached release tree."""
    return release_tree(version) / RELATIVE_PATH


def tree_of(path: Path) -> Path | None:
    """The vLLM tree a rocm_aiter_mla.py sits in (the folder holding ``vllm/``), if it sits in one."""
    parts = len(RELATIVE_PATH.parts)
    p = path.resolve()
    if len(p.parents) >= parts and p.parts[-parts:] == RELATIVE_PATH.parts:
        root = p.parents[parts - 1]
        if (root / "vllm" / "v1" / "attention" / "backend.py").is_file():
            return root
    return None


def resolve(spec: str) -> Source:
    """A path to the file, to a vLLM tree or installed package, or a release version (``0.28.0`` or
    ``vllm==0.28.0``: one spelling everywhere)."""
    version = release_version(spec)
    if version is not None:
        path = fetch_release(version)
        return Source(f"vllm=={version}", path, path.read_text())
    p = Path(spec)
    if p.is_dir():
        for candidate in (p / RELATIVE_PATH, p / Path(*RELATIVE_PATH.parts[1:])):
            if candidate.is_file():
                p = candidate
                break
        else:
            raise SourceError(
                f"{spec}: no {RELATIVE_PATH} in this directory (a vLLM tree or installed vllm package)"
            )
    if not p.is_file():
        raise SourceError(f"{spec}: no such file, directory or vLLM release")
    try:
        return Source(str(p), p, p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"{spec}: cannot read: {e}") from None


def declared_env_default(envs_file: Path, name: str) -> Any:
    """The default a vLLM release declares for environment variable ``name``: the value of its annotated
    assignment in the ``if TYPE_CHECKING:`` block of ``vllm/envs.py`` (0.32.0 L149
    ``VLLM_ROCM_AITER_MLA_DCP_VERIFY: ... = "auto"``); KeyError where it declares none."""
    import ast

    tree = ast.parse(envs_file.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                target = getattr(stmt, "target", None)
                if isinstance(stmt, ast.AnnAssign) and getattr(target, "id", None) == name and stmt.value:
                    return ast.literal_eval(stmt.value)
    raise KeyError(name)


def dcp_verify_default(gate_file: Path) -> str | None:
    """``VLLM_ROCM_AITER_MLA_DCP_VERIFY``'s default as the vLLM tree around a gate file declares it (its
    vllm/envs.py, five folders up from vllm/v1/attention/backends/mla/rocm_aiter_mla.py; 0.31.0 L148
    ``segmented``, 0.32.0 L149 ``auto``); None where no such file declares it."""
    if len(gate_file.parents) <= 4:
        return None
    try:
        return str(declared_env_default(gate_file.parents[4] / "envs.py", "VLLM_ROCM_AITER_MLA_DCP_VERIFY"))
    except (OSError, KeyError, SyntaxError, ValueError):
        return None
