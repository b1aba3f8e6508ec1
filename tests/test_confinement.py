"""A release file executed by bind (and the commands that share its harness) runs confined: a scratch
folder, only allow-listed variables, RLIMIT_AS and RLIMIT_CPU, ended at --timeout, and nothing of the run
(the child, a subprocess it starts, a process it forks) outlives mla-spec, whatever signal ends it."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.params import regular_and_slow

pytestmark = pytest.mark.network  # the 0.28.0 release tree, copied and edited

ROOT = Path(__file__).resolve().parent.parent
MLA_SPEC = [sys.executable, "-m", "conformance"]
RELEASE_FILE = Path("vllm/v1/attention/backends/mla/rocm_aiter_mla.py")
# Module-level code injected before the release's first import: record what the child sees, start a
# subprocess and a forked process, then loop for ever.
PROBE = """
import json as _j, os as _o, resource as _r, subprocess as _s, sys as _y, time as _t
from tests.params import regular_and_slow
_out = _o.environ.get("MLA_SPEC_TEST_PROBE")
if _out:
    _s.Popen([_y.executable, "-c", "import time\\nwhile True: time.sleep(0.2)"])
    if _o.fork() == 0:
        while True:
            _t.sleep(0.2)
    with open(_o.path.join(_out, "probe-%d.json" % _o.getpid()), "w") as _f:
        _j.dump({"env": dict(_o.environ), "cwd": _o.getcwd(), "as": _r.getrlimit(_r.RLIMIT_AS),
                 "cpu": _r.getrlimit(_r.RLIMIT_CPU)}, _f)
    while True:
        _t.sleep(0.01)
"""
ALLOWED_SEEN = {
    "PATH",
    "HOME",
    "TMPDIR",
    "PYTHONPATH",
    "PYTHONUSERBASE",
    "PYTHONDONTWRITEBYTECODE",
    "XDG_CACHE_HOME",
    "TRITON_CACHE_DIR",
    "OMP_NUM_THREADS",
    "LANG",
    "LANGUAGE",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    # set by the harness itself (harness.child_env), never taken from the caller: torch asks NVML, not
    # CUDA, whether a GPU is there; bytecode goes to mla-spec's cache where torch's site has none
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "PYTHONPYCACHEPREFIX",
}


@pytest.fixture(scope="module")
def looping_tree(tmp_path_factory):
    from spec.realcode.source import release_tree

    tree = tmp_path_factory.mktemp("looping") / "tree"
    shutil.copytree(release_tree("0.28.0") / "vllm", tree / "vllm")
    file = tree / RELEASE_FILE
    text = file.read_text()
    at = text.index("import functools")
    file.write_text(text[:at] + PROBE + text[at:])
    return tree


def _ours(token: str) -> list[int]:
    """The processes whose environment carries ``token`` (every process of one run: it is MLA_SPEC_*)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and f"MLA_SPEC_TEST_TOKEN={token}".encode() in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            pass
    return found


def _start(tree: Path, tmp_path: Path, timeout: str, secret: str = "") -> tuple[subprocess.Popen, str]:
    token = uuid.uuid4().hex
    env = dict(os.environ, MLA_SPEC_TEST_PROBE=str(tmp_path), MLA_SPEC_TEST_TOKEN=token)
    env.update(GITHUB_TOKEN=secret or "s3cret", PYTHONSTARTUP="/nonexistent", PYTHONPATH=str(ROOT))
    argv = [
        *MLA_SPEC,
        "bind",
        "--vllm",
        str(tree),
        "--revision",
        "vllm-0.28",
        "--no-symbolic",
        "--shapes",
        "1",
    ]
    proc = subprocess.Popen(
        [*argv, "--timeout", timeout],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal would have it
    )
    return proc, token


def _wait_for_probe(tmp_path: Path, proc: subprocess.Popen) -> dict:
    deadline = time.monotonic() + 180
    while not list(tmp_path.glob("probe-*.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.3)  # the file is written whole
    return json.loads(next(tmp_path.glob("probe-*.json")).read_text())


def _reap(token: str) -> None:
    for pid in _ours(token):
        os.kill(pid, signal.SIGKILL)


def test_the_child_sees_only_allowed_variables_a_scratch_folder_and_limits(looping_tree, tmp_path):
    proc, token = _start(looping_tree, tmp_path, "600")
    try:
        seen = _wait_for_probe(tmp_path, proc)
    finally:
        proc.kill()
        proc.communicate()
        _reap(token)
    extra = {
        k for k in seen["env"] if k not in ALLOWED_SEEN and not k.startswith(("LC_", "MLA_SPEC_", "NCCL_"))
    }
    assert not extra, extra  # GITHUB_TOKEN, PYTHONSTARTUP, the caller's PYTHONPATH: gone
    assert seen["env"]["PYTHONPATH"] == str(ROOT)
    cwd = Path(seen["cwd"])
    assert cwd != tmp_path and cwd.name.startswith("mla-spec-exec-")
    assert seen["env"]["HOME"] == seen["env"]["TMPDIR"] == seen["cwd"]
    assert seen["cpu"][0] != resource.RLIM_INFINITY and seen["as"][0] != resource.RLIM_INFINITY


@pytest.mark.slow  # 10 s (README command: issue 26's 3 minutes)
def test_a_module_level_loop_ends_at_the_timeout_with_one_line_and_nothing_left(looping_tree, tmp_path):
    proc, token = _start(looping_tree, tmp_path, "5")
    _wait_for_probe(tmp_path, proc)
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        _reap(token)
        pytest.fail("bind --timeout 5 still running 60 s after the release's module-level loop began")
    # the limit runs from the release's import (torch loaded): 5 s, and a little for the kill
    assert time.monotonic() - started < 15
    assert proc.returncode in (2, 3), err
    assert len(err.strip().splitlines()) == 1 and "ran past the 5 s limit (--timeout)" in err, err
    time.sleep(1)
    assert not _ours(token)


@pytest.mark.parametrize(
    "sig",
    regular_and_slow([signal.SIGINT, signal.SIGTERM, signal.SIGKILL], signal.SIGKILL, ids=lambda s: s.name),
)
def test_nothing_of_the_run_outlives_a_signal_to_mla_spec_alone(looping_tree, tmp_path, sig):
    """No process of the run, and not the child's scratch folder (was: left behind after SIGKILL and
    SIGTERM, the ``with`` block that removes it never ending)."""
    proc, token = _start(looping_tree, tmp_path, "600")
    scratch = Path(_wait_for_probe(tmp_path, proc)["cwd"])
    assert len(_ours(token)) >= 4  # mla-spec, the child, its subprocess, its forked process
    proc.send_signal(sig)
    sent = time.monotonic()
    while (_ours(token) or scratch.exists()) and time.monotonic() - sent < 5:
        time.sleep(0.05)
    left, kept = _ours(token), scratch.exists()
    proc.kill()  # if mla-spec itself did not end, the test ends it
    proc.communicate()
    _reap(token)
    shutil.rmtree(scratch, ignore_errors=True)
    assert not left, f"{len(left)} process(es) of the run left 5 s after {sig.name}"
    assert not kept, f"the child's scratch folder {scratch} left 5 s after {sig.name}"


def test_a_child_gets_the_folders_named_in_mla_spec_pythonpath_and_never_the_callers_pythonpath(monkeypatch):
    """A GPU machine without a registry installs AITER's Triton kernels with pip --target: the child finds
    them only where the user names the folder in MLA_SPEC_PYTHONPATH (the caller's PYTHONPATH is dropped)."""
    from spec.realcode.executed import confine

    monkeypatch.setenv("PYTHONPATH", "/from/the/callers/env")
    monkeypatch.setenv("MLA_SPEC_PYTHONPATH", "/tmp/site:/tmp/more")
    parts = confine.child_pythonpath().split(":")
    assert parts == [str(confine.PACKAGE_ROOT), "/tmp/site", "/tmp/more"]
    monkeypatch.delenv("MLA_SPEC_PYTHONPATH")
    assert confine.child_pythonpath() == str(confine.PACKAGE_ROOT)
