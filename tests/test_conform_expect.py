"""conform judged like check (issue 25 item 3): each status against the one its case's class predicts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.backends import case_key
from conformance.cli.conform import conform_command
from conformance.expect import exit_status, judge, predicted
from conformance.results_file import run_settings, settings_record
from mla_model.case import read_cases, write_cases

GENERATED = Path(__file__).parent / "generated"


def _case(folder: str, cause: str):
    """The first committed case of ``folder`` whose predicted outcome has ``cause``."""
    return next(
        c for c in read_cases(GENERATED / folder / "cases.jsonl") if c.expected_outcome["cause"] == cause
    )


def _record(case, status: str) -> dict:
    from conformance.runner import case_record

    now = time.time()
    return {**case_record(case, "vllm", "cpu", None), "status": status, "detail": "", "t_case_s": 0.01,
            "finished_at": now}  # fmt: skip


def test_the_fp8_gluon_cases_of_0_27_predict_a_mismatch():
    case = _case("vllm_027", "gluon_kv_scale")  # Gluon reads the fp8 cache with kv_scale=1.0
    assert case.expected_outcome["status"] == "MISMATCH"
    assert predicted(case) == "MISMATCH"


@pytest.mark.parametrize(
    "status, verdict, code",
    [("MISMATCH", "expected", 0), ("NAN", "expected", 0), ("PASS", "surprise", 1), ("ERROR", "error", 1),
     ("SKIP", "unknown", 3)],
)  # fmt: skip
def test_a_predicted_mismatch_is_judged(status, verdict, code):
    case = _case("vllm_027", "gluon_kv_scale")
    judged = judge([_record(case, status)], [case])
    assert judged[0]["verdict"] == verdict
    assert exit_status(judged) == code


def test_a_kernel_defect_is_a_pass_on_a_stand_in():
    case = _case("vllm_028", "known_wrong")  # a registry known-wrong ASM kernel: only the real one shows it
    assert case.expected_outcome["status"] == "MISMATCH"
    assert predicted(case) == "PASS"


def test_the_dropped_rank_lse_fault_predicts_a_mismatch_on_dcp_cases():
    case = next(
        c
        for c in read_cases(GENERATED / "vllm_034" / "cases.jsonl")
        if c.shape.dcp_world_size > 1 and c.expected_outcome["status"] == "PASS"
    )
    assert predicted(case) == "PASS"
    assert predicted(case, inject_fault="drop-rank-lse") == "MISMATCH"


def _conform(tmp_path: Path, statuses: dict[str, str], *extra: str):
    """conform over a few committed 0.27 cases whose results file already holds ``statuses`` (a resumed run:
    no case runs again, the summary and the exit status come from the file)."""
    gluon = _case("vllm_027", "gluon_kv_scale")
    crash = next(
        c
        for c in read_cases(GENERATED / "vllm_027" / "cases.jsonl")
        if c.expected_outcome["status"] == "CRASH"
    )
    cases = [gluon, crash]
    path = tmp_path / "cases.jsonl"
    write_cases(cases, path)
    out = tmp_path / "results.jsonl"
    settings = settings_record(run_settings("vllm", "cpu", vllm="0.27.1"))  # the run resumed
    records = [settings] + [_record(c, statuses.get(case_key(c), "CRASH")) for c in cases]
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(
        conform_command,
        [
            "--backend",
            "vllm",
            "--vllm",
            "0.27.1",
            "--cases",
            str(path),
            "--out",
            str(out),
            "--device",
            "cpu",
            *extra,
        ],
    )
    return result, case_key(gluon)


def test_conform_exits_0_when_every_status_is_the_predicted_one(tmp_path):
    gluon = case_key(_case("vllm_027", "gluon_kv_scale"))
    result, _ = _conform(tmp_path, {gluon: "MISMATCH"})  # and the crash case a CRASH, as predicted
    assert result.exit_code == 0, result.output
    assert "2 of 2 statuses as expected, 0 surprise(s)" in result.output


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
def test_a_lost_detection_makes_conform_exit_1_naming_it(tmp_path):
    gluon = case_key(_case("vllm_027", "gluon_kv_scale"))
    result, _ = _conform(tmp_path, {gluon: "PASS"})
    assert result.exit_code == 1
    assert f"surprise: {gluon} is PASS, its class predicts MISMATCH" in result.output
    raw, _ = _conform(tmp_path, {gluon: "PASS"}, "--no-expect")
    assert raw.exit_code == 1  # raw statuses: the recorded CRASH is a failure, the PASS is not judged
    assert "surprise" not in raw.output
