"""What tests/test_cli_fuzz.py found, each pinned by a plain test: one line and exit 2, or a rendering."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.cli import run

REAL_CASES = Path(__file__).parent / "generated" / "vllm_028" / "cases.jsonl"


def _one_line_exit_2(out, needle: str) -> None:
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("mla-spec: error: ") and needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("seed", float("inf"), "seed inf is not an integer"),  # was OverflowError: int(inf)
        ("seed", "7", "seed '7' is not an integer"),
        ("revision", ["vllm-0.28"], "revision ['vllm-0.28'] is not a string"),  # was TypeError: unhashable
        ("id", 5, "id 5 is not a string"),
        ("expected_route", None, "expected_route None is not an object"),
    ],
)
@pytest.mark.parametrize("command", ["conform", "explain"])
def test_a_case_field_of_the_wrong_type_is_refused_in_one_line(tmp_path, command, field, value, needle):
    case = json.loads(REAL_CASES.read_text().splitlines()[0])
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({**case, field: value}) + "\n")
    args = (
        ["conform", "--backend", "model", "--cases", cases]
        if command == "conform"
        else ["explain", "--cases", cases, "--case", case["id"]]
    )
    _one_line_exit_2(run(*args), f"{cases}:1: case ")
    _one_line_exit_2(run(*args), needle)


@pytest.mark.parametrize(
    "field, value, needle",
    [("revision", "vllm-9.99", "unknown revision 'vllm-9.99'"), ("registry", "aiter-9", "unknown registry")],
)
def test_conform_refuses_a_case_of_an_unknown_revision_or_registry(tmp_path, field, value, needle):
    """It was a KeyError from the stale-route check (explain already refused these)."""
    case = json.loads(REAL_CASES.read_text().splitlines()[0])
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({**case, field: value}) + "\n")
    _one_line_exit_2(run("conform", "--backend", "model", "--cases", cases), needle)


@pytest.mark.parametrize(
    "out, needle",
    [
        ("", "a folder; name the results file"),  # was ValueError: PosixPath('.') has an empty name
        ("d", "a folder; name the results file"),
        ("f.txt/results.jsonl", "cannot create its folder"),  # was the progress bar, then an error: two lines
    ],
)
def test_conform_refuses_an_out_it_cannot_write_before_it_starts(tmp_path, out, needle):
    (tmp_path / "d").mkdir()
    (tmp_path / "f.txt").write_text("x\n")
    out = run("conform", "--backend", "model", "--cases", REAL_CASES, "--out", out, cwd=tmp_path)
    _one_line_exit_2(out, needle)


def test_a_results_line_that_is_not_a_result_is_skipped_and_its_case_runs_again(tmp_path):
    """A hand-edited or foreign line (no verdict, a key that is a list, times that are text) was a KeyError,
    a TypeError or a crash of the summary; now the case is simply not done."""
    pytest.importorskip("torch")
    from conformance.runner import ResultsLog

    good = {"key": "a", "backend": "model", "fault": None, "status": "PASS", "path": "asm_persistent"}
    good.update(t_case_s=0.1, finished_at=1.0)
    bad = [
        {"backend": "model", "fault": None},
        {**good, "key": ["b"]},
        {**good, "key": "c", "status": None},
        {**good, "key": "d", "finished_at": "noon"},
        {**good, "key": "e", "t_kernel_ms": True},
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [good, *bad]))
    assert ResultsLog(path).done("model", None) == {"a"}


def test_conform_summary_survives_zero_kernel_time_and_markup_in_a_detail(tmp_path, monkeypatch):
    """A zero median kernel time was a ZeroDivisionError, a detail with '[/b]' a rich MarkupError."""
    pytest.importorskip("torch")
    case = json.loads(REAL_CASES.read_text().splitlines()[0])
    record = {"key": f"{case['revision']}/{case['registry']}/{case['id']}", "backend": "model", "fault": None}
    record.update(path="gluon_decode", status="CRASH", detail="IndexError: a[/b]", t_case_s=0.1)
    record.update(finished_at=1.0, t_kernel_ms=0.0, t_reference_ms=1.0)

    class Child:  # the pytest child, as if it had run the case
        returncode = 1

        def __init__(self, cmd, **_):
            with open(cmd[cmd.index("--mla-results") + 1], "a") as results:  # after conform's settings line
                results.write(json.dumps(record) + "\n")

        def poll(self):
            return self.returncode

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    from spec.realcode.executed import confine

    monkeypatch.setattr(confine, "Child", Child)  # conform launches its child through confine
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(case) + "\n")
    out = run("conform", "--backend", "model", "--cases", cases, "--out", tmp_path / "results.jsonl")
    assert out.returncode == 1 and "IndexError: a[/b]" in out.stdout, out.stderr
    assert "reference 1.000 ms" in out.stdout and "x)" not in out.stdout


@pytest.mark.parametrize("command", ["check", "audit"])
def test_a_release_path_with_markup_in_it_is_printed_as_it_is(monkeypatch, command):
    """A vLLM tree at /x/[/bold]/... was a rich MarkupError in check's and audit's tables."""
    import spec.realcode.revision
    from mla_model.revisions import REVISIONS
    from spec.proof.check_all import check_all

    label = "/trees/[/bold]/rocm_aiter_mla.py"
    results = [
        dataclasses.replace(r, revision=label)
        for r in check_all(["vllm-0.27"], ["aiter-0.1.19"], ["total"], 1, 10.0)
    ]
    gates = dataclasses.replace(REVISIONS["vllm-0.27"], id=label)
    monkeypatch.setattr(spec.realcode.revision, "real_revision", lambda spec: gates)
    monkeypatch.setattr(f"conformance.cli.{command}.check_all", lambda *args: results)
    args = (
        ["check", "--no-expect", "--vllm", label]
        if command == "check"
        else ["audit", "--no-expect", label, "--executed", "0"]
    )
    out = run(*args, "--invariant", "total")
    assert out.returncode == 1 and "/trees/[/bold]/" in out.stdout, out.stderr


def test_bind_titles_a_release_path_with_markup_in_it(monkeypatch):
    import spec.realcode.bind
    from spec.realcode.bind import Bound, Comparison

    label = "/trees/[/bold]/rocm_aiter_mla.py"
    rows = [Comparison("use_gluon_decode", "bounded", "EQUIVALENT", 16, 0.1)]
    monkeypatch.setattr(
        spec.realcode.bind,
        "bind",
        lambda spec, model, symbolic, timeout_ms: Bound(label, "vllm-0.28", "given", rows),
    )
    out = run("bind", "--vllm", label, "--shapes", "0")
    assert out.returncode == 0 and label in out.stdout, out.stderr


def test_an_undecodable_file_name_is_echoed_back_not_a_traceback(tmp_path):
    """argv names a file in bytes that are not UTF-8 (a surrogate escape): printing it to a strict stdout was
    a UnicodeEncodeError."""
    out = run("graph", "--format", "text", "--out", "bad\udcffname.dot", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "wrote bad\\udcffname.dot" in out.stdout
