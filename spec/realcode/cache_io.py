"""Writing the user cache (``$XDG_CACHE_HOME/mla-spec``, default ``~/.cache/mla-spec``) soundly.

Every writer of the cache goes through here, so that:

* a folder that cannot be written is named before any work starts (:func:`ensure_writable`);
* one process at a time fills an entry, the others wait and then read it (:func:`locked`, an ``flock`` on
  a ``.lock`` file in the entry's folder);
* an entry appears whole or not at all: it is written under a name unique to the process in the same
  folder, then renamed into place (:func:`write_bytes`, :func:`write_json`, and the release trees of
  :mod:`spec.realcode.source`); what a failed or interrupted write leaves is removed in ``finally``, and
  what a killed one left is swept by the next holder of the lock (:func:`sweep`);
* an entry that cannot be read (not UTF-8, truncated, not the shape its reader expects, a folder where a
  file belongs) reads as missing (:func:`read_json`), so its owner rebuilds it once; a rebuilt entry that
  still cannot be written is a :class:`CacheError` naming its path.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from spec.realcode.source import SourceError

# What a writer leaves while it works: swept by the next holder of the folder's lock.
STAGING_SUFFIX = ".partial"


class CacheError(SourceError):
    """The cache cannot be written or an entry of it cannot be rebuilt (one line naming the path)."""


def ensure_writable(folder: Path) -> None:
    """Create ``folder`` and prove a file can be made in it, or raise naming it (before any download)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".writable-")  # not swept: no STAGING_SUFFIX
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CacheError(f"the cache folder {folder} is not writable ({_why(folder, e)})") from None


def _why(folder: Path, e: OSError) -> str:
    """The reason, naming the file in the way where a path component is a file, not a folder."""
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        for p in (folder, *folder.parents):
            if p.exists() and not p.is_dir():
                return f"{p} is a file, not a folder"
    where = f"{e.filename}: " if e.filename and str(e.filename) != str(folder) else ""
    return f"{where}{e.strerror or e}"


@contextmanager
def locked(folder: Path, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold the exclusive lock of a cache folder, blocking until the holder before is done (``waiting``
    is called first where there is one)."""
    try:
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise CacheError(f"the cache folder {folder} is not writable ({_why(folder, e)})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def sweep(folder: Path) -> None:
    """Remove what an interrupted writer left in ``folder`` (call with the folder's lock held)."""
    for leftover in folder.glob(f"*{STAGING_SUFFIX}"):
        remove(leftover)


def remove(path: Path) -> None:
    """Remove a file, a link or a folder, whichever is there (nothing if nothing is)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(FileNotFoundError):
            path.unlink()


def staging_folder(folder: Path, name: str) -> Path:
    """A new empty folder in ``folder``, named for this process alone, to be renamed into place."""
    return Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}-", suffix=STAGING_SUFFIX))


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a file unique to this process in the same folder, renamed."""
    ensure_writable(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=STAGING_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise CacheError(f"cannot write the cache entry {path} ({e.strerror or e})") from None
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)


def write_json(path: Path, data: Any) -> None:
    write_bytes(path, json.dumps(data).encode())


def read_json(path: Path, valid: Callable[[Any], bool]) -> Any | None:
    """The entry at ``path``, or None where it is missing or cannot be read as the JSON ``valid`` accepts
    (its owner then rebuilds it and writes it again)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):  # missing, a folder, not UTF-8, truncated
        return None
    return data if valid(data) else None
