"""NEW violations inside a class the baseline has (spec.proof.growth).

Class identity is a class's view values and its smallest counterexample's route, so an edit that only sends
more shapes into a class its baseline has adds no NEW class; check then asks z3 for a shape the file
violates where the baseline holds or refuses it.  The edit here is the detection corpus's
``causal-verify-by-heads`` (0.34.0's persistent gate without its ``not causal`` operand), which class by
class check passed as unchanged.  The z3 answer is held to a brute-force run over a box of shapes.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from mla_model.decision import decide
from mla_model.registry import load_registry
from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID
from tests.cli import run

pytestmark = pytest.mark.network

# 0.34.0's persistent gate (L2056-2058): a non-causal block keeps the schedule whatever its head count.
BY_HEADS = "                self._decode_num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS\n"
NOT_CAUSAL = "                not causal\n" + BY_HEADS.replace("self.", "or self.", 1)


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    from spec.analyses.mutants import shadow_tree
    from spec.realcode.source import fetch_release

    text = fetch_release("0.34.0").read_text()
    assert text.count(NOT_CAUSAL) == 1
    return shadow_tree("0.34.0", text.replace(NOT_CAUSAL, BY_HEADS), tmp_path_factory.mktemp("t") / "tree")


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
def test_a_violation_moved_into_a_class_the_baseline_has_is_a_surprise_with_its_least_shape(edited):
    out = run("check", edited, "--invariant", "kernel-exists", "--format", "json", "--no-execute")
    assert out.returncode == 1, out.stderr
    (r,) = [r for r in json.loads(out.stdout)["results"] if r["registry"] == "aiter-0.1.20"]
    assert r["baseline"]["new"] == 0 and r["surprise"]  # no NEW class, and still a surprise
    grown = r["baseline"]["grown"]
    assert grown["baseline"] == "vllm==0.34.0 holds there"
    assert grown["route"]["path"] == "asm_nonpersistent"
    shape = grown["shape"]
    assert (shape["arch"], shape["num_heads"], shape["max_qo_len"], shape["causal"]) == (
        "gfx950",
        1,
        5,
        False,
    )
    text = run("check", edited, "--invariant", "kernel-exists", "--no-execute").stdout
    assert "NEW violations inside a class the baseline has" in text


def test_the_release_against_itself_grows_nowhere():
    from spec.proof.growth import growth
    from spec.realcode.revision import real_revision

    rev = real_revision("0.34.0")
    assert growth(rev, rev, "aiter-0.1.20", list(INVARIANT_BY_ID.values())) == {}


def test_z3s_growth_is_the_brute_force_growth_on_a_box(edited):
    """The box holds shapes the file violates kernel-exists at where the baseline does not, and z3's least
    such shape is one of them."""
    from spec.proof.growth import growth
    from spec.realcode.revision import real_revision

    reg = load_registry("aiter-0.1.20")
    inv = INVARIANT_BY_ID["kernel-exists"]
    file, base = real_revision(str(edited)), real_revision("0.34.0")

    def violated(rev, s):
        return all(ok for _, ok in rev.validity(s, reg)) and not inv.holds(decide(rev, reg, s))

    box = [
        replace(
            Shape(),
            arch=a,
            kv_cache_dtype=kv,
            num_heads=h,
            max_qo_len=q,
            causal=c,
            spec_method="dflash",
            num_spec_tokens=4,
        )
        for a, kv, h, q, c in itertools.product(
            ("gfx942", "gfx950"), ("auto", "fp8"), (1, 2, 8, 16), (1, 2, 5, 8), (True, False)
        )
    ]
    brute = [s for s in box if violated(file, s) and not violated(base, s)]
    found = growth(file, base, "aiter-0.1.20", [inv])
    assert brute and found["kernel-exists"].shape in brute
