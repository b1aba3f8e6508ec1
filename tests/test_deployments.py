"""The bundled MLA models and their deployments (mla_model/deployments.toml), explain --model/--tp, and
who a counterexample class hits (spec/analyses/hits.py), cross-checked against the plain Python model."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from mla_model.decision import decide
from mla_model.deployments import deployments, find_model, models
from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.shape import FIELD_BY_NAME, Shape
from spec.analyses.hits import classes, hits
from spec.proof.invariants import INVARIANT_BY_ID, INVARIANTS
from spec.proof.prover import check
from spec.proof.views import view_terms
from tests.cli import run

SOURCES = Path(__file__).resolve().parents[1] / "docs" / "sources.md"
SEED = Shape(arch="gfx950", kv_cache_dtype="fp8", num_heads=12)  # #51011's Kimi-K3 TP8 fp8 decode


def test_the_table_loads_and_every_model_and_drafter_cites_a_source():
    entries = set(re.findall(r"^## (§\d+)\b", SOURCES.read_text(), re.M))
    assert {m.name for m in models()} >= {
        "DeepSeek-V3",
        "DeepSeek-V2",
        "DeepSeek-V2-Lite",
        "Kimi-K2",
        "Kimi-K3",
    }
    for model in models():
        assert model.config.startswith("https://huggingface.co/") and model.config.endswith("/config.json")
        assert model.source.removeprefix("sources ") in entries, model.name
        assert all(d.source.removeprefix("sources ") in entries for d in model.drafters), model.name
        assert model.tp_sizes and all(model.heads % tp == 0 for tp in model.tp_sizes)


def test_the_reference_page_lists_every_model_with_its_heads():
    page = (SOURCES.parent / "reference" / "deployments.md").read_text()
    rows = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| (\S+)[^|]*\| (\d+) \|", page, re.M)}
    assert rows == {m.name: m.heads for m in models()}


def test_heads_per_rank_are_the_published_heads_over_tp():
    assert find_model("Kimi-K3").heads_per_rank(8) == 12  # the #51011 seed
    assert find_model("deepseek-r1").heads_per_rank(8) == 16  # an alias, any case
    assert find_model("DeepSeek-V2-Lite").heads == 16 and find_model("Kimi-K2").heads == 64
    with pytest.raises(ValueError, match="does not divide"):
        find_model("Kimi-K3").heads_per_rank(5)
    with pytest.raises(ValueError, match="known MLA models: DeepSeek-V3"):
        find_model("Llama-3")


def test_deployments_cover_tp_kv_and_every_drafter_with_short_labels():
    labels = [d.label for d in deployments()]
    assert len(labels) == len(set(labels))
    assert {"Kimi-K3 TP8 fp8", "DeepSeek-V3 TP8 bf16 mtp k=1", "Kimi-K3 TP8 fp8 dspark k=2"} <= set(labels)
    k3 = [d for d in deployments() if d.model == "Kimi-K3" and d.tp == 8]
    assert {d.num_heads for d in k3} == {12} and {d.kv_cache_dtype for d in k3} == {"auto", "fp8"}


@pytest.mark.parametrize("model", models(), ids=lambda m: m.name)
def test_explain_model_tp_works_for_every_bundled_model(model):
    for tp in model.tp_sizes:
        out = run("explain", "--model", model.name, "--tp", str(tp), "--format", "json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["shape"]["num_heads"] == model.heads // tp


def test_explain_model_keeps_the_other_flags():
    out = run(
        "explain",
        "--model",
        "Kimi-K3",
        "--tp",
        "8",
        "--kv-cache-dtype",
        "fp8",
        "--revision",
        "main-pre-51011",
    )
    assert out.returncode == 1, out.stderr  # explain exits 1 on a shape that breaks an invariant
    assert "heads=12" in out.stdout and "no-known-wrong-kernel: VIOLATED" in out.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (("--model", "Llama-3", "--tp", "8"), "known MLA models: DeepSeek-V3"),
        (("--model", "Kimi-K3", "--tp", "5"), "does not divide Kimi-K3's 96 MLA heads"),
        (("--model", "Kimi-K3"), "--model needs --tp"),
        (("--tp", "8"), "--tp needs --model"),
        (("--model", "Kimi-K3", "--tp", "8", "--num-heads", "12"), "not both"),
    ],
)
def test_explain_bad_model_combinations_are_one_line_exit_2(args, says):
    out = run("explain", *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and says in out.stderr


def test_the_seed_class_on_main_hits_kimi_k3_tp8_fp8():
    rev, reg, inv = "main-pre-51011", "aiter-0.1.20", INVARIANT_BY_ID["no-known-wrong-kernel"]
    seed_view = view_terms(decide(get_revision(rev), load_registry(reg), SEED), inv.view)
    result = check(rev, reg, inv)
    (seed_class,) = [c for c in result.counterexamples if c.view == seed_view]
    assert "Kimi-K3 TP8 fp8" in hits(rev, reg, inv.id, seed_class.view)
    assert "Kimi-K3 TP8 fp8" not in hits("vllm-0.28", reg, inv.id, seed_class.view)


def _python_classes(rev: str, reg: str, deployment) -> dict[str, set[tuple]]:
    """Per invariant, the classes the plain Python interpretation puts the deployment's shapes in: every
    valid shape with its heads, KV dtype, drafter and k (and the query dtype vLLM gives that cache: the
    Shape default), the other fields over the box (DCP 1)."""
    revision, registry = get_revision(rev), load_registry(reg)
    free = ("arch", "num_reqs", "asm_padding_mode", "gluon_build", "causal", "kv_cache_bytes")
    found: dict[str, set[tuple]] = {inv.id: set() for inv in INVARIANTS}
    for method in deployment.spec_methods:
        for qlen, values in itertools.product(
            FIELD_BY_NAME["max_qo_len"].box, itertools.product(*(FIELD_BY_NAME[f].box for f in free))
        ):
            shape = Shape(
                num_heads=deployment.num_heads,
                kv_cache_dtype=deployment.kv_cache_dtype,
                spec_method=method,
                num_spec_tokens=deployment.num_spec_tokens,
                max_qo_len=qlen,
                **dict(zip(free, values)),
            )
            if not revision.is_valid(shape, registry):
                continue
            d = decide(revision, registry, shape)
            for inv in INVARIANTS:
                if not inv.holds(d):
                    found[inv.id].add(tuple(view_terms(d, inv.view).items()))
    return found


@pytest.mark.parametrize(
    "rev, reg, label",
    [
        ("main-pre-51011", "aiter-0.1.20", "Kimi-K3 TP8 fp8"),
        ("vllm-0.27", "aiter-0.1.19", "DeepSeek-V3 TP8 bf16 mtp k=1"),
        ("vllm-0.30", "aiter-0.1.20", "Kimi-K3 TP8 bf16 dspark k=2"),
    ],
)
def test_hits_agree_with_the_python_model_on_enumerated_shapes(rev, reg, label):
    (deployment,) = [d for d in deployments() if d.label == label]
    expected = _python_classes(rev, reg, deployment)
    assert any(expected.values())  # each of these deployments breaks something on its revision
    for inv in INVARIANTS:
        got = {key for key, hit in classes(rev, reg, inv.id).items() if deployment in hit}
        assert got == expected[inv.id], inv.id
        for key in got:
            assert label in hits(rev, reg, inv.id, dict(key))
