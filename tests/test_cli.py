"""The mla-spec command line as a user and a CI script see it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mla_model.shape import FIELDS


def run(*args):
    return subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True, text=True, timeout=300)


def test_check_json_schema_and_exit_1_on_violation():
    out = run("check", "--revision", "vllm-0.27", "--registry", "aiter-0.1.19",
              "--invariant", "fp8-never-reaches-gluon", "--format", "json", "--max-classes", "3")
    assert out.returncode == 1, out.stderr
    (result,) = json.loads(out.stdout)["results"]
    assert {"revision", "registry", "invariant", "verdict", "seconds", "counterexamples"} <= set(result)
    assert result["verdict"] == "VIOLATED" and 1 <= len(result["counterexamples"]) <= 3
    for c in result["counterexamples"]:
        assert list(c["shape"]) == [f.name for f in FIELDS]
        assert c["route"]["path"] in ("gluon_decode", "gluon_verify") and c["symptom"]


def test_check_exit_0_when_everything_asked_is_proved():
    out = run("check", "--revision", "vllm-0.28", "--invariant", "fp8-never-reaches-gluon",
              "--invariant", "metadata-covers-qlen")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PROVED" in out.stdout and "VIOLATED" not in out.stdout


def test_check_text_names_the_counterexample_and_its_symptom():
    out = run("check", "--revision", "main-pre-51011", "--registry", "aiter-0.1.19",
              "--invariant", "block-n-key-exists")
    assert out.returncode == 1
    assert "VIOLATED" in out.stdout and "get_block_n_fp8[16*5=80]" in out.stdout and "KeyError" in out.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["check", "--revision", "vllm-9.99"], "'vllm-9.99' is not one of"),
        (["check", "--invariant", "nope"], "'nope' is not one of"),
        (["check", "--max-classes", "0"], "--max-classes"),
        (["check", "--format", "yaml"], "'yaml' is not one of"),
        (["frobnicate"], "No such command 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mla-spec: error:") and needle in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_list_json_names_every_revision_registry_and_invariant():
    out = run("list", "--format", "json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert [r["id"] for r in data["revisions"]] == ["vllm-0.27", "main-pre-51011", "vllm-0.28", "vllm-0.34"]
    assert [r["id"] for r in data["registries"]] == ["aiter-0.1.19", "aiter-0.1.20"]
    assert "total" in [i["id"] for i in data["invariants"]]


def test_docs_describe_every_invariant_as_the_catalogue_does():
    from pathlib import Path

    from spec.invariants import INVARIANTS

    text = Path(__file__).parent.parent.joinpath("docs", "invariants.md").read_text()
    for inv in INVARIANTS:
        assert f"## `{inv.id}`" in text and inv.statement in text and inv.symptom in text, inv.id
