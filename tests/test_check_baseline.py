"""``check --vllm FILE`` against a baseline, class by class (issue 24 item 1).

A gate file is compared with the release it comes from (its vLLM tree's version, else the release closest
by content), or with ``--baseline RELEASE|PATH``; ``--baseline none`` is the manifest alone.  A class's
identity is its view values and route (:mod:`spec.proof.classes`), so an unedited release file has no NEW
class against its own release, in its tree or as a lone copy; an edit that adds a class exits 1 naming it
even where the invariant was VIOLATED already; an edit that removes one reports it GONE (fixed).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from spec.proof.classes import ABSENT, NEW, UNCHANGED, Baseline, BaselineResult, class_id, compare_classes
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import check
from spec.proof.verdict import UNKNOWN, VIOLATED
from spec.realcode.release_of import release_of, tree_version
from tests.cli import run

RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
# 0.34.0's AiterMLAHelper: the head count small-head ASM decode pads to (L2404).
PAD_16 = "    _AITER_MIN_MLA_HEADS: Final = 16\n"
# 0.34.0's use_gluon_decode (L2573-2575): the small-head mode knob; pinned to "asm", Gluon never decodes.
MODE_KNOB = '        mode = _aiter_mla_small_head_mode()\n        if mode == "asm":\n'


@pytest.fixture(scope="module")
def kernel_exists():
    """vllm-0.34's kernel-exists classes with aiter-0.1.20 (a model revision: no network)."""
    result = check("vllm-0.34", "aiter-0.1.20", INVARIANT_BY_ID["kernel-exists"])
    assert result.verdict == VIOLATED and len(result.counterexamples) >= 3
    return result


def _baseline(result) -> Baseline:
    return Baseline("base", "a test", {(result.registry, result.invariant): BaselineResult.of(result)})


def test_a_class_identity_is_its_view_and_route_not_their_order(kernel_exists):
    c = kernel_exists.counterexamples[0]
    reordered = replace(c, view=dict(reversed(c.view.items())), route=dict(reversed(c.route.items())))
    assert class_id(reordered) == class_id(c)
    other_shape = replace(c, shape=replace(c.shape, num_reqs=c.shape.num_reqs + 1))
    assert class_id(other_shape) == class_id(c)  # the shape is not the identity, its route is
    padded = {**c.route, "padded_q_heads": c.route["padded_q_heads"] * 2}
    assert class_id(replace(c, route=padded)) != class_id(c)
    off_asm = replace(c, route={**c.route, "path": "gluon_decode"})
    assert class_id(replace(off_asm, route={**off_asm.route, "padded_q_heads": 99})) == class_id(off_asm)
    assert len({class_id(x) for x in kernel_exists.counterexamples}) == len(kernel_exists.counterexamples)


def test_each_class_is_new_unchanged_or_gone_and_only_a_new_one_is_a_surprise(kernel_exists):
    first, *rest = kernel_exists.counterexamples
    moved = replace(first, route={**first.route, "padded_q_heads": first.route["padded_q_heads"] * 2})
    edited = replace(kernel_exists, counterexamples=[*rest, moved])
    (o,) = compare_classes([edited], _baseline(kernel_exists))
    assert [class_id(c) for c in o.new] == [class_id(moved)] and o.state(moved) == NEW
    assert len(o.unchanged) == len(rest) and all(o.state(c) == UNCHANGED for c in rest)
    assert [g["class_id"] for g in o.gone] == [class_id(first)]
    assert o.surprise and o.counts
    assert o.to_json()["baseline"]["absent"][0]["baseline_state"] == ABSENT
    (same,) = compare_classes([kernel_exists], _baseline(kernel_exists))
    assert not same.surprise and not same.new and not same.gone
    (fewer,) = compare_classes([replace(kernel_exists, counterexamples=rest)], _baseline(kernel_exists))
    assert not fewer.surprise and len(fewer.gone) == 1  # a fix is no surprise
    (capped,) = compare_classes(
        [replace(kernel_exists, counterexamples=rest, complete=False)], _baseline(kernel_exists)
    )
    assert capped.gone == ()  # with classes unenumerated, a missing class is not claimed fixed
    timed_out = replace(kernel_exists, verdict=UNKNOWN, counterexamples=[], complete=False)
    (unknown,) = compare_classes([timed_out], _baseline(kernel_exists))
    assert unknown.surprise and unknown.gone == ()


def test_a_tree_states_its_version_in_pkg_info_or_its_version_file(tmp_path):
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    assert tree_version(tree) is None
    (tree / "vllm" / "_version.py").write_text(
        "__version__: str\n__version__ = version = '0.34.0'\n__version_tuple__ = version_tuple = (0, 34, 0)\n"
    )
    assert tree_version(tree) == ("0.34.0", "vllm/_version.py")
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: vllm\nVersion: 0.33.0\n")
    assert tree_version(tree) == ("0.33.0", "PKG-INFO")


def _tree_with(release: str, text: str, where: Path, version: str | None = None) -> Path:
    """A vLLM tree under ``where`` that is the release's with ``text`` as rocm_aiter_mla.py (and
    ``version`` in its PKG-INFO, if given)."""
    from spec.analyses.mutants import shadow_tree

    file = shadow_tree(release, text, where)
    if version is not None:
        (where / "PKG-INFO").unlink()
        (where / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: vllm\nVersion: {version}\n")
    return file


@pytest.mark.network
def test_a_development_version_is_no_release_and_the_closest_file_decides(tmp_path):
    from spec.realcode.source import fetch_release

    text = fetch_release("0.33.0").read_text()
    file = _tree_with("0.34.0", text, tmp_path / "tree", version="0.34.1.dev12+g62d4bc3c7")
    origin = release_of(file, text)
    assert origin.release == "0.33.0" and "unchanged" in origin.how


def _lone(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lone" / "rocm_aiter_mla.py"
    path.parent.mkdir()
    path.write_text(text)
    return path


def _json(*args) -> tuple[int, dict]:
    r = run("check", *args, "--format", "json")
    return r.returncode, json.loads(r.stdout)


@pytest.mark.slow  # 17 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_the_unedited_0_34_0_file_has_no_new_class_in_its_tree_or_alone(tmp_path):
    """In its tree the file was held to a manifest row written for releases and got 2 surprises on
    head-padding-round-trips (its CPRR unpad); alone, with no envs.py, it got other classes (0.28.0's
    threshold formula, no DCP verify default).  Against its release, both are the release."""
    from spec.realcode.source import fetch_release

    in_tree = fetch_release("0.34.0")
    for path in (in_tree, _lone(tmp_path, in_tree.read_text())):
        status, out = _json(str(path))
        assert status == 0, out["surprises"]
        assert out["baselines"][0]["baseline"] == "vllm==0.34.0" and out["as_expected"]
        assert sum(r["baseline"]["new"] for r in out["results"]) == 0
        assert sum(len(r["baseline"]["absent"]) for r in out["results"]) == 0
        padding = [r for r in out["results"] if r["invariant"] == "head-padding-round-trips"]
        assert all(r["verdict"] == VIOLATED and r["baseline"]["unchanged"] == 2 for r in padding)
    r = run("check", str(in_tree), "--baseline", "none")
    assert r.returncode == 1 and "2 surprises against the bundled" in " ".join(r.stdout.split())


@pytest.mark.slow  # 24 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_padding_small_heads_to_8_is_a_new_class_of_an_invariant_violated_already(tmp_path):
    from spec.realcode.source import fetch_release

    text = fetch_release("0.34.0").read_text()
    assert text.count(PAD_16) == 1, "0.34.0's _AITER_MIN_MLA_HEADS moved"
    path = _tree_with("0.34.0", text.replace(PAD_16, PAD_16.replace("16", "8")), tmp_path / "tree")
    args = [str(path), "--registry", "aiter-0.1.20", "--invariant", "kernel-exists"]
    r = run("check", *args)
    flat = " ".join(r.stdout.split())
    assert r.returncode == 1, r.stdout
    assert "against vllm==0.34.0 (the version its vLLM tree states in PKG-INFO)" in flat
    assert "kernel-exists with aiter-0.1.20: " in flat and "(VIOLATED -> VIOLATED)" in flat
    assert "NEW gfx942 kv=auto q=bf16 heads=1 qlen=1 no drafter ->asm_persistent" in flat
    # the deployments the file's own gates send into the class (issue 24 item 5): Kimi-K2's 8 heads per
    # rank at TP8, padded to 8, ask for the 8-head persistent kernel AITER lacks
    first_new = flat.split("NEW gfx942 kv=auto q=bf16 heads=1 qlen=1 no drafter ->asm_persistent")[1]
    assert first_new.split(" NEW ")[0].count("hits: ") == 1 and "Kimi-K2 TP8 bf16" in first_new
    assert re.search(r"1 surprise against the baseline vllm==0\.34\.0 \(\d+ NEW, \d+ GONE\):", flat)
    assert f"! {path} / aiter-0.1.20 / kernel-exists: " in flat and "NEW classes" in flat
    status, out = _json(*args)
    (result,) = out["results"]
    assert status == 1 and result["baseline"]["new"] > 0 and result["surprise"]
    new = [c for c in result["counterexamples"] if c["baseline_state"] == NEW]
    assert out["surprises"][0]["new"] == [c["class_id"] for c in new]
    assert 8 in {c["route"]["request"]["padded_heads"] for c in new}  # the kernel launched at 8 heads
    assert any("Kimi-K2 TP8 bf16" in c["hits"] for c in new)


@pytest.mark.network
def test_pinning_small_head_decode_to_asm_removes_classes_and_reports_them_fixed(tmp_path):
    from spec.realcode.source import fetch_release

    text = fetch_release("0.34.0").read_text()
    assert text.count(MODE_KNOB) == 1, "0.34.0's small-head mode knob moved"
    edited = text.replace(MODE_KNOB, MODE_KNOB.replace("_aiter_mla_small_head_mode()", '"asm"'))
    path = _lone(tmp_path, edited)
    args = [str(path), "--registry", "aiter-0.1.20", "--invariant", "dcp-returns-lse"]
    r = run("check", *args)
    flat = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stdout
    assert "the release closest by content (99.9" in flat
    assert "dcp-returns-lse with aiter-0.1.20: 0 NEW, 2 GONE, 0 unchanged (VIOLATED -> PROVED)" in flat
    assert "GONE gfx950 kv=auto q=bf16 heads=1 qlen=1 no drafter dcp_world_size=2 ->gluon_decode" in flat
    assert "(fixed)" in flat and "As the baseline: no NEW class against vllm==0.34.0 (2 GONE, fixed)" in flat
    status, out = _json(*args)
    assert status == 0 and [len(r["baseline"]["absent"]) for r in out["results"]] == [2]


@pytest.mark.network
def test_sarif_carries_each_class_with_its_baseline_state(tmp_path):
    from spec.realcode.source import fetch_release

    text = fetch_release("0.34.0").read_text()
    path = _lone(tmp_path, text.replace(PAD_16, PAD_16.replace("16", "8")))
    r = run(
        "check", str(path), "--registry", "aiter-0.1.20", "--invariant", "kernel-exists", "--format", "sarif"
    )
    assert r.returncode == 1
    results = json.loads(r.stdout)["runs"][0]["results"]
    by_state = {s: [x for x in results if x["baselineState"] == s] for s in (NEW, UNCHANGED, ABSENT)}
    assert sum(map(len, by_state.values())) == len(results)  # every result carries one (SARIF §3.27.24)
    assert by_state[NEW] and by_state[ABSENT]
    assert all(x["level"] == "error" and "suppressions" not in x for x in by_state[NEW])
    assert all(x["suppressions"][0]["kind"] == "external" for x in by_state[UNCHANGED])
    assert all(x["level"] == "note" and x["message"]["text"].startswith("fixed: ") for x in by_state[ABSENT])
    fingerprints = [x["partialFingerprints"]["mlaSpecClass/v1"] for x in results]
    assert len(set(fingerprints)) == len(fingerprints)
    assert all(f.startswith("aiter-0.1.20|kernel-exists|") for f in fingerprints)


@pytest.mark.network
def test_a_baseline_is_computed_once_then_read_from_the_cache(monkeypatch):
    from spec.realcode import baseline

    choice = baseline.choose("0.33.0", "0.33.0")
    first = baseline.baseline_classes(choice, 30.0)
    monkeypatch.setattr(baseline, "check_all", lambda *a: pytest.fail("the baseline was proved again"))
    again = baseline.baseline_classes(choice, 30.0)
    assert again.results == first.results and again.label == "vllm==0.33.0"
    assert len(first.results) == 2 * len(INVARIANT_BY_ID)


def test_a_baseline_that_cannot_be_read_or_contradicts_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "nope.py"
    r = run("check", "--revision", "vllm-0.34", "--baseline", "0.33.0")
    assert r.returncode == 2 and "--baseline compares a gate file or release" in r.stderr
    gate = tmp_path / "rocm_aiter_mla.py"
    gate.write_text("x = 1\n")
    r = run("check", str(gate), "--baseline", "0.33.0", "--no-expect")
    assert r.returncode == 2 and "--baseline and --no-expect contradict each other" in r.stderr
    r = run("check", str(gate), "--baseline", str(missing))
    assert r.returncode == 2
    assert (
        r.stderr.strip() == f"mla-spec: error: --baseline: {missing}: no such file, directory or vLLM release"
    )


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_every_unedited_release_file_matches_its_release_in_its_tree_and_alone(release, tmp_path):
    from spec.realcode.source import fetch_release

    in_tree = fetch_release(release)
    for path in (in_tree, _lone(tmp_path, in_tree.read_text())):
        status, out = _json(str(path))
        assert status == 0, out["surprises"]
        assert out["baselines"][0]["baseline"] == f"vllm=={release}"
        assert sum(r["baseline"]["new"] + len(r["baseline"]["absent"]) for r in out["results"]) == 0
