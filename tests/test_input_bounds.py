"""Unbounded input is refused in one line naming the limit, before it is read whole, parsed or allocated.

Every reader of a cases file (conform, explain, the pytest plugin, the generated modules through
:func:`mla_model.case.read_cases`) and conform's reading of a results file.  The commands that could read
forever or allocate gigabytes on today's code run as subprocesses under a 2 GiB address-space limit and a
timeout, so a regression fails here instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from mla_model.case import read_cases, write_cases
from tests.cli import run

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "generated" / "vllm_028" / "cases.jsonl"
CASE = json.loads(CASES.read_text().splitlines()[0])


def _bounded(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``mla-spec ARGS`` in a child held to 2 GiB of address space and ``timeout`` seconds."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "conformance", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        cwd=ROOT,
    )


def _one_line_exit_2(out: subprocess.CompletedProcess, needle: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("mla-spec: error: ") and needle in lines[0], lines[0][:500]


def _reading(command: str, cases: Path) -> tuple[str, ...]:
    if command == "conform":
        return ("conform", "--backend", "model", "--cases", str(cases), "--device", "cpu")
    return ("explain", "--cases", str(cases), "--case", CASE["id"])


@pytest.mark.parametrize("command", ["conform", "explain"])
def test_deep_nesting_is_refused_naming_the_limit(tmp_path, command):
    """Was: RecursionError (a traceback) for '[' * 100000."""
    cases = tmp_path / "cases.jsonl"
    cases.write_text("[" * 100_000 + "\n")
    _one_line_exit_2(run(*_reading(command, cases)), "nested deeper than 32")


def test_the_pytest_plugin_refuses_deep_nesting_as_a_usage_error(tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": ' + "[" * 100_000 + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--mla-backend", "model"]
        + ["--mla-cases", str(cases)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 4 and "nested deeper than 32" in done.stderr, done.stderr[-2000:]
    assert "RecursionError" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["conform", "explain"])
def test_a_device_is_refused_before_it_is_read(command):
    """Was: explain --cases /dev/zero read 17 GB."""
    _one_line_exit_2(_bounded(*_reading(command, Path("/dev/zero"))), "a device")


@pytest.mark.parametrize("command", ["conform", "explain"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, command):
    fifo = tmp_path / "cases.jsonl"
    os.mkfifo(fifo)
    _one_line_exit_2(_bounded(*_reading(command, fifo), timeout=60), "a FIFO")


def test_a_file_past_the_size_limit_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "cases.jsonl"
    with open(big, "wb") as f:
        f.truncate(5 << 30)  # sparse: 5 GiB of size, no disk
    _one_line_exit_2(_bounded(*_reading("conform", big)), "4,294,967,296 bytes")


def test_a_line_past_the_length_limit_is_refused_naming_it(tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({**CASE, "origin": "x" * (2 << 20)}) + "\n")
    _one_line_exit_2(run(*_reading("conform", cases)), "a line longer than 1,048,576 bytes")


@pytest.mark.parametrize("field", ["seed", "revision", "id", "arch"])
def test_a_long_value_is_cut_in_the_message(tmp_path, field):
    """Was: the error line repeated the whole value (100 MB for a 100 MB field)."""
    cases = tmp_path / "cases.jsonl"
    value = "9" * 500_000 if field == "seed" else ["x" * 500_000]
    case = (
        {**CASE, "shape": {**CASE["shape"], "arch": "x" * 500_000}}
        if field == "arch"
        else {**CASE, field: value}
    )
    cases.write_text(json.dumps(case) + "\n")
    out = run(*_reading("conform", cases))
    assert out.returncode == 2 and len(out.stderr) < 800, out.stderr[:1000]
    assert "characters)" in out.stderr


def test_a_case_whose_memory_is_past_max_memory_is_refused_before_anything_runs(tmp_path):
    """Was: a 32-request case at --kv-len 262144 --full-context took 17.6 GB."""
    big = next(c for c in read_cases(ROOT / "tests/generated/vllm_034/cases.jsonl") if c.shape.num_reqs == 32)
    cases = tmp_path / "cases.jsonl"
    write_cases([big], cases)
    args = _reading("conform", cases) + ("--kv-len", "262144", "--full-context", "--max-memory", "1GiB")
    out = _bounded(*args, "--out", str(tmp_path / "results.jsonl"))
    _one_line_exit_2(out, f"case {big.revision}/{big.registry}/{big.id} needs about")
    assert "past --max-memory memory 1.0 GiB" in out.stderr
    assert not (tmp_path / "results.jsonl").exists()  # refused before the results file was taken


def test_a_results_line_past_a_limit_is_refused_on_resume(tmp_path):
    """conform reads its own results file within the same bounds."""
    cases = tmp_path / "cases.jsonl"
    cases.write_text(CASES.read_text().splitlines()[0] + "\n")
    out = tmp_path / "results.jsonl"
    first = run(
        "conform", "--backend", "model", "--cases", cases, "--out", out, "--device", "cpu", "--kv-len", "8"
    )
    assert first.returncode == 0, first.stderr
    with open(out, "a") as f:
        f.write("[" * 100_000 + "\n")
    again = run(
        "conform", "--backend", "model", "--cases", cases, "--out", out, "--device", "cpu", "--kv-len", "8"
    )
    _one_line_exit_2(again, "nested deeper than 32")


# Counts the Case objects alive once pytest has collected the cases file, and again once three of its
# cases (the others deselected) have run: gc, not RSS, so the count does not depend on the allocator.
PROBE = """
import gc, json, os

def _alive():
    from mla_model.case import Case
    gc.collect()
    return sum(type(o) is Case for o in gc.get_objects())

def pytest_collection_modifyitems(config, items):
    os.environ["PROBE_COLLECTED"] = json.dumps([len(items), _alive()])
    config.hook.pytest_deselected(items=items[3:])
    del items[3:]

def pytest_sessionfinish(session):
    collected = json.loads(os.environ["PROBE_COLLECTED"])
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump({"items": collected[0], "collected": collected[1], "ran": _alive()}, f)
"""


def _many_cases(n: int, path: Path) -> Path:
    """``n`` distinct cases: the single-request cases of vllm-0.28 at a 1 GiB KV cache, each again with a
    cache a few pages smaller (below the 2 GiB bound, so the pinned route stays the same)."""
    import dataclasses

    from mla_model.case import case_id

    base = [c for c in read_cases(CASES) if c.shape.num_reqs == 1 and c.shape.kv_cache_bytes == 1 << 30]
    cases = []
    for i in range(n):
        shape = dataclasses.replace(
            base[i % len(base)].shape, kv_cache_bytes=(1 << 30) - 4096 * (i // len(base))
        )
        cases.append(dataclasses.replace(base[i % len(base)], id=case_id(shape), shape=shape))
    write_cases(cases, path)
    return path


def test_the_pytest_plugin_keeps_no_case_in_memory_however_long_the_file(tmp_path):
    """Was: the plugin parsed the whole cases file into Case objects and kept them all for the run.  Now an
    item keeps its key and where its line starts, and a case is read again when it runs: none stays in
    memory (pytest's own item per case is the floor, see conformance.pytest_plugin.CasesFile)."""
    cases = _many_cases(1000, tmp_path / "cases.jsonl")
    (tmp_path / "case_probe.py").write_text(PROBE)
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PROBE_OUT=str(tmp_path / "probe.json"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conformance.pytest_plugin"]
        + ["-p", "case_probe", "--mla-backend", "model", "--mla-cases", str(cases), "--mla-device", "cpu"]
        + ["--mla-kv-len", "8", "--mla-results", str(tmp_path / "results.jsonl"), "--rootdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["items"] == 1000
    assert probe["collected"] == 0 and probe["ran"] <= 1, probe
