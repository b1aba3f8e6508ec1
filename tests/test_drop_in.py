"""The vLLM drop-in module (``cases --style vllm``) run through the shim against real releases.

Each revision's module must pass on its own release and, on the neighbouring
release, fail exactly the (decision, case) pairs where the neighbour's model
revision states other facts: so a failure means the two releases route that
case differently, and every such case is caught.  The regular run keeps
0.28's module on its own release and on 0.27.1 (the #51011 fix, with the
numeric part's fp8 → Gluon case); every other revision and pair runs under
``-m slow``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from conformance.drop_in import facts
from conformance.vllm_module import in_scope, model_pins, numeric_cases, released_revisions
from mla_model.registry import load_registry
from mla_model.revisions import RELEASE_OF_REVISION, get_revision
from spec.analyses.cases import generate
from spec.analyses.mutants import RELATIVE_PATH, shadow_tree
from spec.realcode.executed.differential import expected
from spec.realcode.source import release_tree
from tests.cli import run
from tests.params import regular_and_slow

REVISIONS = released_revisions()
PAIRS = [(a, b) for x, y in zip(REVISIONS, REVISIONS[1:]) for a, b in ((x, y), (y, x))]
REPRESENTATIVE = ("vllm-0.28", "vllm-0.27")
# The pairs whose models state the same facts for every case of the module that both model: 0.29 adds
# DCP, out of 0.28's scope (67 of 0.29's 146 cases), and 0.30 changes only non-causal steps, out of
# 0.29's (5 of 0.30's 152).
SAME_FACTS = {
    ("vllm-0.28", "vllm-0.29"),
    ("vllm-0.29", "vllm-0.28"),
    ("vllm-0.29", "vllm-0.30"),
    ("vllm-0.30", "vllm-0.29"),
}


@cache
def _generated(revision: str, folder: Path) -> tuple[Path, list]:
    """The revision's drop-in module, as ``cases --style vllm`` writes it, and its cases."""
    module = folder / f"test_{revision.replace('-', '_').replace('.', '')}_dropin.py"
    r = run("cases", "--style", "vllm", "--revision", revision, "--out", str(module))
    assert r.returncode == 0, r.stderr
    cases = generate(revision)  # the solver is deterministic: the cases the module was written from
    assert all(f"'{c.id}'" in module.read_text() for c in cases)
    return module, cases


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("dropin")


@cache
def _shim(module: Path, release: str, *extra: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the failed test ids ``test_x[case]``, the passed ones) of the module run through the shim; one run
    per module, release and options in a worker."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.vllm_shim",
            "--vllm",
            release,
            *extra,
            module.name,
            "-q",
            "--tb=no",
        ]
        + ["-rfp"],
        capture_output=True,
        text=True,
        cwd=module.parent,
        timeout=600,
    )
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    # ``FAILED path::test_x[case]``, followed by `` - message`` where the terminal is wide enough or
    # pytest sees a CI environment (``CI`` set: it then never truncates the summary line).
    ids = {
        kind: {
            line.split("::", 1)[1].split(" - ", 1)[0].strip()
            for line in r.stdout.splitlines()
            if line.startswith(kind)
        }
        for kind in ("FAILED", "PASSED")
    }
    assert (r.returncode == 1) == bool(ids["FAILED"]), r.stdout.strip().splitlines()[-1]
    return frozenset(ids["FAILED"]), frozenset(ids["PASSED"])


def _numeric_ids(revision: str, cases: list) -> set[str]:
    return {f"test_numeric_matches_float32_reference[{c.id}]" for c in numeric_cases(revision, cases)}


def _differing(module_revision: str, release_revision: str, cases: list) -> tuple[set[str], set[str]]:
    """(the routing tests that must fail, the cases outside the neighbour model's scope, where either
    verdict is allowed) for the module of ``module_revision`` run on ``release_revision``'s release."""
    mine, theirs = get_revision(module_revision), get_revision(release_revision)
    must, unknown = set(), set()
    for c in cases:
        reg = load_registry(c.registry)
        if not in_scope(theirs, reg, c.shape):
            unknown.add(c.id)
            continue
        have = facts(expected(theirs, reg, c.shape, {}), int(theirs.reorder_batch_threshold(c.shape)))
        for decision, want in model_pins(mine, reg, c.shape).items():
            if {k: have.get(k) for k in want} != want:
                must.add(f"test_{decision}[{c.id}]")
    return must, unknown


@pytest.mark.network
@pytest.mark.parametrize("revision", regular_and_slow(REVISIONS, "vllm-0.28", ids=str))
def test_module_passes_on_its_own_release(revision, folder):
    module, cases = _generated(revision, folder)
    failed, passed = _shim(module, RELEASE_OF_REVISION[revision])
    assert not failed, sorted(failed)[:10]
    assert len(passed) > len(cases)  # every case pins at least its outcome, most several decisions
    assert _numeric_ids(revision, cases) <= passed  # one numeric step per route, each within tolerance
    if revision == REPRESENTATIVE[0]:
        assert f" {len(passed)} passed in " in _recorded_sample()


@pytest.mark.network
@pytest.mark.parametrize("pair", regular_and_slow(PAIRS, REPRESENTATIVE, ids="-on-".join))
def test_module_fails_on_the_neighbour_exactly_where_routes_differ(pair, folder):
    """The module fails on the neighbour's release exactly where the two models state different facts.

    Where they state the same facts for every case both model (:data:`SAME_FACTS`: 0.28 / 0.29 and
    0.29 / 0.30, both ways), the neighbour's release must pass every routing test of the module, the
    cases outside the neighbour model's scope aside; every other pair must have cases that fail.
    """
    mine, theirs = pair
    module, cases = _generated(mine, folder)
    failed, passed = _shim(module, RELEASE_OF_REVISION[theirs])
    must, unknown = _differing(mine, theirs, cases)
    assert bool(must) == (pair not in SAME_FACTS), sorted(must)[:10]
    known = {f for f in failed | must if f.split("[", 1)[1][:-1] not in unknown}
    assert {f for f in known if f in failed and not f.startswith("test_numeric")} == {
        f for f in known if f in must
    }
    if pair == REPRESENTATIVE:
        _check_recorded_on_neighbour(failed, passed)
        # The numeric part: on 0.27.1 the fp8 cache goes to Gluon, which ignores the KV scale.
        assert "test_numeric_matches_float32_reference[gfx950-fp8-h1-q1-nospec-auto-qbf16]" in failed


UTILS = Path("tests/v1/attention/utils.py")


@pytest.mark.slow  # 6 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_numeric_part_runs_the_trees_own_test_utilities(folder, tmp_path):
    """The numeric steps are built by the tree's ``create_common_attn_metadata``: an edit that makes it
    raise fails every numeric test, with the edit's message, and no routing test."""
    module, cases = _generated("vllm-0.28", folder)
    release_file = shadow_tree(
        "0.28.0", (release_tree("0.28.0") / RELATIVE_PATH).read_text(), tmp_path / "tree"
    )
    text = (release_tree("0.28.0") / UTILS).read_text()
    head = "def create_common_attn_metadata("
    body = text.index(":\n", text.index(head)) + 2
    edited = text[:body] + '    raise RuntimeError("edited create_common_attn_metadata")\n' + text[body:]
    shadow_tree("0.28.0", edited, tmp_path / "tree", UTILS)
    failed, passed = _shim(module, str(release_file), "--tree", str(tmp_path / "tree"))
    assert failed == _numeric_ids("vllm-0.28", cases)
    assert passed and not any(p.startswith("test_numeric") for p in passed)


@pytest.mark.network
@pytest.mark.slow  # the shim's plumbing for a lone file's tree
def test_a_tree_without_test_utilities_is_one_error_line(folder, tmp_path):
    module, _ = _generated("vllm-0.28", folder)
    release_file = shadow_tree(
        "0.28.0", (release_tree("0.28.0") / RELATIVE_PATH).read_text(), tmp_path / "tree"
    )
    (tmp_path / "tree" / "tests").unlink()
    (tmp_path / "tree" / "tests").mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "conformance.vllm_shim", "--vllm", str(release_file), "--tree"]
        + [str(tmp_path / "tree"), module.name, "-q"],
        capture_output=True,
        text=True,
        cwd=module.parent,
        timeout=300,
    )
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and "tests/v1/attention/utils.py" in r.stderr, r.stderr


def test_device_cuda_without_a_cuda_device_is_one_error_line(tmp_path):
    """The module's decode steps run on ``--device``: without a CUDA device, the shim refuses the flag
    before it runs anything, rather than failing every test."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the GPU acceptance run (benchmarks.gpu) covers --device cuda")
    module = tmp_path / "test_module.py"
    module.write_text("def test_nothing():\n    pass\n")
    r = subprocess.run(
        [sys.executable, "-m", "conformance.vllm_shim", "--vllm", "0.28.0", "--device", "cuda", str(module)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr == "mla-spec: error: --device cuda: no CUDA device is visible here\n"


def _recorded_sample() -> str:
    """docs/reference/cases.md's section on the drop-in module, whose recorded runs of 0.28's module on
    0.28.0 and 0.27.1 (counts, numeric failures, per-decision failure counts) the tests check."""
    doc = (Path(__file__).resolve().parents[1] / "docs/reference/cases.md").read_text()
    section = doc[doc.index("### A drop-in module for vLLM") : doc.index("### One file for the GPU replay")]
    return " ".join(section.split())


def _check_recorded_on_neighbour(failed: frozenset[str], passed: frozenset[str]) -> None:
    sample = _recorded_sample()
    assert f" {len(failed)} failed, {len(passed)} passed in " in sample
    numeric = {f for f in failed if f.startswith("test_numeric")}
    assert numeric == set(re.findall(r"::(test_numeric_matches_float32_reference\[[^\]]+\])", sample))
    for decision in ("gluon_predicates", "persistent_gate", "asm_request", "triton_verify", "outcome"):
        count = sum(1 for f in failed if f.startswith(f"test_{decision}["))
        assert f"{count} `test_{decision}`" in sample, decision
    count = sum(1 for f in failed if f.startswith("test_threshold["))
    assert f"{count} `test_threshold`" in sample
