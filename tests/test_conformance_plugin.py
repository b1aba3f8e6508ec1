"""The replay runner as a user drives it: pytest plugin, ``mla-spec conform``, resume, bad input, no z3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.cli.conform import conform_command
from mla_model.case import read_cases, write_cases

ROOT = Path(__file__).resolve().parent.parent
PRE_FIX = ROOT / "tests" / "generated" / "vllm_027" / "cases.jsonl"
FIXED = ROOT / "tests" / "generated" / "vllm_028" / "cases.jsonl"


def _small(path: Path, n: int, out: Path, want_mismatch: bool = False) -> Path:
    """``n`` single-request cases of ``path`` (plus, if asked, one the model flags: fp8 KV on Gluon)."""
    cases = [c for c in read_cases(path) if c.shape.num_reqs == 1]
    chosen = cases[:n]
    if want_mismatch:
        chosen.append(
            next(
                c
                for c in cases
                if c.expected_route["path"].startswith("gluon")
                and c.shape.arch == "gfx950"
                and c.expected_route["kv_dtype"] == "fp8"
                and c.expected_route["q_dtype"] == "bf16"
            )
        )
    write_cases(chosen, out)
    return out


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # 10 s (README command: issue 26's 3 minutes)
def test_plugin_replays_streams_and_resumes(tmp_path):
    cases = _small(PRE_FIX, 5, tmp_path / "cases.jsonl", want_mismatch=True)
    results = tmp_path / "results.jsonl"
    args = (
        "--mla-backend",
        "model",
        "--mla-cases",
        str(cases),
        "--mla-results",
        str(results),
        "--mla-kv-len",
        "16",
    )
    first = _pytest(*args, cwd=tmp_path)
    # the fp8-on-Gluon case is the MISMATCH its class predicts (an expected failure), the rest pass
    assert first.returncode == 0, first.stdout
    assert "MISMATCH" in first.stdout and "mla-spec model:" in first.stdout and "1 xfailed" in first.stdout
    settings, *records = [json.loads(line) for line in results.read_text().splitlines()]
    assert settings["settings"]["backend"] == "model" and settings["settings"]["kv_len"] == 16
    assert len(records) == 6 and {r["status"] for r in records} <= {"PASS", "NO_KERNEL", "MISMATCH"}
    again = _pytest(*args, cwd=tmp_path)
    assert again.returncode == 0 and "6 skipped" in again.stdout, again.stdout
    assert len(results.read_text().splitlines()) == 7
    raw = _pytest(*args[:-4], "--mla-kv-len", "16", "--mla-no-expect", cwd=tmp_path)
    assert raw.returncode == 1, raw.stdout  # raw statuses: the MISMATCH fails


def test_plugin_rejects_bad_input_in_one_line(tmp_path):
    cases = _small(FIXED, 1, tmp_path / "cases.jsonl")
    bad = _pytest("--mla-backend", "nope", "--mla-cases", str(cases), cwd=tmp_path)
    assert bad.returncode == 4 and "unknown --mla-backend 'nope'" in bad.stderr
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    broken = _pytest("--mla-backend", "model", "--mla-cases", "broken.jsonl", cwd=tmp_path)
    assert broken.returncode == 4 and "broken.jsonl:1" in broken.stderr
    case = json.loads(cases.read_text().splitlines()[0])
    (tmp_path / "future.jsonl").write_text(json.dumps({**case, "revision": "vllm-9.99"}) + "\n")
    future = _pytest("--mla-backend", "model", "--mla-cases", "future.jsonl", cwd=tmp_path)
    assert future.returncode == 4 and "unknown revision 'vllm-9.99'" in future.stderr
    assert "INTERNALERROR" not in future.stdout + future.stderr


def test_conform_prints_a_summary_and_exits_by_verdict(tmp_path):
    cases = _small(FIXED, 4, tmp_path / "cases.jsonl")
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        conform_command,
        [
            "--backend",
            "model",
            "--cases",
            str(cases),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--kv-len",
            "16",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["cases"] == 4 and set(summary["statuses"]) <= {"PASS", "NO_KERNEL"}
    assert summary["results"] == str(out) and len(out.read_text().splitlines()) == 5  # the settings, 4 cases


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "nope", "--cases", "cases.jsonl"], "unknown backend 'nope'"),
        (["--backend", "model", "--cases", "missing.jsonl"], "no such file"),
        (["--backend", "model", "--cases", "broken.jsonl"], "broken.jsonl:1"),
        (
            ["--backend", "aiter-triton", "--cases", "cases.jsonl", "--fault", "metadata-short-qlen"],
            "model backend",
        ),
    ],
)
def test_conform_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    _small(FIXED, 1, tmp_path / "cases.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"id": "x"}\n')
    result = CliRunner().invoke(conform_command, args)
    assert result.exit_code == 2 and message in result.output


def test_replay_needs_neither_z3_nor_torch_to_start():
    """The GPU machine has no z3; every pytest run loads the plugin, which must not pull torch in."""
    script = (
        "import sys; sys.modules['z3'] = None\n"
        "import conformance.pytest_plugin, conformance.cli.conform, mla_model.case\n"
        "assert 'torch' not in sys.modules\n"
        "from conformance.runner import run_case\n"
        "from conformance.backends import load_backend\n"
        "from mla_model.case import read_cases\n"
        f"case = read_cases({str(FIXED)!r})[0]\n"
        "print(run_case(case, load_backend('model'), 'cpu', 8)['status'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("PASS", "NO_KERNEL")
