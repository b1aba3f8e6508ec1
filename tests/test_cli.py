"""The mla-spec command line as a user and a CI script see it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mla_model.shape import FIELDS
from tests.cli import run


def test_check_json_schema_and_exit_1_on_violation():
    out = run(
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.27",
        "--registry",
        "aiter-0.1.19",
        "--invariant",
        "fp8-never-reaches-gluon",
        "--format",
        "json",
        "--max-classes",
        "3",
    )
    assert out.returncode == 1, out.stderr
    (result,) = json.loads(out.stdout)["results"]
    assert {"revision", "registry", "invariant", "verdict", "seconds", "counterexamples"} <= set(result)
    assert result["verdict"] == "VIOLATED" and 1 <= len(result["counterexamples"]) <= 3
    for c in result["counterexamples"]:
        assert list(c["shape"]) == [f.name for f in FIELDS]
        assert c["route"]["path"] in ("gluon_decode", "gluon_verify") and c["symptom"]


def test_check_exit_0_when_everything_asked_is_proved():
    out = run(
        "check",
        "--revision",
        "vllm-0.28",
        "--invariant",
        "fp8-never-reaches-gluon",
        "--invariant",
        "metadata-covers-qlen",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PROVED" in out.stdout and "VIOLATED" not in out.stdout


def test_check_text_names_the_counterexample_and_its_symptom():
    out = run(
        "check",
        "--no-expect",
        "--revision",
        "main-pre-51011",
        "--registry",
        "aiter-0.1.19",
        "--invariant",
        "block-n-key-exists",
    )
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
    assert [r["id"] for r in data["revisions"]] == [
        "vllm-0.27",
        "main-pre-51011",
        "vllm-0.28",
        "vllm-0.29",
        "vllm-0.30",
        "vllm-0.31",
        "vllm-0.32",
        "vllm-0.33",
        "vllm-0.34",
    ]
    assert [r["id"] for r in data["registries"]] == ["aiter-0.1.19", "aiter-0.1.20"]
    assert "total" in [i["id"] for i in data["invariants"]]


def test_docs_describe_every_invariant_as_the_catalogue_does():
    from pathlib import Path

    from spec.proof.invariants import INVARIANTS

    text = Path(__file__).parent.parent.joinpath("docs", "reference", "invariants.md").read_text()
    for inv in INVARIANTS:
        assert f"## `{inv.id}`" in text and inv.statement in text and inv.symptom in text, inv.id


def test_explain_shows_route_kernel_and_why_not_persistent():
    out = run(
        "explain",
        "--revision",
        "vllm-0.27",
        "--registry",
        "aiter-0.1.19",
        "--arch",
        "gfx950",
        "--kv-cache-dtype",
        "fp8",
        "--num-heads",
        "16",
        "--spec-method",
        "dspark",
        "--num-spec-tokens",
        "2",
        "--max-qo-len",
        "5",
        "--format",
        "json",
    )
    assert out.returncode == 1, out.stderr  # the shape breaks metadata-covers-qlen
    data = json.loads(out.stdout)
    assert data["valid"] and data["route"]["path"] == "asm_nonpersistent"
    assert (
        data["kernel"]["block_n_lookup"]
        and data["kernel"]["block_n_key"] == 80
        and not data["kernel"]["block_n_key_ok"]
    )
    assert "max_qo_len=5" in data["why_not_persistent"] and "spec_method=dspark" in data["why_not_persistent"]
    assert not data["invariants"]["metadata-covers-qlen"]["holds"]
    assert data["invariants"]["fp8-never-reaches-gluon"]["holds"]


def test_explain_names_the_gate_clause_that_keeps_a_padded_bf16_rank_off_the_schedule():
    out = run(
        "explain",
        "--revision",
        "vllm-0.28",
        "--arch",
        "gfx942",
        "--num-heads",
        "12",
        "--spec-method",
        "mtp",
        "--num-spec-tokens",
        "5",
        "--max-qo-len",
        "6",
        "--format",
        "json",
    )
    data = json.loads(out.stdout)
    assert data["why_not_persistent"] == ["kv_cache_dtype=auto", "max_qo_len=6", "num_heads=12"]
    assert data["kernel"]["kernel"] == "mla_a16w16_qh16_m32x4_n16x1_coex0_mask1"


def test_explain_bad_field_value_is_one_line_exit_2():
    out = run("explain", "--num-heads", "0")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_explain_a_case_id_names_the_broken_conjunct_with_its_values():
    result = run(
        "explain", "--case", "gfx950-fp8-h4-q1-nospec-auto", "--revision", "vllm-0.27", "--format", "json"
    )
    assert result.returncode == 1, result.stderr  # it breaks fp8-never-reaches-gluon
    out = json.loads(result.stdout)
    assert out["shape"]["kv_cache_dtype"] == "fp8" and out["route"]["path"] == "gluon_decode"
    broken = out["invariants"]["fp8-never-reaches-gluon"]["violated"]
    assert "route.path = gluon_decode" in broken["given"]
    assert "gluon.serves_fp8 = False (needs True)" in broken["violated"]
    gate = out["decisions"]["use_gluon_decode"]
    assert gate["value"] is True and gate["conditions"]["num_heads < 16"] is True


def test_explain_after_51011_shows_the_dtype_guard_closing_the_gluon_gate():
    result = run(
        "explain", "--case", "gfx950-fp8-h4-q1-nospec-auto", "--revision", "vllm-0.28", "--format", "json"
    )
    out = json.loads(result.stdout)
    gate = out["decisions"]["use_gluon_decode"]
    assert (
        gate["value"] is False and gate["conditions"]["kv_cache_dtype in {fp8, fp8_e4m3, fp8_e5m2}"] is True
    )
    assert all(v["holds"] for k, v in out["invariants"].items() if k.startswith("fp8"))


def test_explain_refuses_a_malformed_case_id_in_one_line():
    result = run("explain", "--case", "gfx950-fp8")
    assert result.returncode == 2 and "is not a case id" in result.stderr


@pytest.mark.parametrize(
    "command", [("check", "--revision", "vllm-0.28"), ("audit", "--vllm", "0.28.0"), ("mutate",)]
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "1e9", "abc"])
def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_one_line_exit_2(command, value):
    from click.testing import CliRunner

    from conformance.cli import main

    with pytest.raises(SystemExit) as e:
        main.main([*command, "--timeout", value])
    assert e.value.code == 2
    result = CliRunner().invoke(main, [*command, "--timeout", value])
    assert result.exit_code == 2 and "--timeout" in result.output


def test_output_that_cannot_be_written_is_one_line_exit_2():
    with open("/dev/full", "w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "conformance", "list", "--format", "json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "mla-spec: error: cannot write the output: No space left on device"
    ]


def test_version():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("mla-spec, version ")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[1, 2]\n", "a case is a JSON object, not list"),
        (b'"x"\n', "a case is a JSON object, not str"),
        (b'{"id": 3}\n', "lacks"),
        (b"", "no cases in the file"),
        (b"\x89PNG\x00\xff\n", "can't decode"),
    ],
)
def test_conform_refuses_a_bad_cases_file_in_one_line(tmp_path, content, message):
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(content)
    out = run("conform", "--backend", "model", "--cases", str(cases))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_conform_refuses_an_unknown_device_and_cases_an_empty_out(tmp_path):
    out = run(
        "conform", "--backend", "model", "--cases", "tests/generated/vllm_028/cases.jsonl", "--device", "gpu0"
    )
    assert out.returncode == 2 and "--device 'gpu0'" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "conformance", "cases", "--out", ""],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "--out" in out.stderr and not list(tmp_path.iterdir())


def test_every_option_of_every_command_has_help():
    import click

    from conformance.cli import main

    bare = [
        (name, p.opts[0])
        for name, cmd in main.commands.items()
        for p in cmd.params
        if isinstance(p, click.Option) and not p.help and "--help" not in p.opts
    ]
    assert not bare


def test_conform_refuses_duplicate_case_ids_naming_one(tmp_path):
    line = open("tests/generated/vllm_028/cases.jsonl").readline()
    cases = tmp_path / "cases.jsonl"
    cases.write_text(line + line)
    out = run("conform", "--backend", "model", "--cases", str(cases))
    assert (
        out.returncode == 2 and "more than once" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    )


def test_a_torn_last_results_line_is_dropped_and_its_case_runs_again(tmp_path):
    pytest.importorskip("torch")
    from conformance.runner import ResultsLog

    def line(key: str) -> str:  # a result as run_case writes one: its verdict, route path and times
        record = {"key": key, "backend": "model", "fault": None, "status": "PASS", "path": "asm_persistent"}
        return json.dumps({**record, "t_case_s": 0.1, "finished_at": 1.0})

    path = tmp_path / "results.jsonl"
    path.write_text(line("a") + "\n" + line("b")[:20])
    log = ResultsLog(path)
    assert [r["key"] for r in log.records()] == ["a"]
    log.append(json.loads(line("c")))
    assert path.read_text().splitlines() == [line("a"), line("c")]
    assert log.done("model", None) == {"a", "c"}


def test_junit_has_one_case_per_invariant_and_a_failure_per_violation():
    import xml.etree.ElementTree as ET

    out = run(
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.27",
        "--registry",
        "aiter-0.1.19",
        "--invariant",
        "total",
        "--invariant",
        "decode-verify-disjoint",
        "--format",
        "junit",
        "--max-classes",
        "2",
    )
    assert out.returncode == 1
    suite = ET.fromstring(out.stdout).find("testsuite")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"total", "decode-verify-disjoint"} and suite.get("failures") == "1"
    assert (
        cases["total"].find("failure") is not None and cases["decode-verify-disjoint"].find("failure") is None
    )
    assert "heads=" in cases["total"].find("failure").text


def test_sarif_of_every_revision_points_at_its_gate_code():
    out = run("check", "--invariant", "decode-verify-disjoint", "--format", "sarif")
    assert out.returncode in (0, 1), out.stderr
    assert '"version": "2.1.0"' in out.stdout


def test_a_gluon_path_without_a_build_says_why_in_the_violation():
    out = run(
        "check",
        "--revision",
        "vllm-0.27",
        "--registry",
        "aiter-0.1.19",
        "--invariant",
        "gluon-only-where-built",
        "--format",
        "json",
    )
    details = [c["symptom"] for r in json.loads(out.stdout)["results"] for c in r["counterexamples"]]
    assert details and all("selected: " in d and "selected:  ->" not in d for d in details)


def test_a_warning_level_violation_is_reported_but_does_not_fail_the_check():
    """AITER dropping vLLM's persistent metadata costs performance, not correctness: exit 0, reported."""
    import xml.etree.ElementTree as ET

    args = (
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.34",
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "persistent-metadata-used",
    )
    text = run(*args)
    assert text.returncode == 0 and "WARNING (1)" in text.stdout and "drops persistent mode" in text.stdout
    sarif = json.loads(run(*args, "--format", "sarif").stdout)
    assert [r["level"] for r in sarif["runs"][0]["results"]] == ["warning"]
    assert sarif["runs"][0]["tool"]["driver"]["rules"][0]["defaultConfiguration"]["level"] == "warning"
    suite = ET.fromstring(run(*args, "--format", "junit").stdout).find("testsuite")
    assert suite.get("failures") == "0" and "WARNING" in suite.find("testcase/system-out").text
    mixed = run(
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.34",
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "persistent-metadata-used",
        "--invariant",
        "kernel-exists",
    )
    assert mixed.returncode == 1  # an error-level violation still fails


def test_check_names_the_deployments_each_class_hits():
    """Issue 13 item 8: the seed's failure reads "hits Kimi-K3 TP8 fp8" (main-pre-51011, known-wrong)."""
    args = ("check", "--no-expect", "--revision", "main-pre-51011", "--registry", "aiter-0.1.20")
    args += ("--invariant", "no-known-wrong-kernel")
    out = json.loads(run(*args, "--format", "json").stdout)
    (result,) = out["results"]
    seed = [
        c
        for c in result["counterexamples"]
        if c["shape"]["arch"] == "gfx950"
        and c["shape"]["kv_cache_dtype"] == "fp8"
        and c["shape"]["spec_method"] == "none"
    ]
    assert seed and all("Kimi-K3 TP8 fp8" in c["hits"] for c in seed)
    text = run(*args, "--show", "10").stdout
    assert "hits: " in text and "Kimi-K3 TP8 fp8" in text
