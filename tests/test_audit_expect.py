"""audit judged like check (issue 25 item 3) and its --vllm switch naming releases (issue 26 item 4)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from conformance.cli.audit import audit_command


def _audit(*args: str):
    return CliRunner().invoke(audit_command, [*args, "--executed", "0"])


def test_audit_exits_0_when_the_violations_are_the_manifests():
    result = _audit("0.28.0")
    assert result.exit_code == 0, result.output  # 0.28.0's violations are all in the bundled manifest
    raw = _audit("0.28.0", "--no-expect")
    assert raw.exit_code == 1  # raw verdicts: violated


def test_audit_json_names_surprises_and_vllm_names_releases():
    result = _audit("--vllm", "0.28.0", "--format", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["as_expected"] is True and out["surprises"] == []
    assert {r["revision"] for r in out["results"]} == {"vllm==0.28.0"}
    assert all("expected" in r for r in out["results"])


def test_audit_needs_a_release():
    result = _audit()
    assert result.exit_code == 2
