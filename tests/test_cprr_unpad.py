"""The CPRR route's unpad (sources §61): vLLM 0.31.0-0.34.0 pad the DCP-gathered query to the cprr kernel's
head count by repeat_interleave where the heads divide it, then keep ``o[:, :heads]``, which undoes a tile
and not a repeat.  From 0.32.0 (CPRR by default) 2, 4 or 8 gathered heads come back as copies of other heads:
head-padding-round-trips is VIOLATED there, the step's symptom is a silent wrong output and its cases predict
MISMATCH; a CPRR step at 16 gathered heads (no padding) or a tile-padded one (24 -> 32) stays right.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conformance.backends import load_backend
from conformance.runner import run_case
from mla_model.case import Case, expected_outcome
from mla_model.decision import decide
from mla_model.failures import symptom_of
from mla_model.registry import load_registry
from mla_model.revisions import dcp_era, get_revision, vllm_034
from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import PROVED, VIOLATED, check

ROOT = Path(__file__).parent
ROUND_TRIPS = INVARIANT_BY_ID["head-padding-round-trips"]
REGISTRY = "aiter-0.1.20"


def _cprr_step(gathered: int, dcp: int = 2) -> Shape:
    """A gfx950 bf16 MTP verify step (qlen 3) the CPRR route takes: ``gathered`` heads over ``dcp`` ranks."""
    return Shape(
        arch="gfx950",
        num_heads=gathered // dcp,
        dcp_world_size=dcp,
        max_qo_len=3,
        spec_method="mtp",
        num_spec_tokens=2,
    )


def _decide(revision: str, shape: Shape):
    return decide(get_revision(revision), load_registry(REGISTRY), shape)


@pytest.mark.parametrize("revision", ["vllm-0.32", "vllm-0.33", "vllm-0.34"])
@pytest.mark.parametrize(("gathered", "dcp"), [(2, 2), (8, 2), (8, 4), (8, 8), (4, 4)])
def test_repeat_padded_cprr_heads_come_back_wrong(revision, gathered, dcp):
    d = _decide(revision, _cprr_step(gathered, dcp))
    assert (d.route.dcp_route, d.route.head_padding, d.route.head_unpad) == (
        "cprr",
        "repeat_interleave",
        "prefix",
    )
    assert not ROUND_TRIPS.holds(d)
    symptom = symptom_of(d, load_registry(REGISTRY))
    assert (symptom.kind, symptom.cause) == ("silent-wrong-output", "head_unpad")
    assert f"keeps o[:, :{gathered}]" in symptom.message


@pytest.mark.parametrize("revision", ["vllm-0.32", "vllm-0.34"])
@pytest.mark.parametrize(("gathered", "padding"), [(16, "none"), (24, "tile"), (48, "tile"), (32, "none")])
def test_cprr_steps_without_a_repeat_pad_stay_right(revision, gathered, padding):
    shape = _cprr_step(gathered, 8)
    d = _decide(revision, shape)
    assert (d.route.dcp_route, d.route.head_padding) == ("cprr", padding)
    assert ROUND_TRIPS.holds(d)
    assert expected_outcome(get_revision(revision), load_registry(REGISTRY), shape) == {
        "status": "PASS",
        "cause": "none",
    }


def test_0_31_keeps_the_segmented_route_so_its_round_trip_holds():
    """0.31.0 has the same cut, but CPRR only with VLLM_ROCM_AITER_MLA_DCP_VERIFY=asm (out of scope)."""
    d = _decide("vllm-0.31", _cprr_step(8, 4))
    assert d.route.dcp_route == "segmented" and ROUND_TRIPS.holds(d)
    assert check(get_revision("vllm-0.31"), REGISTRY, ROUND_TRIPS).verdict == PROVED


def test_the_prover_finds_it_on_0_34_only_on_the_cprr_route_with_heads_dividing_16():
    result = check(get_revision("vllm-0.34"), REGISTRY, ROUND_TRIPS)
    assert result.verdict == VIOLATED
    for cex in result.counterexamples:
        shape = cex.shape
        gathered = shape.num_heads * shape.dcp_world_size
        d = _decide("vllm-0.34", shape)
        assert d.route.dcp_route == "cprr" and gathered in (2, 4, 8), shape


def test_the_cut_that_undoes_the_pad_proves_it(monkeypatch):
    """0.34.0 with get_mla_unpadded_o's cut on the CPRR route too: the round trip is proved, so the violation
    is that cut and nothing else."""
    from mla_model.revisions.base import unpad_of

    real = dcp_era.asm_query_heads

    def repaired(dcp_route, cprr_heads, heads, m):
        padded, padding, _ = real(dcp_route, cprr_heads, heads, m)
        return padded, padding, unpad_of(padding)

    monkeypatch.setattr(dcp_era, "asm_query_heads", repaired)
    revision = dataclasses.replace(vllm_034.REVISION, id="repaired-cprr-unpad")
    assert check(revision, REGISTRY, ROUND_TRIPS).verdict == PROVED


def _committed_case(revision_dir: str, case_id: str) -> Case:
    for line in (ROOT / "generated" / revision_dir / "cases.jsonl").read_text().splitlines():
        data = json.loads(line)
        if data["id"] == case_id:
            return Case.from_json(data)
    raise AssertionError(f"{case_id} is not in tests/generated/{revision_dir}")


@pytest.mark.parametrize(
    ("case_id", "status"),
    [
        ("gfx950-auto-h1-q3-mtp2-auto-dcp8", "MISMATCH"),  # 8 gathered heads
        ("gfx950-auto-h4-q3-mtp2-auto-dcp2", "MISMATCH"),
        ("gfx950-auto-h2-q3-mtp2-auto-dcp8", "PASS"),  # 16 gathered heads: nothing padded
        ("gfx950-auto-h3-q3-mtp2-auto-dcp8", "PASS"),  # 24 -> 32 by tile: the prefix undoes it
    ],
)
def test_the_committed_cases_predict_what_the_release_does(case_id, status):
    """What the replay of vLLM 0.34.0 showed (docs/explanation/findings.md F10): MISMATCH at 2 or 8
    gathered heads, PASS elsewhere; the model backend's emulation of the route agrees."""
    case = _committed_case("vllm_034", case_id)
    assert case.expected_outcome["status"] == status
    record = run_case(case, load_backend("model"), "cpu", 16)
    assert record["status"] == status, record["detail"]


def test_the_manifest_and_the_readme_expect_it_on_0_32_to_0_34_only():
    from conformance import docgen
    from mla_model.revisions import REVISIONS
    from spec.proof.expectations import load_manifest

    manifest = load_manifest()
    for revision in REVISIONS:
        for registry in ("aiter-0.1.19", "aiter-0.1.20"):
            row = manifest.expectation(revision, registry, ROUND_TRIPS.id)
            assert row is not None
            wanted = VIOLATED if revision in ("vllm-0.32", "vllm-0.33", "vllm-0.34") else PROVED
            assert row.verdict == wanted, (revision, registry)
    readme = " ".join((docgen.REPO / "README.md").read_text().split())
    assert "0.32-0.34 `head-padding-round-trips`" in readme
