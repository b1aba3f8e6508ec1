"""Find ``rocm_aiter_mla.py``: a file, a vLLM tree or installed package, or a release.

A release (``0.28.0``) is fetched from PyPI with pip into the user cache
(``$XDG_CACHE_HOME/mla-spec/vllm/<version>/tree``, ``~/.cache`` when
``XDG_CACHE_HOME`` is unset).  The sdist (about 40-50 MB, against about 300 MB
for a wheel) is enough: pip unpacks it, fails at "Preparing metadata" because
vLLM's build needs more than is installed, and ``--no-clean`` keeps the
unpacked tree, from which the parts in ``_KEPT`` are copied (sources §15).
Nothing of vLLM is built, imported or installed.  The cache is written as
:mod:`spec.realcode.cache_io` says: checked writable first, one fetch of a
release at a time, the tree renamed into place whole.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
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
    """The cached tree of release ``version``, downloaded once with pip (see the module docstring).

    One process at a time fetches a release (a lock in its cache folder); the others wait, then read the
    tree it renamed into place.  A tree that cannot be used (:func:`_tree_problem`) is fetched again once;
    one still unusable after that is a :class:`~spec.realcode.cache_io.CacheError` naming its path."""
    from spec.realcode import cache_io  # it raises this module's SourceError

    folder = cache_dir() / version
    root = folder / "tree"
    if _tree_problem(root) is None:
        return root
    cache_io.ensure_writable(folder)
    with cache_io.locked(folder, lambda: _note(f"mla-spec: waiting for another fetch of vLLM {version}")):
        if _tree_problem(root) is None:  # fetched by another process while this one waited
            return root
        cache_io.sweep(folder)
        work = cache_io.staging_folder(folder, "download")  # pip's TMPDIR
        try:
            unpacked = _download(version, work, root)
            copy_tree(unpacked, root)
        finally:
            cache_io.remove(work)
    problem = _tree_problem(root)
    if problem is not None:
        raise cache_io.CacheError(f"{problem}, even as downloaded just now (vLLM {version})")
    return root


def _note(line: str) -> None:
    """A line on stderr where it is a terminal (never in a log, so an error stays one line)."""
    console = Console(stderr=True)
    if console.is_terminal:
        console.print(line, highlight=False)


def _tree_problem(root: Path) -> str | None:
    """Why the cached tree at ``root`` cannot be used, naming the path; None when it can."""
    file = root / RELATIVE_PATH
    if not root.is_dir():
        return f"{root} is not a folder" if root.exists() or root.is_symlink() else f"{root} is missing"
    try:
        file.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return f"{root} has no {RELATIVE_PATH}"
    except UnicodeDecodeError:
        return f"{file} is not UTF-8 text"
    except OSError as e:
        return f"{file}: {e.strerror or e}"
    return None


def _download(version: str, work: Path, root: Path) -> Path:
    """Download and unpack release ``version``'s sdist with pip into ``work``; the unpacked tree."""
    env = dict(os.environ, TMPDIR=str(work), PIP_DISABLE_PIP_VERSION_CHECK="1")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--no-build-isolation", "--no-clean", f"vllm=={version}", "-d", str(work / "out")]
    output = _download_with_progress(cmd, env, work, f"vLLM {version} sdist", root)
    # pip has exited: nothing changes under ``work`` any more.
    unpacked = sorted(work.glob("pip-*/*/PKG-INFO"))  # pip-download-*/vllm_<id>: the one sdist (--no-deps)
    if not unpacked:
        raise SourceError(pip_failure(output, f"vLLM {version}", f"vLLM release {version} does not exist"))
    tree = unpacked[0].parent
    if not (tree / RELATIVE_PATH).is_file():
        raise SourceError(f"vLLM release {version} has no {RELATIVE_PATH}")
    return tree


_FOUND = re.compile(r"Could not find a version that satisfies the requirement \S+ \(from versions: ([^)]*)\)")
_BROKEN = re.compile(r"connection broken by '(.+)': |(ReadTimeoutError|ProtocolError|IncompleteRead)\W.*")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)|(certificate verify failed[^'\")]*)|(Read timed out)")


def pip_failure(output: str, label: str, missing: str) -> str:
    """One line for a pip download that brought nothing: PyPI could not be reached (pip listed no version
    at all, or its connection broke), ``missing`` (pip listed the versions there are, and not this one),
    or pip's last error line."""
    broken = [m.group(1) or m.group(0) for m in _BROKEN.finditer(output)]
    found = _FOUND.search(output)
    if broken or (found and found.group(1).strip() == "none"):
        if not broken:
            return "cannot reach PyPI: pip listed no versions at all (from versions: none)"
        reason = _ERRNO.search(broken[-1])
        why = next(g for g in reason.groups() if g) if reason else broken[-1][:160]
        if "ProxyError" in broken[-1]:
            return f"cannot reach PyPI: cannot connect to the proxy ({why.strip()})"
        return f"cannot reach PyPI: {why.strip()}"
    if found:
        return f"{missing} on PyPI"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if line.lower().startswith("error")), None)
    return f"could not fetch {label} from PyPI: {last or (lines or ['pip said nothing'])[-1]}"


_SIZE = re.compile(r"Downloading (\S+) \(([\d.]+) (kB|MB|GB)\)")
_UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}
_PIP_LIMIT_S = 900


def _download_with_progress(cmd: list[str], env: dict[str, str], tmp: Path, what: str, cache: Path) -> str:
    """Run pip, showing on stderr where the download is cached and a progress bar: the size pip announces,
    and the size of the one file it downloads into (``pip-unpack-*/<name>`` under its TMPDIR ``tmp``).
    Both are drawn on a terminal only (the bar is transient), so nothing is left in a log and an error
    stays one line.  pip is stopped if this is interrupted.  Returns pip's output."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    lines: list[str] = []
    pipe, merged, death = subprocess.PIPE, subprocess.STDOUT, _die_with_parent()
    proc = subprocess.Popen(cmd, stdout=pipe, stderr=merged, text=True, env=env, preexec_fn=death)
    try:
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        console = Console(stderr=True)
        _note(f"mla-spec: fetching the {what} from PyPI once; cached in {cache}")
        columns = (TextColumn(what), BarColumn(), DownloadColumn(), TransferSpeedColumn())
        with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task("download", total=None)
            deadline, written = time.monotonic() + _PIP_LIMIT_S, 0
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    proc.kill()
                    lines.append(f"ERROR: pip did not finish in {_PIP_LIMIT_S} s")
                    break
                announced = next((m for m in map(_SIZE.search, list(lines)) if m), None)
                if announced:
                    total = float(announced.group(2)) * _UNITS[announced.group(3)]
                    written = max(written, _downloaded(tmp, announced.group(1).rsplit("/", 1)[-1]))
                    progress.update(task, total=total, completed=min(written, total))
                time.sleep(0.2)
            proc.wait()
        reader.join(timeout=5)
    finally:
        if proc.poll() is None:  # interrupted: pip must not go on writing
            proc.kill()
            proc.wait()
    return "".join(lines)


def _die_with_parent() -> Callable[[], object] | None:
    """For pip's process, before it starts: have it SIGKILLed when this process dies (Linux's
    PR_SET_PDEATHSIG), so a killed fetch leaves no pip writing into the cache folder.  Looked up here, in
    the parent: the child only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None
    return lambda: prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def _downloaded(tmp: Path, name: str) -> int:
    """The size of the file pip is downloading (0 before it starts and once it is unpacked)."""
    try:
        with os.scandir(tmp) as entries:
            for entry in entries:
                if entry.name.startswith("pip-unpack"):
                    with suppress(OSError):
                        return os.stat(os.path.join(entry.path, name)).st_size
    except OSError:  # pip removed it meanwhile
        pass
    return 0


def copy_tree(unpacked: Path, root: Path) -> None:
    """Copy the kept parts of an unpacked sdist to ``root``, atomically: into a staging folder unique to
    this process, renamed into place (a partial copy is never seen, and is removed if the copy fails);
    what was at ``root`` is first renamed aside, then removed."""
    from spec.realcode import cache_io

    staging = cache_io.staging_folder(root.parent, root.name)
    try:
        for pattern in _KEPT:
            for f in unpacked.glob(pattern):
                if f.is_file():
                    target = staging / f.relative_to(unpacked)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, target)
        if root.exists() or root.is_symlink():
            old = cache_io.staging_folder(root.parent, f"{root.name}-old")
            os.replace(root, old / root.name)
            cache_io.remove(old)
        staging.chmod(0o755)  # readable as a folder made by mkdir is (a staging folder is made private)
        staging.rename(root)
    finally:
        cache_io.remove(staging)


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


def tree_env_default(gate_file: Path, name: str) -> Any:
    """Environment variable ``name``'s default as the vLLM tree around a gate file declares it (its
    vllm/envs.py, five folders up from vllm/v1/attention/backends/mla/rocm_aiter_mla.py); None where no
    such file declares it."""
    if len(gate_file.parents) <= 4:
        return None
    try:
        return declared_env_default(gate_file.parents[4] / "envs.py", name)
    except (OSError, KeyError, SyntaxError, ValueError):
        return None


def dcp_verify_default(gate_file: Path) -> str | None:
    """``VLLM_ROCM_AITER_MLA_DCP_VERIFY``'s declared default (0.31.0 L148 ``segmented``, 0.32.0 L149
    ``auto``); None where no vllm/envs.py around the file declares it."""
    value = tree_env_default(gate_file, "VLLM_ROCM_AITER_MLA_DCP_VERIFY")
    return None if value is None else str(value)
