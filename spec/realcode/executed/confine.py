"""Run a child that executes a vLLM release file: a scratch folder, an allow-listed environment, limits,
the user's timeout, its own process group, and death with its parent.

A ``rocm_aiter_mla.py`` runs its module-level code when it is imported, and the
pre-commit hook and the Action hand mla-spec a pull request's file, so every
command that imports or runs a release (bind, audit's executed row, check's
executed threshold, vllm-tests, conform's pytest and its vllm backend, mutate)
starts its child through :class:`Child` or :func:`run`:

* **Working folder**: a fresh scratch folder, which is also its ``HOME`` and
  ``TMPDIR``, so nothing it reads or writes by a relative name is the user's.
* **Environment**: only :data:`ALLOWED` (names) and :data:`ALLOWED_PREFIXES`
  pass from the caller's; everything else (tokens, ``PYTHONPATH``,
  ``PYTHONSTARTUP``, ``LD_PRELOAD``, ``PYTEST_ADDOPTS``, ``VLLM_*``, ``AITER_*``)
  is dropped.  We then set ``HOME``/``TMPDIR`` (the scratch folder),
  ``PYTHONPATH`` (this package's root), ``PYTHONUSERBASE`` and
  ``XDG_CACHE_HOME``/``TRITON_CACHE_DIR`` (the caller's, so a ``pip install
  --user`` and the release and kernel caches still resolve with ``HOME``
  moved), ``PYTHONDONTWRITEBYTECODE=1`` (or, where torch has no bytecode, ``PYTHONPYCACHEPREFIX``:
  :func:`bytecode_prefix`), and what the caller adds (a rank's
  ``RANK``/``MASTER_PORT``, ``OMP_NUM_THREADS``).
* **Limits**: ``RLIMIT_CPU`` (:data:`CPU_SECONDS` of CPU per process, then
  SIGXCPU) and ``RLIMIT_AS`` (the machine's memory plus swap: no child can
  need more address space than the machine can back).  On a GPU
  (``device`` ``cuda``, or ``auto`` with a GPU device node present) there is
  no ``RLIMIT_AS``: the CUDA and ROCm runtimes reserve a virtual range the size
  of all host and device memory when they start, far past any such limit, and
  fail under one.
* **Timeout**: :func:`run` kills the child's whole process group when a step
  runs past ``timeout`` seconds.  The executed children :func:`beat` when a
  step ends (torch loaded, the release imported, each shape), so
  ``--timeout`` bounds the release's import and each shape, not the whole
  run; only as many beats count as the request has steps, so code that beats
  in a loop gains nothing.  The child's start, up to its first beat (an
  interpreter and torch: our code, none of the release's), may take
  :data:`START_S` where that is longer: on two loaded cores importing torch
  alone took more than 5 s (``bind --timeout 5`` then failed "on its start").
  Commands whose ``--timeout`` bounds the executed code set it with
  :func:`set_time_limit`.
* **Process group**: the child starts a session of its own
  (``start_new_session``), so a terminal's SIGINT reaches only mla-spec, which
  then ends the group itself.  Every exit from :func:`run` or a ``with``
  :class:`Child` block kills the group (SIGKILL), so no grandchild (a forked
  worker, a pytest-xdist worker) outlives it; so do SIGINT and SIGTERM (a
  handler that kills the groups, then does what the signal did before) and
  interpreter exit.
* **Death with its parent**: the child asks the kernel for SIGKILL when its
  parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``, set between fork and exec;
  a child forked inside calls :func:`die_with_parent`).  The signal follows
  the *thread* that started the child, so a child is started from a thread
  that waits for it.  What the child started itself (a subprocess, a
  pytest-xdist worker) has no such request, so each child also has a
  watchdog: a small process of ours (:data:`WATCHDOG`) that reads a pipe
  from mla-spec and, when the pipe closes without a word (mla-spec died, even
  by SIGKILL), kills the child's whole group, then removes the child's
  scratch folder (the caller's ``with`` block that would have removed it
  never ends).  Only a folder that :func:`tempfile.mkdtemp` made is removed
  (:func:`scratch_folder`): one directly in the temporary folder, the
  user's own, mode 0700; any other working folder is left alone.

The confinement bounds what a release's code can make mla-spec do by accident
or on purpose through its process (hang, spin, leak the caller's secrets, read
the caller's folders by relative path, outlive the run); it is not a
filesystem sandbox: the child runs as the user.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import resource
import select
import signal
import site
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# The caller's variables a child sees (exact names), and the prefixes that pass: the locale, the devices it
# may use and the NCCL fabric settings of a multi-GPU rendezvous, the dynamic linker's search path (the CUDA
# and ROCm runtimes' libraries), the caches, and mla-spec's own switches.
ALLOWED = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "XDG_CACHE_HOME",
    "TRITON_CACHE_DIR",
)
ALLOWED_PREFIXES = ("LC_", "MLA_SPEC_", "NCCL_")
HEARTBEAT_ENV = "MLA_SPEC_HEARTBEAT_FD"
PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # the folder that holds spec/, conformance/, mla_model/
CPU_SECONDS = 12 * 3600  # RLIMIT_CPU per process: far past any run measured (minutes), a stop for a spinner
DEFAULT_TIME_LIMIT = 1800.0  # seconds a child may stay quiet, where no command set --timeout
START_S = 120.0  # seconds a child that beats may take to its first beat (torch loaded), at least
KILL_GRACE_S = 5  # RLIMIT_CPU's hard limit past the soft one (SIGXCPU, then SIGKILL)
_PR_SET_PDEATHSIG = 1
# The watchdog (python -I -S -c WATCHDOG PGID [SCRATCH]): mla-spec holds the write end of its stdin.  A byte
# means the child ended and its group was killed (exit quietly); end of file without one means mla-spec
# died: kill the group, wait for it to go, and remove the scratch folder (again while a process of another
# group sharing it, a DCP rank, still writes there).
WATCHDOG = """
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
word = b''
try:
    word = os.read(0, 1)
except OSError:
    pass
if not word:
    group = int(sys.argv[1])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            break
        time.sleep(0.05)
    for _ in range(20):
        if len(sys.argv) < 3 or not os.path.lexists(sys.argv[2]):
            break
        shutil.rmtree(sys.argv[2], ignore_errors=True)
        time.sleep(0.1)
"""

_time_limit = DEFAULT_TIME_LIMIT
_live: dict[int, Child] = {}  # pid -> the children started and not yet ended
_live_lock = threading.RLock()  # re-entrant: a signal handler may run while the main thread holds it


def set_time_limit(seconds: float) -> None:
    """How long an executed child may stay quiet (its import, one shape) before it is killed: the
    ``--timeout`` of the command that executes it."""
    global _time_limit
    _time_limit = float(seconds)


def time_limit() -> float:
    return _time_limit


EXTRA_PATH_ENV = "MLA_SPEC_PYTHONPATH"


def child_pythonpath() -> str:
    """The child's ``PYTHONPATH``: this package's root, then the folders the user names in
    :data:`EXTRA_PATH_ENV` (say, AITER's Triton kernels unpacked with ``pip install --target`` on a GPU
    machine without a registry).  The caller's own ``PYTHONPATH`` never passes: a path into a child is
    asked for by name, as every other variable is."""
    extra = os.environ.get(EXTRA_PATH_ENV, "")
    return os.pathsep.join([str(PACKAGE_ROOT), *(p for p in extra.split(os.pathsep) if p)])


def allowed_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's variables a child may see (:data:`ALLOWED`, :data:`ALLOWED_PREFIXES`) and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k in ALLOWED or k.startswith(ALLOWED_PREFIXES)}
    env.pop(HEARTBEAT_ENV, None)  # a nested child beats to its own parent, never to ours
    env.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    env.setdefault("TRITON_CACHE_DIR", str(Path.home() / ".triton" / "cache"))
    env["PYTHONUSERBASE"] = site.getuserbase()
    prefix = bytecode_prefix(Path(env["XDG_CACHE_HOME"]))
    if prefix is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    env.update(extra or {})
    return env


def bytecode_prefix(cache: Path) -> Path | None:
    """Where the children keep bytecode, when torch's own is missing (a read-only or ``--no-compile``
    install, as on the H200 acceptance machine); else None, and children write no bytecode.

    Without bytecode every child compiles torch's ~1,100 modules from source: 2.1 s of a child's 5.5 s
    start on that machine (cProfile of one harness child, 2026-12-04).  With a prefix only the first child
    does; the folder is the mla-spec cache's, never beside the sources.  It gives the children nothing
    they lack: they run with the user's own file rights (this module bounds time, memory and the
    environment, not files)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    source = Path(spec.origin)  # the bytecode beside it, whatever prefix this process itself reads under
    if (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").exists():
        return None
    return cache / "mla-spec" / "bytecode" / sys.implementation.cache_tag


def address_space_limit(device: str) -> int | None:
    """RLIMIT_AS for a child on ``device``: none on a GPU (see the module), else memory plus swap."""
    if device.startswith("cuda") or (device == "auto" and _gpu_present()):
        return None
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        kib = int(fields["MemTotal"].split()[0]) + int(fields.get("SwapTotal", "0 kB").split()[0])
    except (OSError, KeyError, ValueError):
        return None
    return max(kib * 1024, 4 << 30)


def _gpu_present() -> bool:
    return Path("/dev/kfd").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def die_with_parent(parent: int) -> None:
    """This process gets SIGKILL when its parent dies; if ``parent`` is already gone, exit now."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(137)


def beat() -> None:
    """Tell the parent this child finished a step (its time limit starts again); a no-op outside one."""
    fd, _, inode = os.environ.get(HEARTBEAT_ENV, "").partition(":")
    try:  # the variable passes to grandchildren, the pipe not: never write into another file of that number
        if os.fstat(int(fd)).st_ino == int(inode):
            os.write(int(fd), b".")
    except (OSError, ValueError):  # no pipe here, or it is full (the parent is reading) or gone
        pass


def _limiter(parent: int, address_space: int | None, cpu_seconds: int) -> Callable[[], None]:
    """The function the child runs between fork and exec: death with the parent, then the limits."""

    def limit(which: int, soft: int, hard: int) -> None:
        cur_hard = resource.getrlimit(which)[1]
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(which, (soft, hard))

    def pre_exec() -> None:
        die_with_parent(parent)
        limit(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + KILL_GRACE_S)
        if address_space is not None:
            limit(resource.RLIMIT_AS, address_space, address_space)

    return pre_exec


class Child:
    """A confined child process (see the module); ``with Child(...) as c:`` kills its group on the way out.

    ``stdin``/``stdout``/``stderr`` are open files (never pipes: a grandchild holding a pipe open would
    keep a reader waiting after the child ended).  ``heartbeat`` gives the child a pipe to :func:`beat` on.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: dict[str, str],
        device: str = "cpu",
        stdin: IO[Any] | int | None = None,
        stdout: IO[Any] | int | None = None,
        stderr: IO[Any] | int | None = None,
        heartbeat: bool = False,
        cpu_seconds: int = CPU_SECONDS,
    ) -> None:
        import subprocess

        env = dict(env)
        env.update(HOME=str(cwd), TMPDIR=str(cwd), PYTHONPATH=child_pythonpath())
        env.pop(HEARTBEAT_ENV, None)
        _install_handlers()
        self._beat_fd: int | None = None
        pass_fds: tuple[int, ...] = ()
        if heartbeat:
            self._beat_fd, write_end = os.pipe()
            os.set_blocking(write_end, False)
            os.set_blocking(self._beat_fd, False)
            env[HEARTBEAT_ENV] = f"{write_end}:{os.fstat(write_end).st_ino}"
            pass_fds = (write_end,)
        try:
            self.proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                pass_fds=pass_fds,
                start_new_session=True,
                preexec_fn=_limiter(os.getpid(), address_space_limit(device), cpu_seconds),
            )
            with _live_lock:
                _live[self.proc.pid] = self
        except BaseException:
            if self._beat_fd is not None:
                os.close(self._beat_fd)
            raise
        finally:
            for fd in pass_fds:
                os.close(fd)
        self.pid = self.proc.pid
        self.returncode: int | None = None
        self.watchdog, self._watch_fd = _watchdog(self.pid, scratch_folder(cwd))
        self.pidfd: int | None = None  # readable once the child ends (Linux 5.3 on), so no polling delay
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            pass

    def poll(self) -> int | None:
        """The child's exit status once it ended (its group is then killed: nothing it started stays)."""
        if self.returncode is not None:
            return self.returncode
        try:  # look without reaping: while unreaped, its pid (the group's id) cannot be reused
            if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                return None
        except ChildProcessError:  # reaped already
            pass
        self.kill()
        return self.returncode

    def wait_for_exit(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the child to end (or for a beat, or a signal); True once it ended."""
        watched = [fd for fd in (self._beat_fd, self.pidfd, _wakeup) if fd is not None]
        if _wakeup in select.select(watched, [], [], seconds)[0]:
            _signalled()
        return self.poll() is not None

    def drain_beats(self) -> int:
        """How many times the child beat since the last call."""
        got = 0
        while self._beat_fd is not None:
            try:
                chunk = os.read(self._beat_fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            got += len(chunk)
        return got

    def kill(self) -> None:
        """SIGKILL the child's whole process group, then reap the child."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.returncode = self.proc.wait()
        if self._watch_fd is not None:  # the group is gone: tell the watchdog so, and let it end
            try:
                os.write(self._watch_fd, b"x")
            except OSError:
                pass
            os.close(self._watch_fd)
            self._watch_fd = None
            if self.watchdog is not None:
                self.watchdog.wait()
        with _live_lock:
            _live.pop(self.pid, None)
        for fd in (self._beat_fd, self.pidfd):
            if fd is not None:
                os.close(fd)
        self._beat_fd = self.pidfd = None

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.returncode is None:
            self.kill()


def scratch_folder(cwd: str | Path) -> Path | None:
    """``cwd`` if :func:`tempfile.mkdtemp` made it (directly in the temporary folder, ours, mode 0700): the
    scratch folder a watchdog removes once mla-spec died; else None (a folder the caller named stays)."""
    try:
        folder = Path(cwd).resolve(strict=True)
        st = folder.stat()
    except (OSError, RuntimeError):
        return None
    made_by_mkdtemp = st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700
    in_tmp = folder.parent == Path(tempfile.gettempdir()).resolve()
    return folder if made_by_mkdtemp and in_tmp and folder.is_dir() else None


def _watchdog(pgid: int, scratch: Path | None) -> tuple[Any, int | None]:
    """The watchdog of group ``pgid`` and folder ``scratch`` (see :data:`WATCHDOG`) and the write end of its
    pipe."""
    import subprocess

    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", WATCHDOG, str(pgid), *([str(scratch)] if scratch else [])],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={},
            start_new_session=True,  # a terminal's SIGINT is mla-spec's to handle, not the watchdog's
        )
    except OSError:
        os.close(write_end)
        return None, None
    finally:
        os.close(read_end)
    os.set_inheritable(write_end, False)
    return proc, write_end


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool  # killed at its time limit
    beats: int  # how many times the child beat


def run(
    argv: Sequence[str],
    *,
    input: str,
    cwd: str | Path,
    env: dict[str, str],
    timeout: float | None = None,
    steps: int = 0,
    device: str = "cpu",
) -> Completed:
    """Run ``argv`` confined in ``cwd`` with ``input`` on stdin, for at most ``timeout`` seconds (default
    :func:`time_limit`) per step: each of the child's first ``steps`` beats starts its limit again (later
    ones do not, so a child that beats in a loop still ends); where it has steps, its start may take
    :data:`START_S`.  Its group is killed either way."""
    timeout = _time_limit if timeout is None else timeout
    return _run(argv, input, cwd, env, timeout, steps, device)


def _run(
    argv: Sequence[str],
    input: str,
    cwd: str | Path,
    env: dict[str, str],
    timeout: float,
    steps: int,
    device: str,
) -> Completed:
    files = [tempfile.TemporaryFile() for _ in range(3)]
    stdin, stdout, stderr = files
    try:
        stdin.write(input.encode())
        stdin.seek(0)
        with Child(
            argv, cwd=cwd, env=env, device=device, stdin=stdin, stdout=stdout, stderr=stderr, heartbeat=True
        ) as child:
            timed_out, beats = False, 0
            deadline = time.monotonic() + (max(timeout, START_S) if steps else timeout)
            while not child.wait_for_exit(max(0.0, min(0.2, deadline - time.monotonic()))):
                got = child.drain_beats()
                if got and beats < steps:
                    deadline = time.monotonic() + timeout
                beats += got
                if time.monotonic() > deadline:
                    child.kill()
                    timed_out = True
                    break
            beats += child.drain_beats()
        outs = []
        for f in (stdout, stderr):
            f.seek(0)
            outs.append(f.read().decode(errors="replace"))
        code = child.returncode if child.returncode is not None else -1
        return Completed(code, outs[0], outs[1], timed_out, beats)
    finally:
        for f in files:
            f.close()


def kill_all() -> None:
    """Kill every confined child still running (and everything in their groups)."""
    with _live_lock:
        children = list(_live.values())
    for child in children:
        try:
            os.killpg(child.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _signalled() -> None:
    """The signal wakeup pipe is readable (see :func:`_install_handlers`): on SIGINT or SIGTERM, end the
    children from here, whichever thread this is."""
    try:
        got = os.read(_wakeup, 512) if _wakeup is not None else b""
    except BlockingIOError:
        return
    if signal.SIGINT in got or signal.SIGTERM in got:
        global _stopping
        _stopping = True
        kill_all()


def _on_signal(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM: the children first, then what the signal did before (KeyboardInterrupt, the end)."""
    global _stopping
    _stopping = True
    kill_all()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_handlers_installed = False
_wakeup: int | None = None  # read end of the signal wakeup pipe
_stopping = False  # a signal arrived: no child starts any more (a worker thread may still try)
_previous: dict[int, Any] = {}


def _install_handlers() -> None:
    """Once per process, from the main thread (signal handlers can be set nowhere else): SIGINT, SIGTERM
    and interpreter exit end the children first.  A handler installed later (a command's own) replaces
    ours; the children then go when their ``with`` block or :func:`run` unwinds, or at exit."""
    global _handlers_installed, _wakeup
    if _stopping:
        raise ChildProcessError("not started: mla-spec is ending on a signal")
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    atexit.register(kill_all)
    # Python runs a signal's handler on the main thread, and only once that thread runs: one waiting on a
    # lock (a future's result, while a worker thread waits on the child) may not wake while a library (z3)
    # has set SA_RESTART.  The C handler also writes the signal's number to this pipe at once, and every
    # thread waiting on a child watches it.
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    their_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if their_fd == -1:
        _wakeup = read_end
    else:  # someone else's (an event loop's): leave it theirs
        signal.set_wakeup_fd(their_fd)
        os.close(read_end)
        os.close(write_end)
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN and handler is not None:
            _previous[signum] = handler
            signal.signal(signum, _on_signal)


def _forget() -> None:
    """In a process forked from this one (a multiprocessing worker, a harness worker): the children, the
    signal handlers and the wakeup pipe are the parent's, never this process's to act on."""
    global _handlers_installed, _wakeup, _stopping
    _live.clear()
    if _handlers_installed and _wakeup is not None:
        signal.set_wakeup_fd(-1)
    for signum, handler in _previous.items():
        signal.signal(signum, handler)
    _previous.clear()
    _handlers_installed, _wakeup, _stopping = False, None, False


os.register_at_fork(after_in_child=_forget)
_install_handlers()  # at import, normally on the main thread: children started from worker threads count too
