"""Mutation score: release-code mutants, our generated cases vs vLLM 0.28.0's shipped tests, equivalence.

Needs the cached vLLM 0.28.0 and 0.34.0 trees (downloaded once: ``network``).
Two 0.28.0 mutants run end to end (one killable by both suites, one
equivalent) and three DCP gate mutants of 0.34.0 (one killed by both, one
equivalent, one our cases leave alive that is reported unknown), about two
minutes on 2 cores.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.cli import mutate as mutate_cli
from spec.analyses import mutants as mutants_mod
from spec.analyses.mutants import (
    DCP_REGIONS,
    DCP_RELEASE,
    GATE,
    NOT_LIFTED,
    REGIONS,
    RELEASE,
    dcp_mutants,
    generate,
    release_mutants,
    shadow_tree,
)
from spec.analyses.mutation import MutantResult, MutationReport, dcp_score, prove_equivalence, score
from spec.proof.verdict import UNKNOWN

# The full mutation run (every mutant against both suites): CI's second step, `pytest -m slow`.
pytestmark = [pytest.mark.network, pytest.mark.slow]

KILLABLE = "use_gluon_decode/ror/L914.11"  # num_heads >= m -> > m: 16 heads on gfx950 go to Gluon
EQUIVALENT = "use_persistent_metadata/drop/L699.12/3"  # drops `max_qo_len >= 1`: every decode has qlen >= 1
# CPRR -> PLAIN: a gfx950 causal verify of qlen >= 3 runs plain (our cprr cases, test_dcp_decode_route)
DCP_KILLED = "_select_dcp_decode_route/route/L628.15/PLAIN"
# 64 -> 65 gathered fp8 heads fit gfx942's LDS: heads x dcp (2, 4 or 8) is never 65, so no step changes
DCP_EQUIVALENT = "_segmented_mla_fits_lds/const/L448.28/+1"
# cprr configured at any interleave: the model assumes interleave 1 (equivalent there), a shipped test asks 2
DCP_OUT_OF_SCOPE = "_asm_dcp_verify_configured/drop/L647.12/1"
REPO = Path(__file__).resolve().parents[1]
# Every file of ours, but the stubs that stand in for vLLM's modules (they share its names by design).
OURS = [
    path
    for folder in ("mla_model", "spec", "conformance", "docs", "tests")
    for ext in ("py", "md")
    for path in (REPO / folder).glob(f"**/*.{ext}")
    if "executed/stubs" not in path.as_posix()
]


@pytest.fixture(scope="module")
def release():
    return release_mutants(RELEASE)


@pytest.fixture(scope="module")
def report():
    return score(select=[KILLABLE, EQUIVALENT], workers=2)


@pytest.fixture(scope="module")
def dcp_release():
    return dcp_mutants(DCP_RELEASE)


@pytest.fixture(scope="module")
def dcp_report():
    return dcp_score(select=[DCP_KILLED, DCP_EQUIVALENT, DCP_OUT_OF_SCOPE], workers=2)


# --- the mutants ---------------------------------------------------------------------------------


def test_mutants_cover_every_region_with_stable_ids_and_apply_as_one_span(release):
    text, ms = release
    assert 30 <= len(ms) <= 70
    assert {m.function for m in ms} == set(REGIONS)
    assert {m.operator for m in ms} == {"ror", "drop", "negate", "const", "andor", "minmax"}
    assert len({m.id for m in ms}) == len(ms)
    assert [m.id for m in generate(text)] == [m.id for m in ms]  # deterministic
    original = text.encode()
    for m in ms:
        assert re.fullmatch(rf"{re.escape(m.function)}/{m.operator}/L\d+\.\d+(/[-+\w]+)?", m.id), m.id
        assert m.site == f"{m.function}:{m.line}"
        mutated = m.apply(original)
        assert mutated != text
        ast.parse(mutated)
        # only the span changed: everything before and after is the release's own text
        assert mutated.encode()[: m.start] == original[: m.start]
        assert mutated.encode().endswith(original[m.end :])


def test_the_shadow_tree_holds_the_mutant_and_links_the_rest(release, tmp_path):
    from spec.realcode.source import RELATIVE_PATH, release_tree, tree_of

    text, ms = release
    file = shadow_tree(RELEASE, ms[0].apply(text.encode()), tmp_path / "tree")
    assert tree_of(file) == (tmp_path / "tree").resolve()
    assert file == tmp_path / "tree" / RELATIVE_PATH and not file.is_symlink()
    assert file.read_text() != (release_tree(RELEASE) / RELATIVE_PATH).read_text()
    assert (tmp_path / "tree" / "vllm" / "v1" / "attention" / "backend.py").is_symlink()


def test_no_vllm_text_is_committed_with_the_mutation_code(release, dcp_release):
    # Import lines and signatures are vLLM's names (kept so model and code read side by side), not code.
    long_lines = {
        ln.strip()
        for text, _ in (release, dcp_release)
        for ln in text.splitlines()
        if len(ln.strip()) >= 40 and not ln.strip().startswith(("from ", "import ", "def ", ") -> "))
    }
    assert len(long_lines) > 400 and len(OURS) > 50
    for path in OURS:
        copied = long_lines & {ln.strip() for ln in path.read_text().splitlines()}
        assert not copied, f"{path.relative_to(REPO)} holds vLLM text: {sorted(copied)[:2]}"
    # hidden top-level folders are local caches and environments (a device run's .devcache), never committed
    files = REPO.glob("**/rocm_aiter_mla.py")
    assert not [f for f in files if not f.relative_to(REPO).parts[0].startswith(".")]


def test_dcp_mutants_cover_every_dcp_region_and_apply_as_one_span(release, dcp_release):
    text, ms = dcp_release
    assert 80 <= len(ms) <= 160
    assert {m.function for m in ms} == set(DCP_REGIONS)
    assert {m.operator for m in ms} == {"ror", "drop", "negate", "const", "andor", "flip", "elem", "route"}
    assert len({m.id for m in ms}) == len(ms)
    assert [m.id for m in generate(text, dcp=True)] == [m.id for m in ms]
    original = text.encode()
    for m in ms:
        mutated = m.apply(original)
        assert mutated != text
        ast.parse(mutated)
        assert mutated.encode()[: m.start] == original[: m.start]
        assert mutated.encode().endswith(original[m.end :])
    # the persistent gate contributes only the mutants that change its DCP term
    gate = [m for m in ms if m.function == GATE]
    assert gate and all("_is_row_view_dcp_route" in m.description for m in gate)
    # the DCP operators are the DCP set's: 0.28.0's mutants keep theirs
    assert not {m.operator for m in release[1]} & {"flip", "elem", "route"}


def test_a_region_the_lifting_does_not_read_is_never_provedequivalence(release, tmp_path):
    text, ms = release
    m = next(m for m in ms if m.function in NOT_LIFTED)
    file = shadow_tree(RELEASE, m.apply(text.encode()), tmp_path / "tree")
    assert prove_equivalence(m, file, 1000) == (UNKNOWN, "NOT_LIFTED")


def test_the_padded_head_count_is_part_of_the_equivalence(release, tmp_path):
    # max -> min in get_actual_mla_num_heads sizes the ASM output buffer with the unpadded heads:
    # neither suite kills it, and bind's route fields alone would call it equivalent
    text, ms = release
    m = next(m for m in ms if m.operator == "minmax")
    file = shadow_tree(RELEASE, m.apply(text.encode()), tmp_path / "tree")
    assert prove_equivalence(m, file, 20_000) == (False, "DIFFERENT")


# --- end to end ------------------------------------------------------------------------------------


def test_the_unmutated_release_passes_both_suites(report):
    b = report.baseline
    assert b["generated_disagreements"] == 0 and b["shipped_failed"] == 0
    assert b["shipped_items"] == report.shipped_items > 100 and report.generated_cases > 50


def test_a_killable_mutant_is_killed_by_both_suites(report):
    r = next(r for r in report.results if r.mutant.id == KILLABLE)
    assert r.killed_by_generated and r.killed_by_shipped and r.equivalent is False, r.to_json()
    assert all(k.startswith("gfx950-") and "-h16-" in k for k in r.generated_killers)
    assert all(k.startswith("tests/v1/attention/test_rocm_aiter_mla_") for k in r.shipped_killers)


def test_an_equivalent_mutant_is_proved_so_and_killed_by_neither(report):
    r = next(r for r in report.results if r.mutant.id == EQUIVALENT)
    assert r.equivalent is True and r.symbolic == "EQUIVALENT", r.to_json()
    assert not r.killed_by_generated and not r.killed_by_shipped


def test_the_report_totals_agree_with_the_rows_and_the_json(report):
    t = report.totals()
    rows = report.results
    assert t["mutants"] == len(rows) == 2
    assert t["killed_by_both"] + t["killed_only_by_generated"] == t["killed_by_generated"]
    assert t["killed_by_both"] + t["killed_only_by_shipped"] == t["killed_by_shipped"]
    assert (
        t["killed_by_both"]
        + t["killed_only_by_generated"]
        + t["killed_only_by_shipped"]
        + t["killed_by_neither"]
    ) == t["mutants"]
    data = json.loads(json.dumps(report.to_json()))
    assert data["totals"] == t
    for m, r in zip(data["mutants"], rows):
        assert {
            "id",
            "site",
            "description",
            "killed_by_generated",
            "generated_killers",
            "killed_by_shipped",
            "shipped_killers",
            "equivalent",
        } <= set(m)
        assert m["killed_by_generated"] == bool(m["generated_killers"]) and m["id"] == r.mutant.id


# --- the command's exit status ---------------------------------------------------------------------


def _fake(report: MutationReport, equivalent: object, generated: tuple[str, ...]) -> MutationReport:
    r = report.results[0]
    row = MutantResult(r.mutant, generated, r.shipped_killers, equivalent, "x")
    return MutationReport(report.release, (row,), report.generated_cases, report.shipped_items, 1.0, 1, {})


@pytest.mark.parametrize(
    "equivalent,generated,code", [(False, ("some-case",), 0), (True, (), 0), (False, (), 1), (UNKNOWN, (), 3)]
)
def test_exit_status_follows_the_survivors(report, monkeypatch, equivalent, generated, code):
    import spec.analyses.mutation

    monkeypatch.setattr(spec.analyses.mutation, "score", lambda **kw: _fake(report, equivalent, generated))
    for fmt in ("text", "json"):
        result = CliRunner().invoke(mutate_cli.mutate_command, ["--format", fmt])
        assert result.exit_code == code, result.output
    assert mutants_mod.RELEASE in result.output


def test_an_unknown_mutant_id_is_bad_input():
    result = CliRunner().invoke(mutate_cli.mutate_command, ["--mutant", "no/such/L1.0"])
    assert result.exit_code == 2 and "no mutant" in result.output


# --- DCP gate mutants of 0.34.0 ---------------------------------------------------------------------


def test_dcp_mutants_run_against_both_suites_after_the_baseline(dcp_report):
    b = dcp_report.baseline
    assert b["generated_disagreements"] == 0 and b["shipped_failed"] == 0
    assert b["shipped_items"] == dcp_report.shipped_items > 500 and dcp_report.generated_cases > 100
    assert (dcp_report.release, dcp_report.revision, dcp_report.registry) == (
        DCP_RELEASE,
        "vllm-0.34",
        "aiter-0.1.20",
    )


def test_a_dcp_route_mutant_is_killed_by_our_dcp_cases_and_the_shipped_tests(dcp_report):
    r = next(r for r in dcp_report.results if r.mutant.id == DCP_KILLED)
    assert r.killed_by_generated and r.killed_by_shipped and r.equivalent is False, r.to_json()
    # cprr is gfx950's, and only a step with DCP reaches the route
    assert all(k.startswith("gfx950-") and "-dcp" in k for k in r.generated_killers)
    assert any("test_dcp_decode_route" in k for k in r.shipped_killers)


def test_dcp_survivors_are_reported_as_what_they_are(dcp_report):
    rows = {r.mutant.id: r for r in dcp_report.results}
    equivalent, out_of_scope = rows[DCP_EQUIVALENT], rows[DCP_OUT_OF_SCOPE]
    assert equivalent.equivalent is True and equivalent.symbolic == "EQUIVALENT"
    assert not equivalent.killed_by_generated and not equivalent.killed_by_shipped and not equivalent.notes
    # the lifting (scoped to interleave 1) calls it equivalent, a shipped test kills it: never claimed
    assert out_of_scope.survives_generated and out_of_scope.killed_by_shipped
    assert (out_of_scope.equivalent, out_of_scope.symbolic) == (
        UNKNOWN,
        "EQUIVALENT (contradicted by a kill)",
    )
    data = json.loads(json.dumps(dcp_report.to_json()))
    assert data["totals"] == dcp_report.totals() and "generated_pending" not in data["totals"]
    assert data["generated_cases"] == dcp_report.generated_cases and data["revision"] == "vllm-0.34"
    assert all(m["killed_by_generated"] == bool(m["generated_killers"]) for m in data["mutants"])


def test_dcp_exit_status_follows_the_survivors_as_the_default_report_does(dcp_report, monkeypatch):
    import spec.analyses.mutation

    monkeypatch.setattr(spec.analyses.mutation, "dcp_score", lambda **kw: dcp_report)
    result = CliRunner().invoke(mutate_cli.mutate_command, ["--dcp", "--format", "text"])
    assert result.exit_code == 3, result.output  # the one survivor of our cases is unknown
    assert DCP_RELEASE in result.output and "vllm-0.34" in result.output and "pending" not in result.output
    assert (
        "test_dcp_decode_route" in result.output
        and f"unknown, not killed: {DCP_OUT_OF_SCOPE}" in result.output
    )
    survivor = next(r for r in dcp_report.results if r.mutant.id == DCP_OUT_OF_SCOPE)
    killed = MutationReport(
        DCP_RELEASE, (replace(survivor, generated_killers=("some-case",)),), 1, 1, 1.0, 1, {}, "vllm-0.34"
    )
    monkeypatch.setattr(spec.analyses.mutation, "dcp_score", lambda **kw: killed)
    assert CliRunner().invoke(mutate_cli.mutate_command, ["--dcp"]).exit_code == 0
