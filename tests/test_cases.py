"""Edge-shape cases: what `mla-spec cases` writes, and that the committed suite is what it writes today."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings

from conformance.case_modules import module_name, slug
from conformance.cli import main
from mla_model.case import case_id, parse_case_id, read_cases
from mla_model.revisions import REVISIONS
from spec.analyses.cases import generate
from spec.proof.strategies import shapes
from tests.params import regular_and_slow

GENERATED = Path(__file__).parent / "generated"


@pytest.mark.parametrize("revision", regular_and_slow(REVISIONS, "vllm-0.28", list(REVISIONS)[-1]))
def test_committed_generated_suite_is_what_mla_spec_writes_today(revision, tmp_path):
    result = CliRunner().invoke(main, ["cases", "--revision", revision, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("cases.jsonl", module_name(revision)):
        committed = GENERATED / slug(revision) / name
        assert committed.exists(), f"{committed} is missing: run mla-spec cases --out tests/generated"
        assert (tmp_path / name).read_bytes() == committed.read_bytes(), (
            f"{committed} is stale: run mla-spec cases --out tests/generated"
        )


def test_cases_carry_the_pr_51011_shapes_and_the_threshold_boundaries():
    old = {c.id: c for c in read_cases(GENERATED / "vllm_027" / "cases.jsonl")}
    fp8_gluon = [
        c
        for c in old.values()
        if c.shape.kv_cache_dtype == "fp8" and c.expected_route["path"] == "gluon_decode"
    ]
    assert any(
        c.shape.arch == "gfx950" and c.shape.num_heads == 1 and c.shape.max_qo_len == 1 for c in fp8_gluon
    )
    assert any(
        c.shape.spec_method in ("eagle", "dflash", "dspark")
        and c.expected_route["mtp_decode_qlen"] < c.shape.max_qo_len
        for c in old.values()
    )  # metadata sized below the step's qlen
    new = read_cases(GENERATED / "vllm_028" / "cases.jsonl")
    heads, qlens = {c.shape.num_heads for c in new}, {c.shape.max_qo_len for c in new}
    assert {15, 16} <= heads and {1, 2, 4, 5} <= qlens
    assert {c.shape.num_reqs for c in new} >= {1, 2, 32}
    assert {c.shape.kv_cache_bytes for c in new} >= {2 << 30, (2 << 30) + 1}
    assert not any(
        c.shape.kv_cache_dtype.startswith("fp8") and c.expected_route["path"].startswith("gluon") for c in new
    )


def test_every_mcdc_pair_is_a_single_condition_flip_that_changes_the_decision():
    cases = generate("vllm-0.28")
    by_origin: dict[str, list] = {}
    for c in cases:
        for origin in c.origin.split("; "):
            by_origin.setdefault(origin, []).append(c)
    mcdc = {o: cs for o, cs in by_origin.items() if o.startswith("mcdc ")}
    assert len(mcdc) >= 30
    for origin, pair in mcdc.items():
        decision = origin.split(":")[0].removeprefix("mcdc ")
        assert len(pair) == 2, origin
        a, b = pair
        moved = {k for k, v in a.shape.to_json().items() if b.shape.to_json()[k] != v}
        assert moved and len(moved) <= 2, (origin, moved)  # only the condition's fields move
        route_field = {"builder_use_gluon_verify": None}.get(decision, decision)
        if route_field in a.expected_route:
            assert a.expected_route[route_field] != b.expected_route[route_field], origin


@pytest.mark.slow
def test_generation_is_deterministic():
    first, second = generate("vllm-0.34"), generate("vllm-0.34")
    assert [c.to_json() for c in first] == [c.to_json() for c in second]


@settings(max_examples=200, deadline=None)
@given(shapes(valid=True, revision="vllm-0.28"), shapes(valid=True, revision="vllm-0.28"))
def test_case_ids_tell_valid_shapes_apart(a, b):
    assert (case_id(a) == case_id(b)) == (a == b)


def test_cli_refuses_a_vllm_module_for_two_revisions_and_a_file_as_suite_folder(tmp_path):
    runner = CliRunner()
    two = runner.invoke(
        main,
        [
            "cases",
            "--style",
            "vllm",
            "--revision",
            "vllm-0.27",
            "--revision",
            "vllm-0.28",
            "--out",
            str(tmp_path / "t.py"),
        ],
    )
    assert two.exit_code == 2 and "one --revision" in two.output
    (tmp_path / "f").write_text("")
    clash = runner.invoke(main, ["cases", "--revision", "vllm-0.28", "--out", str(tmp_path / "f")])
    assert clash.exit_code == 2 and "is a file" in clash.output


@settings(max_examples=300, deadline=None)
@given(shapes(valid=False))
def test_a_case_id_names_its_shape(shape):
    assert parse_case_id(case_id(shape)) == shape
