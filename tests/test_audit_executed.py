"""audit runs each release's real decode path against its model revision (network: release trees)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conformance.cli import main

pytestmark = pytest.mark.network


def test_audit_reports_the_executed_differential_per_release():
    out = CliRunner().invoke(
        main,
        [
            "audit",
            "--vllm",
            "0.28.0",
            "0.32.0",
            "--invariant",
            "metadata-covers-qlen",
            "--executed",
            "300",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    executed = json.loads(out.output)["executed"]
    assert set(executed) == {"vllm==0.28.0", "vllm==0.32.0"}
    for result in executed.values():
        assert result["shapes"] >= 300 and result["disagreements"] == []
