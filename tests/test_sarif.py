"""SARIF 2.1.0 from ``check`` and ``diff``: what a code-scanning view shows a maintainer.

Each log is checked for the properties SARIF 2.1.0 requires (a log's version and runs, a run's
tool.driver.name, a rule's id, a result's message.text) and for what GitHub code scanning reads:
ruleId and ruleIndex naming a rule, level, a physical location relative to the repository root.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from click.testing import CliRunner

from conformance.cli import main
from conformance.cli.diff import diff_command
from conformance.cli.errors import OneLineErrors
from conformance.cli.render.sarif import revision_location
from conformance.cli.render.text import shape_summary
from mla_model.revisions import REVISIONS
from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID

MINI = Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py"


def _valid_sarif(log: dict) -> dict:
    """The one run of a log, after checking what SARIF 2.1.0 and code scanning require of it."""
    assert log["version"] == "2.1.0" and "sarif-schema-2.1.0" in log["$schema"]
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "mla-spec"
    ids = [rule["id"] for rule in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
    for result in run["results"]:
        assert ids[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note") and result["message"]["text"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] and physical["region"]["startLine"] >= 1
        assert result["partialFingerprints"]
    return run


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_check_sarif_reports_each_violation_with_its_smallest_counterexample_at_the_revision():
    sarif = _invoke(
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.27",
        "--registry",
        "aiter-0.1.19",
        "--invariant",
        "fp8-never-reaches-gluon",
        "--format",
        "sarif",
    )
    assert sarif.exit_code == 1  # violated, whatever the format
    run = _valid_sarif(json.loads(sarif.stdout))
    inv = INVARIANT_BY_ID["fp8-never-reaches-gluon"]
    (rule,) = run["tool"]["driver"]["rules"]
    assert (
        rule["shortDescription"]["text"] == inv.statement and rule["fullDescription"]["text"] == inv.symptom
    )
    (result,) = run["results"]
    assert result["ruleId"] == inv.id and result["level"] == "error"
    smallest = result["properties"]["counterexamples"][0]  # the check's JSON result rides along
    assert (
        f"smallest: {shape_summary(Shape(**smallest['shape']))} -> {smallest['route']['path']}"
        in result["message"]["text"]
    )
    route = REVISIONS["vllm-0.27"].route
    physical = result["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "mla_model/revisions/vllm_027.py"
    assert physical["region"]["startLine"] == inspect.getsourcelines(route)[1]


def test_check_sarif_has_no_result_where_everything_is_proved():
    result = _invoke(
        "check", "--revision", "vllm-0.28", "--invariant", "fp8-never-reaches-gluon", "--format", "sarif"
    )
    assert result.exit_code == 0
    assert _valid_sarif(json.loads(result.stdout))["results"] == []


def test_diff_sarif_has_one_result_per_region_errors_where_fail_on_new_routes_fails():
    runner = CliRunner()
    sarif = runner.invoke(
        diff_command, ["vllm-0.27", "vllm-0.28", "--format", "sarif", "--fail-on-new-routes"]
    )
    as_json = runner.invoke(diff_command, ["vllm-0.27", "vllm-0.28", "--format", "json"])
    assert sarif.exit_code == 1
    run = _valid_sarif(json.loads(sarif.stdout))
    regions = json.loads(as_json.stdout)["regions"]
    assert len(run["results"]) == len(regions)
    for result, region in zip(run["results"], regions):
        rule = "new-route" if region["new_route_taken"] else "metadata-sizing"
        assert result["ruleId"] == rule and result["level"] == ("error" if rule == "new-route" else "note")
        assert (
            region["constraint"] in result["message"]["text"]
            and f"{region['shapes']:,} shapes" in result["message"]["text"]
        )
        assert (
            result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            == "mla_model/revisions/vllm_028.py"
        )
    assert {r["ruleId"] for r in run["results"]} == {"new-route", "metadata-sizing"}


def test_diff_sarif_without_the_flag_warns_and_exits_0():
    result = CliRunner().invoke(
        OneLineErrors(commands={"diff": diff_command}),
        ["diff", "main-pre-51011", "vllm-0.28", "--format", "sarif"],
    )
    assert result.exit_code == 0
    levels = {r["level"] for r in _valid_sarif(json.loads(result.stdout))["results"]}
    assert "error" not in levels and "warning" in levels


def test_a_real_file_is_located_at_its_use_gluon_decode():
    physical = revision_location(str(MINI))["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == MINI.resolve().as_uri()
    line = next(
        n for n, text in enumerate(MINI.read_text().splitlines(), 1) if "def use_gluon_decode" in text
    )
    assert physical["region"]["startLine"] == line


def test_a_real_file_is_located_where_each_invariant_breaks():
    text = MINI.read_text().splitlines()
    sizing = revision_location(str(MINI), INVARIANT_BY_ID["metadata-covers-qlen"].anchor)["physicalLocation"]
    assert "self._mtp_decode_qlen =" in text[sizing["region"]["startLine"] - 1]
    missing = revision_location(str(MINI), "def no_such_function")["physicalLocation"]
    assert "def use_gluon_decode" in text[missing["region"]["startLine"] - 1]  # the fallback anchor
