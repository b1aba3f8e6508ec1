"""What a results file promises: the settings it was made with, one run writing it at a time, no other file.

The first line of a results file is its settings record (:func:`settings_record`):
the backend, the release (a version, or the digest of the ``rocm_aiter_mla.py``
run), the device, kv-len, full-context, fault, the DCP switches, the digest of
the bundled AITER registries and the mla-spec version.  Results follow, one
line per case (:class:`conformance.runner.ResultsLog`).  A run that resumes a
file with other settings is refused, naming what differs, so a file never mixes
two runs.

:func:`open_results` is how a run takes a results file: it refuses a symlink,
the cases file itself, a folder, a device and any file whose first line is not a
settings record (each left untouched), and holds an exclusive ``flock`` on it
for the run.  A process that writes results for a run whose lock another
process holds (conform's pytest child, an xdist worker) checks before each
write that the lock is still held and its parent is still there
(:class:`Writer`), so nothing writes the file after the run that owns it is
gone.

This module imports neither torch nor z3.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.metadata
import json
import os
import stat
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from mla_model.limits import MAX_LINE_BYTES, cut
from mla_model.registry import REGISTRY_IDS

FORMAT = "mla-spec conform results"
FORMAT_VERSION = 1
DEFAULT_KV_LEN = 256  # context tokens per request drawn from [1, kv_len] (exactly kv_len with full_context)
# Exit status of a writer that stops because the run owning the results file is gone (EX_TEMPFAIL + 1).
ORPHANED_EXIT = 76

# How each setting is spelt on conform's command line, for the one-line refusal of a resume.
_OPTION = {
    "backend": "--backend",
    "vllm": "--vllm",
    "device": "--device",
    "kv_len": "--kv-len",
    "full_context": "--full-context",
    "fault": "--fault",
    "dcp_ranks": "--dcp-ranks",
    "inject_fault": "--inject-fault",
    "registries": "the bundled AITER registries",
    "mla_spec": "the mla-spec version",
}


class Refused(ValueError):
    """A results file this run may not use (one line, naming it)."""


class Locked(Refused):
    """Another process holds the results file's lock."""


def run_settings(
    backend: str,
    device: str,
    fault: str | None = None,
    kv_len: int | None = None,
    full_context: bool = False,
    vllm: str | None = None,
    dcp_ranks: str | None = None,
    inject_fault: str | None = None,
) -> dict[str, Any]:
    """The settings that decide a case's result (not ``--workers``: how many run at once changes none)."""
    return {
        "backend": backend,
        "vllm": release_identity(vllm),
        "device": device,
        "kv_len": kv_len or DEFAULT_KV_LEN,
        "full_context": bool(full_context),
        "fault": fault,
        "dcp_ranks": dcp_ranks,
        "inject_fault": inject_fault,
        "registries": {
            r: _digest(resources.files("mla_model.registry_data").joinpath(f"{r}.toml").read_bytes())
            for r in REGISTRY_IDS
        },
        "mla_spec": _version(),
    }


def release_identity(vllm: str | None) -> str | None:
    """``--vllm`` as a results file records it: a version as given, a tree or file as its path and the sha256
    of the ``rocm_aiter_mla.py`` that runs (so an edited file is another run)."""
    if vllm is None:
        return None
    path = Path(vllm)
    if path.is_dir():
        from spec.realcode.source import RELATIVE_PATH  # torch- and z3-free

        path = path / RELATIVE_PATH
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            return f"{vllm} (sha256 {_digest(path.read_bytes())})"
    except OSError:
        pass
    return vllm


def settings_record(settings: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": FORMAT_VERSION, "settings": settings}


def is_settings_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and record.get("format") == FORMAT
        and isinstance(record.get("settings"), dict)
    )


def differences(made: dict[str, Any], asked: dict[str, Any]) -> list[str]:
    """``'--kv-len 16 (this run: 1000)'`` for each setting the file was made with that this run changes."""
    out = []
    for key in dict.fromkeys([*made, *asked]):
        if made.get(key) != asked.get(key):
            name = _OPTION.get(key, key)
            if key in ("registries", "mla_spec"):
                out.append(f"{name} changed")
            else:
                out.append(f"{name} {_shown(made.get(key))} (this run: {_shown(asked.get(key))})")
    return out


def open_results(out: Path, settings: dict[str, Any], cases: Path | None = None, what: str = "--out") -> int:
    """Take ``out`` for a run with ``settings``: a descriptor holding its exclusive lock (keep it open for the
    run).  A new or empty file gets the settings record as its first line; a results file of ours must have
    been made with the same settings.  Anything else is :class:`Refused` (and left as it was)."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise Refused(f"{what} {out} is a symbolic link; name the results file itself")
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{what} {out} is not a regular file; name a new file, or a results file to resume")
    try:
        fd = os.open(out, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Refused(f"{what} {out} is a symbolic link; name the results file itself") from None
        raise Refused(f"{what} {out}: cannot open it: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if cases is not None:
            c = os.stat(cases)
            if (c.st_dev, c.st_ino) == (st.st_dev, st.st_ino):
                raise Refused(f"{what} {out} is the cases file; name another file for the results")
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{what} {out} is not a regular file; name a new file, or a results file to resume")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Locked(
                f"{what} {out}: another mla-spec run is writing it; wait for that run or name another file"
            ) from None
        if st.st_size == 0:
            os.write(fd, (json.dumps(settings_record(settings)) + "\n").encode())
            return fd
        first = os.pread(fd, MAX_LINE_BYTES + 1, 0).split(b"\n", 1)
        try:
            record = json.loads(first[0]) if len(first) == 2 else None
        except ValueError:
            record = None
        if not is_settings_record(record):
            raise Refused(
                f"{what} {out} is not a results file of mla-spec conform (its first line is not the settings "
                "record); name a new or empty file"
            )
        changed = differences(record["settings"], settings)
        if changed:
            raise Refused(
                f"{what} {out} was made with other settings: {'; '.join(changed)}; rerun with its settings "
                "to resume, or name another file"
            )
        return fd
    except BaseException:
        os.close(fd)
        raise


def lock_held(path: Path) -> bool:
    """Whether some process holds an exclusive lock on ``path`` (conform, for the run it owns)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def lock_holder(path: Path) -> int | None:
    """The pid holding a ``flock`` on ``path`` (from ``/proc/locks``), or None where it cannot be told."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"  # as /proc/locks writes it
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == where:
            return int(parts[4])
    return None


class Writer:
    """Who writes a run's results: the run itself (it holds the lock) or a child of the process holding it,
    which stops (:data:`ORPHANED_EXIT`) before a write once that lock is released or its parent is gone."""

    def __init__(self, path: Path, owner_fd: int | None) -> None:
        self.path = path
        self.owner_fd = owner_fd  # the lock, when this process took it
        self.parent = os.getppid()

    def may_write(self) -> bool:
        return self.owner_fd is not None or (os.getppid() == self.parent and lock_held(self.path))

    def write(self, append: Callable[[], None]) -> None:
        if not self.may_write():
            os._exit(ORPHANED_EXIT)  # the run that owns the file is gone: write nothing more
        append()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _version() -> str:
    try:
        return importlib.metadata.version("mla-spec")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _shown(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "unset", True: "on", False: "off"}[value]
    text = str(value)
    return text if len(text) <= 80 else cut(text)
