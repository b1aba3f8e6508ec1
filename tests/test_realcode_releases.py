"""The real vLLM releases (fetched from PyPI once, cached): what #51011 changed, proved on the code.

Marked ``network``: they download sdists with pip on first use (about 40 MB
each, cached in ~/.cache/mla-spec). CI runs them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import PROVED, VIOLATED, check
from spec.realcode.bind import bind
from spec.realcode.revision import real_revision
from tests.params import regular_and_slow

pytestmark = pytest.mark.network


def test_0_27_1_real_code_sends_fp8_to_gluon_and_sizes_metadata_from_the_whitelist():
    rev = real_revision("0.27.1")
    fp8 = check(rev, "aiter-0.1.19", INVARIANT_BY_ID["fp8-never-reaches-gluon"])
    assert fp8.verdict == VIOLATED
    assert any(
        c.shape.arch == "gfx950" and c.shape.max_qo_len == 1 and 16 % c.shape.num_heads == 0
        for c in fp8.counterexamples
    )
    sizing = check(rev, "aiter-0.1.19", INVARIANT_BY_ID["metadata-covers-qlen"])
    assert sizing.verdict == VIOLATED
    assert {c.shape.spec_method for c in sizing.counterexamples} & {"dflash", "dspark", "eagle"}


def test_0_28_0_real_code_proves_both_absent():
    rev = real_revision("0.28.0")
    for registry in ("aiter-0.1.19", "aiter-0.1.20"):
        for inv in ("fp8-never-reaches-gluon", "metadata-covers-qlen", "block-n-key-exists"):
            assert check(rev, registry, INVARIANT_BY_ID[inv]).verdict == PROVED, (registry, inv)


@pytest.mark.parametrize(
    "release, model",
    regular_and_slow(
        [("0.27.1", "vllm-0.27"), ("0.28.0", "vllm-0.28"), ("0.34.0", "vllm-0.34")],
        ("0.28.0", "vllm-0.28"),
        ids="-".join,
        unpack=True,
    ),
)
def test_model_revisions_are_equivalent_to_the_real_predicates(release, model):
    rows = bind(release, model, symbolic=True).rows
    symbolic = [r for r in rows if r.method == "symbolic"]
    assert symbolic and all(r.verdict == "EQUIVALENT" for r in symbolic), [r.to_json() for r in symbolic]
    # Every point of each predicate's box too (0.27.1 has no use_gluon_verify to compare).
    absent = {"use_gluon_verify"} if release == "0.27.1" else set()
    predicates = ("use_gluon_decode", "use_gluon_verify", "is_valid_num_heads", "get_actual_mla_num_heads")
    bounded = {r.function: r.verdict for r in rows if r.method == "bounded"}
    assert bounded == {name: "UNSUPPORTED" if name in absent else "EQUIVALENT" for name in predicates}


def test_a_release_that_does_not_exist_is_one_line_exit_2():
    out = subprocess.run(
        [sys.executable, "-m", "conformance", "check", "--vllm", "0.0.999"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "0.0.999" in lines[0], out.stderr


def test_a_release_has_one_spelling_everywhere():
    from spec.realcode.source import resolve

    assert resolve("vllm==0.28.0").label == resolve("0.28.0").label == "vllm==0.28.0"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["relative", "absolute", "lone copy"])
def test_bind_on_the_unedited_0_34_0_file_by_path_picks_its_model_and_finds_it_equivalent(where, tmp_path):
    """By a relative path (from the tree's root), an absolute one, or a copy outside any vLLM tree: bind
    takes vllm-0.34 without --revision (from the tree's PKG-INFO, or for the copy the release whose file it
    is, whose tree gives the threshold) and finds every function EQUIVALENT, 0 executed disagreements."""
    import json
    import shutil

    from spec.realcode.source import RELATIVE_PATH, release_tree

    tree = release_tree("0.34.0")
    path, cwd = {
        "relative": (str(RELATIVE_PATH), tree),
        "absolute": (str(tree / RELATIVE_PATH), tmp_path),
        "lone copy": ("rocm_aiter_mla.py", tmp_path),
    }[where]
    if where == "lone copy":
        shutil.copy(tree / RELATIVE_PATH, tmp_path / path)
    out = subprocess.run(
        [sys.executable, "-m", "conformance", "bind", "--vllm", path, "--shapes", "100", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    result = json.loads(out.stdout)
    assert result["revision"] == "vllm-0.34", result["revision_chosen_as"]
    assert {f["verdict"] for f in result["functions"]} == {"EQUIVALENT"}
    assert result["executed"]["disagreements"] == [] and result["executed"]["shapes"] > 100
