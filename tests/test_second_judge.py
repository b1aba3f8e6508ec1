"""check's second judge: a gate file in a vLLM tree executed against its own lifted gates (issue 24, item 4).

The proof describes the gates lifted from the file.  Where lifting takes a part from the model (what
forward_mqa does with tensors: how get_mla_padded_q pads the query heads) or lifts it wrongly, only the
executed file shows it: ``check`` then exits 1 naming the field, both values and a shape.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conformance.cli.second_judge import NotRun, start_judges
from mla_model.registry import load_registry
from mla_model.revisions import REVISIONS
from mla_model.shape import FIELD_BY_NAME, Shape
from spec.realcode import second_judge
from spec.realcode.executed.differential import Differential, Disagreement, expected
from tests.cli import run

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="executing a release needs torch")
# 0.34.0's _build_decode: the V-scale fix the decode step applies (L2184-2186).
V_SCALE_FIX = "            fp8_v_scale_fix=(\n                has_persistent_metadata\n"
# 0.34.0's get_mla_padded_q: a divisor head count is padded by interleaving (L2522-2523).
INTERLEAVE = "            return q.repeat_interleave(m // num_heads, dim=1)\n"
# 0.34.0's use_gluon_decode: fp8 never reaches Gluon (L2571-2572); negated, it does, with kv_scale=1.0.
FP8_GUARD = "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        mode ="


def test_route_changes_name_each_fact_that_differs_and_the_shapes_where():
    model = REVISIONS["vllm-0.34"]
    reg = load_registry(second_judge.REGISTRY)
    shapes = second_judge.random_shapes(model, reg, 40, seed=3)
    theirs = second_judge.baseline_answers(model, shapes)
    ours = [expected(model, reg, s, {}) for s in shapes]
    assert second_judge.route_changes(shapes, ours, theirs) == ([], [])
    assert second_judge.route_changes(shapes, ours, None) == ([], [])
    moved = next(i for i, a in enumerate(ours) if a.get("path") == "asm_persistent")
    ours[moved] = {**ours[moved], "path": "asm_nonpersistent", "padded_heads": 128}
    assert second_judge.route_changes(shapes, ours, theirs) == (["padded_heads", "path"], [shapes[moved]])


def test_shapes_near_a_witness_stay_in_the_domain_and_valid():
    model = REVISIONS["vllm-0.34"]
    reg = load_registry(second_judge.REGISTRY)
    witness = Shape(
        arch="gfx950", kv_cache_dtype="fp8", num_heads=12, max_qo_len=3, spec_method="mtp", num_spec_tokens=2
    )
    near = second_judge.near([witness], model, 200, seed=1)
    assert len(near) > 100 and len(set(near)) == len(near)
    assert all(model.is_valid(s, reg) for s in near)
    assert all(s.dcp_world_size in FIELD_BY_NAME["dcp_world_size"].values for s in near)
    assert all(abs(s.num_heads - 12) <= 3 for s in near)
    assert sum(s != witness for s in near) > 0.9 * len(near)
    assert second_judge.near([], model, 10, seed=1) == []


def test_disagreements_are_grouped_by_field_and_both_values_most_shapes_first():
    shape = Shape(arch="gfx942", kv_cache_dtype="fp8").to_json()
    run_ = Differential("f", "r", second_judge.REGISTRY)
    run_.disagreements = [
        Disagreement("kv_scale", shape, 1.0, 0.5),
        Disagreement("v_scale_fix", shape, False, True),
        Disagreement("v_scale_fix", {**shape, "num_heads": 8}, False, True),
    ]
    j = second_judge.Judgement("f", 0, [], 0, 0, [run_])
    found = second_judge.findings(j)
    assert [(f.field, f.lifted, f.executed, f.shapes) for f in found] == [
        ("v_scale_fix", True, False, 2),
        ("kv_scale", 0.5, 1.0, 1),
    ]
    assert found[0].shape == shape
    assert j.to_json()["disagreements_by_field"] == {"kv_scale": 1, "v_scale_fix": 2}


def test_a_lone_file_is_never_executed_and_without_torch_the_judge_says_it_did_not_run(tmp_path, monkeypatch):
    lone = tmp_path / "rocm_aiter_mla.py"
    lone.write_text((Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py").read_text())
    judges = start_judges((str(lone),), [REVISIONS["vllm-0.34"]], {}, {})
    assert judges == {
        "vllm-0.34": NotRun(str(lone), "it sits in no vLLM tree, and a lone file is never executed")
    }
    tree = tmp_path / "tree"
    (tree / "vllm" / "v1" / "attention" / "backends" / "mla").mkdir(parents=True)
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: vllm\nVersion: 0.34.0\n")
    (tree / "vllm" / "v1" / "attention" / "backend.py").write_text("")  # what makes a vLLM tree
    in_tree = tree / "vllm" / "v1" / "attention" / "backends" / "mla" / "rocm_aiter_mla.py"
    in_tree.write_text(lone.read_text())
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    (judge,) = start_judges((str(in_tree),), [REVISIONS["vllm-0.34"]], {}, {}).values()
    assert isinstance(judge, NotRun) and judge.why.startswith("torch is not installed"), judge


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    from spec.analyses.mutants import shadow_tree
    from spec.realcode.source import fetch_release

    text = fetch_release("0.34.0").read_text()
    assert text.count(old) == 1, "0.34.0's file moved"
    return shadow_tree("0.34.0", text.replace(old, new), tmp_path / "tree")


@pytest.mark.network
@needs_torch
def test_the_unedited_file_in_its_tree_agrees_with_its_lifted_gates_on_every_shape():
    from spec.realcode.source import fetch_release

    r = run("check", fetch_release("0.34.0"), "--format", "json")
    assert r.returncode == 0, r.stdout[-2000:]
    (judged,) = json.loads(r.stdout)["executed"]
    assert judged["ran"] and judged["shapes"] >= second_judge.SHAPES and judged["class_shapes"] > 0
    assert judged["disagreements"] == [] and judged["differing_fields"] == [] and judged["children"] == 1


@pytest.mark.slow  # 23 s (README command: issue 26's 3 minutes)
@pytest.mark.network
@needs_torch
def test_heads_padded_by_tiling_pass_the_proof_and_are_caught_executed(tmp_path):
    """Head padding is the model's (get_mla_padded_q takes tensors), so the proof cannot see the query
    heads tiled where 0.34.0 interleaves them: without the second judge check exits 0; executed, the
    harness records the tiling."""
    path = _edited(tmp_path, INTERLEAVE, "            return q.repeat(1, m // num_heads, 1)\n")
    args = [str(path), "--registry", "aiter-0.1.20", "--invariant", "total"]
    # first, from an empty threshold cache entry: a relative path runs as the absolute one (the threshold's
    # child once got it relative, in its scratch folder, and 0.28.0's formula stood in: hundreds of
    # mtp_decode_qlen disagreements)
    by_path = [
        json.loads(run("check", p, *args[1:], "--format", "json", cwd=tmp_path).stdout)["executed"][0]
        for p in (path.relative_to(tmp_path), path)
    ]
    assert by_path[0]["disagreements_by_field"] == by_path[1]["disagreements_by_field"]
    assert set(by_path[0]["disagreements_by_field"]) == {"head_padding"}
    assert run("check", *args, "--no-execute").returncode == 0
    r = run("check", *args)
    flat = " ".join(r.stdout.split())
    assert r.returncode == 1, flat
    assert "disagreements with the lifted gates (a surprise" in flat
    assert "head_padding: the lifted gates say repeat_interleave; the executed file gives tile (" in flat
    sarif = json.loads(run("check", *args, "--format", "sarif").stdout)["runs"][0]
    errors = [x for x in sarif["results"] if x["ruleId"] == "executed-disagreement"]
    assert errors and all(x["level"] == "error" and x["baselineState"] == "new" for x in errors)
    assert sarif["tool"]["driver"]["rules"][-1]["id"] == "executed-disagreement"


@pytest.mark.slow  # the regular run proves the file-read correction in tests/test_v_scale.py
@pytest.mark.network
@needs_torch
def test_disabling_the_v_scale_fix_is_proved_and_the_executed_file_agrees(tmp_path):
    """The V-scale fix is read from the file (spec.realcode.v_scale): switched off, the proof finds the
    fp8 steps whose V now misses the cache's scale (NEW kv-scale-applied classes), and the executed file
    agrees with the lifted gates on every shape."""
    path = _edited(tmp_path, V_SCALE_FIX, V_SCALE_FIX.replace("has_persistent", "False and has_persistent"))
    r = run(
        "check", path, "--registry", "aiter-0.1.20", "--invariant", "kv-scale-applied", "--format", "json"
    )
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert sum(x["baseline"]["new"] for x in data["results"] if x["invariant"] == "kv-scale-applied") > 0
    assert data["executed"][0]["ran"] and data["executed"][0]["disagreements_by_field"] == {}


@pytest.mark.slow  # 13 s (README command: issue 26's 3 minutes)
@pytest.mark.network
@needs_torch
def test_fp8_let_through_to_gluon_runs_it_with_kv_scale_one_as_the_executed_file_shows(tmp_path):
    """Issue 24's example: the lifted gates once passed the cache's KV scale to Gluon (they read the text of
    forward_mqa, and 0.34.0 moved its body into _forward_mqa), while the executed file calls mla_gluon with
    kv_scale=1.0: 200 kv_scale disagreements.  Read from the methods forward_mqa calls, the proof says what
    the file does; the route change is found by z3 and run around in a second child, which agrees."""
    path = _edited(tmp_path, FP8_GUARD, FP8_GUARD.replace("if is_quantized", "if not is_quantized"))
    r = run(
        "check",
        path,
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "fp8-never-reaches-gluon",
        "--format",
        "json",
    )
    assert r.returncode == 1
    out = json.loads(r.stdout)
    (judged,) = out["executed"]
    assert {"path", "kv_scale"} <= set(judged["differing_fields"]) and judged["witnesses"] > 0
    assert judged["children"] == 2 and judged["near_witnesses"] > 0
    assert judged["disagreements"] == []
    (result,) = out["results"]
    assert result["baseline"]["new"] > 0
    assert all("with kv_scale=1.0" in c["symptom"] for c in result["counterexamples"])


# 0.34.0's builder asks use_gluon_decode with its own arguments (L1903-1908)
GLUON_CALL_SITE = (
    "        use_gluon_decode = AiterMLAHelper.use_gluon_decode(\n"
    "            self._decode_num_heads,\n"
    "            int(max_qo_len),\n"
    "            self._kv_cache_dtype_str,\n"
)


@pytest.mark.slow  # 14 s (README command: issue 26's 3 minutes)
@pytest.mark.network
@needs_torch
def test_the_builders_own_call_site_arguments_decide_the_gluon_route(tmp_path):
    """Issue 24 item 3: the builder passing the predicate "auto" for drafter steps lets fp8 reach Gluon.
    The lifted gates once called the predicate with the harness's arguments, so the proof missed it and the
    executed file disagreed on 200 paths; now the decision is the builder's own local (the metadata's
    use_gluon_decode), the proof finds the classes and the executed file agrees."""
    edited = GLUON_CALL_SITE.replace(
        "self._kv_cache_dtype_str,",
        '"auto" if self.reorder_batch_threshold > 1 else self._kv_cache_dtype_str,',
    )
    path = _edited(tmp_path, GLUON_CALL_SITE, edited)
    args = ["--registry", "aiter-0.1.20", "--invariant", "fp8-never-reaches-gluon", "--format", "json"]
    r = run("check", path, *args)
    assert r.returncode == 1
    out = json.loads(r.stdout)
    (result,) = out["results"]
    assert result["verdict"] == "VIOLATED" and result["baseline"]["new"] > 0
    drafted = [c for c in result["counterexamples"] if c["baseline_state"] == "new"]
    assert drafted and all(c["shape"]["spec_method"] != "none" for c in drafted)
    assert out["executed"][0]["ran"] and out["executed"][0]["disagreements"] == []
