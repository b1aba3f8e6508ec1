"""A results file keeps its word: its settings first, one run at a time, no other file touched, none lost.

conform runs here for real on the model backend (CPU torch, kv-len 8, single-request cases of
tests/generated/), its pytest child a real process: the refusals never start it, the resumes start it once.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mla_model.case import read_cases, write_cases
from tests.cli import run
from tests.params import regular_and_slow

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "tests" / "generated"


def _cases(n: int, path: Path) -> Path:
    """``n`` single-request cases of vllm-0.28 and vllm-0.34 (PASS or NO_KERNEL on the model backend)."""
    found = [c for rev in ("vllm_028", "vllm_034") for c in read_cases(GENERATED / rev / "cases.jsonl")]
    write_cases([c for c in found if c.shape.num_reqs == 1][:n], path)
    return path


def _conform(cases: Path, out: Path, *extra: str) -> list[str]:
    return ["conform", "--backend", "model", "--cases", str(cases), "--out", str(out), "--device", "cpu"] + [
        *(extra or ("--kv-len", "8"))
    ]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """Three cases run once: the cases file and its results file."""
    folder = tmp_path_factory.mktemp("first")
    cases, out = _cases(3, folder / "cases.jsonl"), folder / "results.jsonl"
    done = run(*_conform(cases, out))
    assert done.returncode == 0, done.stderr
    return cases, out


@pytest.fixture
def copied(first_run, tmp_path):
    cases, out = first_run
    shutil.copy(cases, tmp_path / "cases.jsonl")
    shutil.copy(out, tmp_path / "results.jsonl")
    return tmp_path / "cases.jsonl", tmp_path / "results.jsonl"


def _one_line_exit_2(out: subprocess.CompletedProcess, needle: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("mla-spec: error: ") and needle in lines[0], lines[0]


def test_the_first_record_carries_the_run_settings(first_run):
    _, out = first_run
    settings, *records = _lines(out)
    s = settings["settings"]
    assert (s["backend"], s["device"], s["kv_len"], s["full_context"], s["fault"]) == (
        "model",
        "cpu",
        8,
        False,
        None,
    )
    assert set(s["registries"]) == {"aiter-0.1.19", "aiter-0.1.20"} and s["mla_spec"]
    assert len(records) == 3 and all("status" in r for r in records)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (
            ("--kv-len", "1000", "--full-context"),
            "--kv-len 8 (this run: 1000); --full-context off (this run: on)",
        ),
        (
            ("--kv-len", "8", "--fault", "metadata-short-qlen"),
            "--fault unset (this run: metadata-short-qlen)",
        ),
    ],
)
def test_a_resume_with_other_settings_is_refused_naming_the_difference(copied, extra, needle):
    """Was: a file made at kv-len 8 taken as done by a kv-len 1000 full-context run (its old statuses)."""
    cases, out = copied
    before = out.read_bytes()
    _one_line_exit_2(run(*_conform(cases, out, *extra)), needle)
    assert out.read_bytes() == before


@pytest.mark.parametrize("kind", ["symlink", "the cases file", "a text file", "results without settings"])
def test_out_must_be_new_empty_or_a_results_file_of_ours(copied, tmp_path, kind):
    """Was: a text file lost its last line, the cases file was ruined, a symlink's target appended to."""
    cases, results = copied
    target = {"symlink": results, "the cases file": cases, "a text file": tmp_path / "notes.txt"}.get(
        kind, tmp_path / "old.jsonl"
    )
    if kind == "a text file":
        target.write_text("my notes\nthe last line")
    if kind == "results without settings":
        target.write_text("".join(json.dumps(r) + "\n" for r in _lines(results)[1:2]))
    out = target
    if kind == "symlink":
        out = tmp_path / "link.jsonl"
        out.symlink_to(target)
    before = target.read_bytes()
    needle = {"symlink": "symbolic link", "the cases file": "is the cases file"}.get(
        kind, "not a results file"
    )
    _one_line_exit_2(run(*_conform(cases, out)), needle)
    assert target.read_bytes() == before


@pytest.mark.parametrize("kind", ["symlink", "hard link"])
def test_a_link_planted_at_the_pytest_log_is_refused_and_its_target_untouched(copied, tmp_path, kind):
    """Was: conform opened ``<out>.pytest.log`` following a symlink and appended pytest's output to the
    link's target (a file of the user's, say ~/.bashrc)."""
    cases, out = copied
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    log = out.with_suffix(".pytest.log")
    log.symlink_to(victim) if kind == "symlink" else os.link(victim, log)
    before = out.read_bytes()
    _one_line_exit_2(run(*_conform(cases, out)), f"pytest log {log} is")
    assert victim.read_text() == "the user's file\n" and out.read_bytes() == before


def test_a_second_run_on_one_out_is_refused_while_the_first_holds_it(copied):
    """Was: two runs on one --out ran every case twice."""
    cases, out = copied
    before = out.read_bytes()
    with open(out) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running conform holds it
        _one_line_exit_2(run(*_conform(cases, out)), "another mla-spec run is writing it")
    assert out.read_bytes() == before


def test_an_error_record_is_run_again_on_resume(copied):
    """ERROR is our harness failing: the resume runs the case again (SKIP and every other verdict stand)."""
    cases, out = copied
    settings, *records = _lines(out)
    errored = {**records[1], "status": "ERROR", "detail": "the pytest child was killed by SIGKILL"}
    out.write_text("".join(json.dumps(r) + "\n" for r in [settings, *records, errored]))
    done = run(*_conform(cases, out))
    assert done.returncode == 0, done.stdout + done.stderr
    latest = {r["key"]: r for r in _lines(out)[1:]}
    assert latest[errored["key"]]["status"] in ("PASS", "NO_KERNEL") and len(_lines(out)) == 6


def test_a_resume_rates_only_the_cases_it_ran(copied):
    """Was: the rate divided every case on disk by the time since the first one (157 cases/min for ~2,000)."""
    cases, out = copied
    settings, *records = _lines(out)
    earlier = [{**r, "finished_at": r["finished_at"] - 3600} for r in records[:2]]  # an hour ago
    out.write_text("".join(json.dumps(r) + "\n" for r in [settings, *earlier]))
    done = run(*_conform(cases, out), "--format", "json")
    summary = json.loads(done.stdout)
    assert done.returncode == 0 and summary["cases"] == 3, done.stderr
    assert summary["cases_per_minute"] > 5, summary  # one case in seconds; the hour before is not this run's


# --- a real conform process ---------------------------------------------------------------------


def _start(tmp_path: Path, n: int, *extra: str) -> tuple[subprocess.Popen, Path, Path]:
    cases, out = _cases(n, tmp_path / "cases.jsonl"), tmp_path / "results.jsonl"
    args = _conform(cases, out) + list(extra)
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 240
    while len(_results(out)) < 1 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None and _results(out), "the run ended (or never started) before a case finished"
    return proc, cases, out


def _results(out: Path) -> list[dict]:
    if not out.exists():
        return []
    records = [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]
    return [r for r in records if "status" in r]  # not the settings record


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def _scratch(children: list[int]) -> Path:
    """The pytest child's working folder: the scratch folder conform made for it."""
    (folder,) = {Path(os.readlink(f"/proc/{c}/cwd")) for c in children if b"pytest" in _cmdline(c)}
    assert folder.name.startswith("mla-conform-run-")
    return folder


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie no one reaped yet has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(
    "sig, status",
    regular_and_slow(
        [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
        (signal.SIGINT, 130),
        unpack=True,
        ids=lambda v: v[0].name,
    ),
)
def test_a_signal_ends_conform_cleanly_and_says_how_to_resume(tmp_path, sig, status):
    """Was: SIGINT exited 2 (bad input) saying nothing, and a killed conform left its pytest writing and
    the child's scratch folder behind."""
    proc, cases, out = _start(tmp_path, 60)
    child = _children(proc.pid)
    scratch = _scratch(child)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    last = stderr.strip().splitlines()[-1]
    match = re.search(r"(\d+) of 60 done; rerun the same command to resume", last)
    assert match, last
    time.sleep(1)
    assert int(match.group(1)) == len(_results(out)) < 60  # every line whole, and nothing written since
    assert not [p for p in child if _running(p)], "the pytest child outlived conform"
    assert not scratch.exists(), f"the child's scratch folder {scratch} outlived conform"


@pytest.mark.slow
def test_a_killed_child_records_error_for_its_unfinished_cases_and_the_resume_runs_them(tmp_path):
    """Was: nothing (a worker's cases became SKIP or no result) and the resume never ran them as failures."""
    proc, cases, out = _start(tmp_path, 30)
    for pid in _children(proc.pid):
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    latest = {r["key"]: r["status"] for r in _results(out)}
    errors = [k for k, s in latest.items() if s == "ERROR"]
    assert len(latest) == 30 and errors and "ERROR" in stdout, stdout
    again = run(*_conform(cases, out))
    latest = {r["key"]: r["status"] for r in _results(out)}
    assert again.returncode in (0, 1) and "ERROR" not in again.stdout, again.stdout + again.stderr
    assert not [k for k in errors if latest[k] == "ERROR"]  # each ran again, to its own verdict


@pytest.mark.slow
def test_a_child_writes_nothing_once_conform_is_killed(tmp_path):
    """Was: a SIGKILLed conform left its pytest child running and writing the results file, and the child's
    scratch folder (the copy of the cases file, pytest's ini) behind."""
    proc, cases, out = _start(tmp_path, 60)
    child = _children(proc.pid)
    scratch = _scratch(child)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while any(_running(p) for p in child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_running(p) for p in child), "the child kept running"
    assert len(_results(out)) < 60  # it stopped at its next write, not after the last case
    deadline = time.monotonic() + 5
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not scratch.exists(), f"the child's scratch folder {scratch} left 5 s after SIGKILL"


@pytest.mark.slow
def test_a_killed_xdist_worker_records_error_for_its_case_and_the_others_run_on(tmp_path):
    """The worker's case is ERROR (not SKIP, not lost); xdist replaces the worker and the rest run."""
    proc, cases, out = _start(tmp_path, 30, "--workers", "2")
    # conform's children: the pytest controller, and confine's watchdog that kills its group with conform
    (controller,) = [c for c in _children(proc.pid) if b"pytest" in _cmdline(c)]
    workers = _children(controller)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=240)
    latest = {r["key"]: r for r in _results(out)}
    errors = [r for r in latest.values() if r["status"] == "ERROR"]
    assert proc.returncode == 1 and len(latest) == 30, stdout + stderr
    assert len(errors) == 1 and "worker" in errors[0]["detail"] and "ERROR" in stdout
