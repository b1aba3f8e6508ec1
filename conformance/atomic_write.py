"""Write generated files so that a reader sees the old content or the new, never a mix or a half.

A file is written beside its target and renamed over it.  A folder (``mla-spec
cases --out DIR``) is filled in a staging folder beside it, which then takes the
target's place in one exchange (``renameat2(RENAME_EXCHANGE)`` on Linux; two
renames elsewhere), so a run killed midway leaves the old folder whole, and what
an earlier run wrote that this run does not write is gone.  Because the whole
folder is replaced, a folder that holds anything the generator did not write
is refused, as are a symlink and a file where the folder should be.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path

# What `mla-spec cases` writes into a folder (and Python's bytecode cache beside it); a subfolder is a
# revision's folder of the same files.
GENERATED = ("cases.jsonl", "test_generated_*.py", "__pycache__")
_STAGING = ".staging-"


class Refused(ValueError):
    """A target this writer will not replace (one line, naming it)."""


def write_file(target: Path, text: str) -> None:
    """``text`` into ``target`` through a file beside it renamed into place; a symlink, a folder or a special
    file at ``target`` is refused."""
    check_target(target, folder=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}{_STAGING}{os.getpid()}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def replace_folder(target: Path, fill: Callable[[Path], list[Path]]) -> list[Path]:
    """Make ``target`` hold exactly what ``fill(staging)`` writes into an empty staging folder beside it; the
    paths written, as they are after the swap."""
    check_target(target, folder=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(target)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{_STAGING}{os.getpid()}-"))
    try:
        written = [target / p.relative_to(staging) for p in fill(staging)]
        os.chmod(staging, 0o777 & ~_umask())
        if target.exists():
            _exchange(staging, target)  # staging now holds the old content
            shutil.rmtree(staging)
        else:
            os.rename(staging, target)
        return written
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_target(target: Path, folder: bool) -> None:
    """Refuse (:class:`Refused`) a target this writer will not replace: a symlink; for a file, anything but
    a regular file; for a folder, a file, or a folder holding anything the generator does not write."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"--out {target} is a symbolic link; name the {'folder' if folder else 'file'} itself")
    if folder and not stat.S_ISDIR(st.st_mode):
        raise Refused(f"--out {target} is a file; the suite style writes a folder")
    if not folder and stat.S_ISDIR(st.st_mode):
        raise Refused(f"--out {target} is a folder; this style writes a file")
    if not folder and not stat.S_ISREG(st.st_mode):
        raise Refused(f"--out {target} is not a regular file")
    if folder:
        foreign = _not_generated(target)
        if foreign is not None:
            raise Refused(
                f"--out {target} holds {foreign.relative_to(target)}, which mla-spec cases did not write; "
                "name a new or empty folder, or one mla-spec cases wrote"
            )


def _not_generated(folder: Path, depth: int = 0) -> Path | None:
    """The first entry of ``folder`` that the generator does not write (None: all of it is ours)."""
    for entry in sorted(folder.iterdir()):
        if entry.name == "__pycache__" and entry.is_dir() and not entry.is_symlink():
            continue
        if entry.is_symlink():
            return entry
        if entry.is_dir():
            if depth > 0:
                return entry
            inner = _not_generated(entry, depth + 1)
            if inner is not None:
                return inner
        elif not any(fnmatch(entry.name, pattern) for pattern in GENERATED):
            return entry
    return None


def _remove_abandoned(target: Path) -> None:
    """Staging folders of runs killed before their swap (their process is gone)."""
    for leftover in target.parent.glob(f".{target.name}{_STAGING}*"):
        pid = leftover.name[len(f".{target.name}{_STAGING}") :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths in one step (Linux renameat2); elsewhere two renames (``b`` is briefly absent)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return
        err = ctypes.get_errno()
        if err not in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the file system cannot exchange
            raise OSError(err, os.strerror(err), str(b))
    aside = a.with_name(a.name + "-old")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
