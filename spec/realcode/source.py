"""Find ``rocm_aiter_mla.py``: a file, a vLLM tree or installed package, or a release.

A release (``0.28.0``) is fetched from PyPI with pip into the user cache
(``$XDG_CACHE_HOME/mla-spec/vllm/<version>/rocm_aiter_mla.py``).  The sdist
(about 40 MB, against about 300 MB for a wheel) is enough: pip unpacks it,
fails at "Preparing metadata" because vLLM's build needs torch, and
``--no-clean`` keeps the unpacked tree, from which only this file is copied
(shared/reference/vllm_releases.md §6).  Nothing of vLLM is built, imported or
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


def is_release(spec: str) -> bool:
    return bool(_VERSION.match(spec)) and not Path(spec).exists()


def fetch_release(version: str) -> Path:
    """The release's rocm_aiter_mla.py, from the cache or downloaded once with pip."""
    target = cache_dir() / version / "rocm_aiter_mla.py"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="mla-spec-pip-") as tmp:
        env = dict(os.environ, TMPDIR=tmp, PIP_DISABLE_PIP_VERSION_CHECK="1")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--no-build-isolation", "--no-clean", f"vllm=={version}", "-d", os.path.join(tmp, "out")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        found = sorted(Path(tmp).glob(f"pip-*/vllm_*/{RELATIVE_PATH}")) or sorted(Path(tmp).rglob(str(RELATIVE_PATH)))
        if not found:
            if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
                raise SourceError(f"vLLM release {version} does not exist on PyPI")
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SourceError(f"could not fetch vLLM {version} from PyPI: {last}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found[0], target)
    return target


def resolve(spec: str) -> Source:
    """A path to the file, to a vLLM tree or installed package, or a release version."""
    if is_release(spec):
        path = fetch_release(spec)
        return Source(f"vllm=={spec}", path, path.read_text())
    p = Path(spec)
    if p.is_dir():
        for candidate in (p / RELATIVE_PATH, p / Path(*RELATIVE_PATH.parts[1:])):
            if candidate.is_file():
                p = candidate
                break
        else:
            raise SourceError(f"{spec}: no {RELATIVE_PATH} in this directory (a vLLM tree or installed vllm package)")
    if not p.is_file():
        raise SourceError(f"{spec}: no such file, directory or vLLM release")
    try:
        return Source(str(p), p, p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"{spec}: cannot read: {e}") from None
