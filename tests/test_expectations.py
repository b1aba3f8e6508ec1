"""The expected-verdicts manifest: check exits 0 when every verdict is what it expects, 1 naming each
surprise (issue 13 item 6)."""

from __future__ import annotations

import json
import textwrap

import pytest

from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS
from spec.proof.expectations import BUNDLED, ManifestError, compare, load_manifest
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult
from spec.proof.verdict import PROVED, UNKNOWN, VIOLATED
from tests.cli import run


@pytest.fixture(scope="module")
def default_check():
    """`mla-spec check --format json` on the bundled default: every revision, registry and invariant."""
    r = run("check", "--format", "json")
    return r.returncode, json.loads(r.stdout)


def test_the_bundled_default_is_as_expected_and_exits_0(default_check):
    code, out = default_check
    assert code == 0
    assert out["as_expected"] and out["surprises"] == []
    assert len(out["results"]) == len(REVISIONS) * len(REGISTRY_IDS) * len(INVARIANT_BY_ID)
    assert {r["verdict"] for r in out["results"]} == {PROVED, VIOLATED}


def test_every_bundled_row_decides_some_verdict_of_the_default_check(default_check):
    _, out = default_check
    used = {r["expected"]["row"] for r in out["results"]}
    assert used == set(range(1, len(load_manifest().rows) + 1))


def test_every_expected_violation_has_a_reason_that_cites_its_source():
    for row in load_manifest().rows:
        if row.verdict == VIOLATED:
            assert "sources §" in row.reason or "above" in row.reason, row


def test_json_carries_every_class_and_its_count(default_check):
    _, out = default_check
    for r in out["results"]:
        assert r["complete"]
        assert r["class_count"] == len(r["counterexamples"])
    assert max(r["class_count"] for r in out["results"]) > 10  # more than the text shows


def test_the_text_shows_the_first_classes_and_how_many_more():
    r = run(
        "check",
        "--no-expect",
        "--revision",
        "vllm-0.28",
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "total",
    )
    assert r.returncode == 1
    lines = [line for line in r.stdout.splitlines() if line.startswith("  - ")]
    assert len(lines) == 3
    assert "... and 11 more classes (--show 14, or --format json)" in r.stdout
    assert "VIOLATED total on vllm-0.28 with aiter-0.1.20 (14 classes)" in r.stdout


def _manifest(tmp_path, body: str):
    path = tmp_path / "expected.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_verdict_the_manifest_does_not_expect_exits_1_and_is_named(tmp_path):
    path = _manifest(
        tmp_path,
        """
        [[expect]]
        revision = "vllm-0.28"
        verdict = "PROVED"
        reason = "a manifest that is wrong about total"
        """,
    )
    r = run(
        "check",
        "--revision",
        "vllm-0.28",
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "total",
        "--expect",
        path,
    )
    assert r.returncode == 1
    assert "1 surprise against" in r.stdout
    assert (
        "! vllm-0.28 / aiter-0.1.20 / total: VIOLATED, expected PROVED (row 1: a manifest that is wrong"
        in (" ".join(r.stdout.split()))
    )
    assert "VIOLATED total on vllm-0.28" in r.stdout  # the surprise is detailed


def test_a_violation_that_went_away_is_a_surprise_too(tmp_path):
    path = _manifest(
        tmp_path,
        """
        [[expect]]
        revision = "*"
        verdict = "VIOLATED"
        reason = "expects a fault 0.28 fixed"
        """,
    )
    r = run(
        "check", "--revision", "vllm-0.28", "--registry", "aiter-0.1.20",
        "--invariant", "fp8-never-reaches-gluon", "--expect", path, "--format", "json",
    )  # fmt: skip
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["surprises"] == [
        {"revision": "vllm-0.28", "registry": "aiter-0.1.20", "invariant": "fp8-never-reaches-gluon"}
    ]


def test_no_row_for_a_verdict_is_a_surprise(tmp_path):
    path = _manifest(
        tmp_path,
        """
        [[expect]]
        revision = "vllm-0.34"
        verdict = "PROVED"
        reason = "only 0.34"
        """,
    )
    r = run(
        "check",
        "--revision",
        "vllm-0.28",
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "builder-impl-agree",
        "--expect",
        path,
    )
    assert r.returncode == 1
    assert "no row expects it" in r.stdout


def test_a_warning_level_surprise_is_named_but_does_not_change_the_exit_status(tmp_path):
    path = _manifest(
        tmp_path,
        """
        [[expect]]
        revision = "*"
        verdict = "PROVED"
        reason = "nothing wasted"
        """,
    )
    r = run(
        "check", "--revision", "vllm-0.34", "--registry", "aiter-0.1.20",
        "--invariant", "persistent-metadata-used", "--expect", path,
    )  # fmt: skip
    assert r.returncode == 0
    assert "1 surprise" in r.stdout and "does not change the exit status" in " ".join(r.stdout.split())


def test_unknown_is_never_expected():
    manifest = load_manifest()
    unknown = CheckResult("vllm-0.28", "aiter-0.1.20", "builder-impl-agree", UNKNOWN, 0.0)
    (outcome,) = compare([unknown], manifest)
    assert outcome.expected is not None and outcome.expected.verdict == PROVED
    assert outcome.surprise and outcome.counts


def test_first_matching_row_wins(tmp_path):
    manifest = load_manifest(
        _manifest(
            tmp_path,
            """
            [[expect]]
            revision = ["vllm-0.2*"]
            invariant = "kernel-exists"
            verdict = "VIOLATED"
            reason = "first"

            [[expect]]
            revision = "*"
            verdict = "PROVED"
            reason = "second"
            """,
        )
    )
    assert manifest.expectation("vllm-0.28", "aiter-0.1.19", "kernel-exists").reason == "first"
    assert manifest.expectation("vllm-0.34", "aiter-0.1.19", "kernel-exists").reason == "second"
    assert manifest.expectation("vllm-0.28", "aiter-0.1.19", "total").reason == "second"


@pytest.mark.parametrize(
    "body, message",
    [
        ("[[expect]]\nrevision = '*'\nverdict = 'PROVED'\n", "row 1: reason must be one non-empty line"),
        (
            "[[expect]]\nrevision = '*'\nverdict = 'FINE'\nreason = 'x'\n",
            "row 1: verdict must be PROVED or VIOLATED",
        ),
        (
            "[[expect]]\nrevision = '*'\nverdict = 'UNKNOWN'\nreason = 'x'\n",
            "verdict must be PROVED or VIOLATED",
        ),
        ("[[expect]]\nverdict = 'PROVED'\nreason = 'x'\n", "row 1: no revision"),
        ("[[expect]]\nrevision = []\nverdict = 'PROVED'\nreason = 'x'\n", "revision must be a non-empty"),
        ("[[expect]]\nrevision = '*'\nverdict = 'PROVED'\nreason = 'x'\nwhy = 1\n", "unknown key(s) why"),
        ("[[expect]]\nrevision = 3\nverdict = 'PROVED'\nreason = 'x'\n", "revision must be"),
        ("expect = 3\n", "has no [[expect]] rows"),
        ("[other]\n", "unknown table(s) other"),
        ("[[expect]\n", "is not TOML"),
        ("", "has no [[expect]] rows"),
    ],
)
def test_a_malformed_manifest_is_one_line_and_exit_2(tmp_path, body, message):
    path = tmp_path / "m.toml"
    path.write_text(body)
    with pytest.raises(
        ManifestError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
    ):
        load_manifest(path)
    r = run("check", "--revision", "vllm-0.28", "--invariant", "total", "--expect", path)
    assert r.returncode == 2
    assert (
        r.stdout == ""
        and len(r.stderr.strip().splitlines()) == 1
        and message.split(":")[-1].strip() in r.stderr
    )


def test_a_missing_or_binary_manifest_is_one_line_and_exit_2(tmp_path):
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for path in (tmp_path / "missing.toml", binary, tmp_path):
        r = run("check", "--revision", "vllm-0.28", "--expect", path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (path, r.stderr)


def test_expect_and_no_expect_together_are_refused():
    r = run("check", "--expect", BUNDLED, "--no-expect")
    assert r.returncode == 2 and "contradict" in r.stderr


def test_sarif_files_expected_violations_as_suppressed_with_the_reason():
    r = run("check", "--revision", "vllm-0.27", "--registry", "aiter-0.1.19", "--format", "sarif")
    assert r.returncode == 0
    results = json.loads(r.stdout)["runs"][0]["results"]
    manifest = load_manifest()
    assert results
    for res in results:
        row = manifest.expectation("vllm-0.27", "aiter-0.1.19", res["ruleId"])
        assert res["suppressions"] == [{"kind": "external", "justification": row.reason}]


def test_junit_passes_expected_violations_and_fails_surprises(tmp_path):
    r = run("check", "--revision", "vllm-0.28", "--registry", "aiter-0.1.20", "--format", "junit")
    assert r.returncode == 0 and 'failures="0"' in r.stdout and "EXPECTED: " in r.stdout
    path = _manifest(tmp_path, '[[expect]]\nrevision = "*"\nverdict = "PROVED"\nreason = "x"\n')
    r = run(
        "check",
        "--revision",
        "vllm-0.28",
        "--registry",
        "aiter-0.1.20",
        "--format",
        "junit",
        "--expect",
        path,
    )
    assert (
        r.returncode == 1 and 'failures="6"' in r.stdout
    )  # gluon-only-where-built, kernel-exists, gluon-kv-in-bounds, known-wrong, kv-scale, total


@pytest.mark.slow  # 9 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_a_gate_mutant_of_0_28_0_makes_check_exit_1_naming_the_unexpected_verdict(tmp_path):
    """The 0.28.0 file with its fp8 test in use_gluon_decode negated, held to the bundled manifest's rows
    for vllm==0.28.0 (written for its path): fp8-never-reaches-gluon turns VIOLATED, a surprise."""
    from spec.analyses.mutants import release_mutants, shadow_tree

    text, mutants = release_mutants("0.28.0")
    (mutant,) = [m for m in mutants if m.id == "use_gluon_decode/negate/L920.11"]
    path = shadow_tree("0.28.0", mutant.apply(text.encode()), tmp_path / "tree")
    bundled = load_manifest()
    invariants = ("fp8-never-reaches-gluon", "builder-impl-agree")
    rows = []
    for inv in invariants:
        e = bundled.expectation("vllm==0.28.0", "aiter-0.1.20", inv)
        rows.append(
            f'[[expect]]\nrevision = "*"\ninvariant = "{inv}"\nverdict = "{e.verdict}"\nreason = "x"\n'
        )
    manifest = _manifest(tmp_path, "\n".join(rows))
    args = ["check", "--vllm", str(path), "--registry", "aiter-0.1.20", "--expect", manifest]
    for inv in invariants:
        args += ["--invariant", inv]
    r = run(*args)
    assert r.returncode == 1, r.stdout
    flat = " ".join(r.stdout.split())
    assert "1 surprise against" in flat
    assert "/ aiter-0.1.20 / fp8-never-reaches-gluon: VIOLATED, expected PROVED" in flat
