"""Mutation score: the catalogue applies, the PR grid is the PR's, z3's equivalence is sound, the CLI reports it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest
import z3
from click.testing import CliRunner

from conformance import cmd_mutate
from mla_model.case import case_id, expected_route
from mla_model.registry import load_registry
from mla_model.revisions import get_revision, vllm_028
from mla_model.shape import FIELDS
from spec import mutants, pr_grid
from spec.mutation import (
    NO_KERNEL, REGISTRY_ID, REVISION_ID, UNKNOWN, MutantResult, equivalence, generated_cases, kills, pinned_terms,
    score, z3_value,
)
from spec.prover import problem

REGISTRY = load_registry(REGISTRY_ID)
ORIGINAL = get_revision(REVISION_ID)


@pytest.fixture(scope="module")
def cases():
    return generated_cases()


@pytest.fixture(scope="module")
def report(cases):
    return score(cases)


# --- the catalogue ------------------------------------------------------------------------------


def test_catalogue_has_at_least_25_mutants_that_each_change_the_source():
    assert len(mutants.CATALOGUE) >= 25
    original = mutants.original_source()
    sources = {mutants.mutated_source(m) for m in mutants.CATALOGUE}
    assert original not in sources and len(sources) == len(mutants.CATALOGUE)
    for m in mutants.CATALOGUE:
        module = mutants.load(m)
        assert module.REVISION.id == f"{REVISION_ID}~{m.id}"


def test_a_snippet_must_occur_exactly_once_in_its_function():
    missing = mutants.Mutant("x", "-", "-", (mutants.Edit("use_gluon_decode", "num_heads < 99,", "True,"),))
    with pytest.raises(mutants.MutationError, match="occurs 0 times in use_gluon_decode"):
        mutants.mutated_source(missing)
    twice = mutants.Mutant("x", "-", "-", (mutants.Edit(None, "num_heads < 16,", "True,"),))
    with pytest.raises(mutants.MutationError, match="occurs 2 times in the module"):
        mutants.mutated_source(twice)
    with pytest.raises(mutants.MutationError, match="no function 'nope'"):
        mutants.mutated_source(mutants.Mutant("x", "-", "-", (mutants.Edit("nope", "a", "b"),)))


def test_mutants_leave_the_real_module_alone_and_the_unmutated_copy_pins_every_case(cases):
    gate = vllm_028.use_gluon_decode
    for m in mutants.CATALOGUE:
        mutants.load(m)
    assert vllm_028.use_gluon_decode is gate and vllm_028.REVISION.id == REVISION_ID
    copy = mutants.load(None).REVISION
    assert not [c.id for c in cases if kills(copy, REGISTRY, c)]


def test_a_mutant_that_rejects_a_pinned_shape_kills_it(cases):
    strict = replace(ORIGINAL, is_valid_num_heads=lambda h: h >= 16)
    assert any(kills(strict, REGISTRY, c) for c in cases if c.shape.num_heads < 16)


# --- the PR's grids -----------------------------------------------------------------------------


def test_pr_grid_is_facts_section_5_and_passes_on_vllm_028():
    counts = Counter(c.test for c in pr_grid.PR_GRID)
    assert counts == {
        "test_fp8_never_routes_to_gluon": 3 * 10 * 6,
        "test_fp8_never_routes_to_gluon_under_any_mode": 3 * 5 * 3,
        "test_large_head_counts_never_use_gluon": 5 * 5 * 3,
        "test_unquantized_divisor_heads_keep_gluon_decode": 2 * 4,
        "test_unquantized_non_divisor_heads_use_asm_decode": 2 * 7,
        "test_unquantized_small_head_verify_keeps_gluon": 2 * 3 * 4,
        "test_decode_and_verify_are_disjoint": 5 * 5 * 3,
        "test_padded_query_is_contiguous": 10,
        "test_pad_unpad_round_trip_preserves_head_order": 12,
        "test_mtp_decode_qlen_covers_reorder_batch_threshold": 3 * 3,
    }
    assert len({c.id for c in pr_grid.PR_GRID}) == len(pr_grid.PR_GRID)
    assert pr_grid.first_failure(mutants.load(None)) is None


def test_gluon_available_fixture_patches_only_while_a_case_runs():
    module = mutants.load(mutants.MUTANT_BY_ID["gd-arch-guard-dropped"])
    probe = module._gluon_mla_decode_supported
    case = next(c for c in pr_grid.PR_GRID if c.fixture)
    with pr_grid.gluon_available(module):
        assert module._gluon_mla_decode_supported(None) is True
    assert module._gluon_mla_decode_supported is probe
    assert pr_grid.fails(module, case) is None


def test_padding_semantics_follow_get_mla_padded_q():
    assert pr_grid.padded_heads("repeat_interleave", 3, 16) == 15 and not pr_grid.round_trips("repeat_interleave", 3, 16)
    assert pr_grid.padded_heads("tile", 3, 16) == 16 and pr_grid.round_trips("tile", 3, 16)
    assert pr_grid.padded_heads("none", 32, 32) == 32


# --- equivalence --------------------------------------------------------------------------------


def _pins(shape, variables):
    out = []
    for spec in FIELDS:
        value = getattr(shape, spec.name)
        out.append((variables[spec.name], z3.IntVal(spec.values.index(value)) if spec.kind == "enum" else
                    z3.BoolVal(value) if spec.kind == "bool" else z3.IntVal(value)))
    return out


def test_pinned_terms_are_expected_route_under_z3(cases):
    """The symbolic route fields the equivalence proof compares evaluate, on every case, to the pinned route."""
    p = problem(ORIGINAL, REGISTRY)
    terms = pinned_terms(p.decision, REGISTRY)
    assert list(terms) == list(cases[0].expected_route)
    for case in cases:
        pins = _pins(case.shape, p.symbolic.variables)
        got = {}
        for name, (term, values) in terms.items():
            value = z3.simplify(z3.substitute(z3_value(term, values), *pins))
            if values:
                got[name] = values[value.as_long()]
            elif z3.is_bool(value):
                got[name] = z3.is_true(value)
            else:
                got[name] = value.as_long()
        got["kernel"] = None if got["kernel"] == NO_KERNEL else got["kernel"]
        got["aiter_persistent"] = None if got["aiter_persistent"] == -1 else bool(got["aiter_persistent"])
        assert got == case.expected_route, case.id


def test_equivalence_proves_and_refutes():
    eq, witness = equivalence(mutants.load(mutants.MUTANT_BY_ID["request-wants-not-gate"]).REVISION, ORIGINAL, REGISTRY)
    assert eq is True and witness is None
    mutant = mutants.load(mutants.MUTANT_BY_ID["gate-heads-ge-15"]).REVISION
    eq, witness = equivalence(mutant, ORIGINAL, REGISTRY)
    assert eq is False and ORIGINAL.is_valid(witness, REGISTRY)
    assert expected_route(mutant, REGISTRY, witness) != expected_route(ORIGINAL, REGISTRY, witness)
    assert witness.num_heads == 15 and witness.max_qo_len == 5  # minimised onto the boundary


def test_unknown_is_never_equivalent():
    r = MutantResult(mutants.CATALOGUE[0], False, None, False, None, UNKNOWN, None)
    assert r.survives_generated and r.to_json()["equivalent"] == "unknown"


# --- the score ----------------------------------------------------------------------------------


def test_generated_suite_kills_every_mutant_not_proved_equivalent_with_fewer_cases(report):
    survivors = {r.mutant.id: case_id(r.witness) if r.witness else r.equivalent
                 for r in report.results if r.survives_generated}
    assert not survivors, f"no generated case kills (mutant: z3's killing shape): {survivors}"
    assert report.generated_cases < report.pr_grid_cases
    assert all(r.equivalent is False for r in report.results if r.killed_by_generated)


def test_exactly_the_mutants_meant_as_equivalent_are_proved_so(report):
    proved = {r.mutant.id for r in report.results if r.equivalent is True}
    assert proved == {m.id for m in mutants.CATALOGUE if "(equivalent" in m.description}


def test_pr_grid_kills_fewer_mutants_than_the_generated_suite(report):
    killed = {r.mutant.id for r in report.results if r.killed_by_pr_grid}
    assert {"gd-dtype-guard-dropped", "gd-mode-before-dtype", "mtp-qlen-k-plus-1", "mtp-qlen-whitelist"} <= killed
    assert not killed & {r.mutant.id for r in report.results if r.equivalent is True}
    assert len(killed) < sum(r.killed_by_generated for r in report.results)


def test_cli_json_schema_and_text_table(report, monkeypatch):
    monkeypatch.setattr(cmd_mutate, "score", lambda timeout_ms: report)
    out = CliRunner().invoke(cmd_mutate.mutate_command, ["--format", "json"])
    data = json.loads(out.output)
    assert set(data) == {"mutants", "generated_cases", "pr_grid_cases"}
    assert data["generated_cases"] == report.generated_cases and data["pr_grid_cases"] == len(pr_grid.PR_GRID)
    assert [m["id"] for m in data["mutants"]] == [m.id for m in mutants.CATALOGUE]
    for m in data["mutants"]:
        assert {"id", "description", "equivalent", "killed_by_generated", "killed_by_pr_grid"} <= set(m)
        assert m["equivalent"] in (True, False, "unknown")
    survives = any(r.survives_generated for r in report.results)
    assert out.exit_code == (1 if survives else 0)
    text = CliRunner().invoke(cmd_mutate.mutate_command, [], terminal_width=160)
    assert text.exit_code == out.exit_code
    assert "gd-dtype-guard-dropped" in text.output and "proved" in text.output
    assert f"generated ({report.generated_cases} cases)" in text.output
