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
from dataclasses import dataclass
from pathlib import Path

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
        # A transient status on a terminal (nothing on a pipe, so an error stays one line).
        with Console(stderr=True).status(
            f"fetching the vLLM {version} sdist from PyPI (about 40-50 MB, once) into {root.parent}"
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        found = sorted(Path(tmp).glob(f"pip-*/vllm_*/{RELATIVE_PATH}")) or sorted(
            Path(tmp).rglob(str(RELATIVE_PATH))
        )
        if not found:
            if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
                raise SourceError(f"vLLM release {version} does not exist on PyPI")
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SourceError(f"could not fetch vLLM {version} from PyPI: {last}")
        copy_tree(found[0].parents[len(RELATIVE_PATH.parts) - 1], root)
    return root


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
