"""audit runs each release's real decode path against its model revision (network: release trees)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conformance.cli import main
from tests.params import regular_and_slow

pytestmark = pytest.mark.network


@pytest.mark.slow
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


@pytest.mark.parametrize(
    "where",
    regular_and_slow(["in its tree, by a relative path", "a lone copy"], "in its tree, by a relative path"),
)
def test_audit_holds_a_file_to_the_release_it_comes_from(where, tmp_path, monkeypatch):
    """A file is judged by the manifest rows of the release it comes from and executed against that
    release's model: the unedited 0.34.0 file, in its tree or alone, is 0.34.0 (head-padding-round-trips
    VIOLATED as the release's row expects, 0 disagreements).  It was held to a row that expects PROVED
    (a surprise, exit 1) and its executed row read "no model"."""
    from spec.realcode.source import RELATIVE_PATH, release_tree

    tree = release_tree("0.34.0")
    if where == "a lone copy":
        (tmp_path / "rocm_aiter_mla.py").write_text((tree / RELATIVE_PATH).read_text())
        monkeypatch.chdir(tmp_path)
        path = "rocm_aiter_mla.py"
    else:
        monkeypatch.chdir(tree)
        path = str(RELATIVE_PATH)
    args = ["audit", path, "--invariant", "head-padding-round-trips", "--executed", "30", "--format", "json"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["judged_as"] == {path: "vllm==0.34.0"} and result["as_expected"]
    assert {r["verdict"] for r in result["results"]} == {"VIOLATED"}
    executed = result["executed"][path]
    assert executed is not None and executed["disagreements"] == [] and executed["shapes"] > 30
