"""DCP replay (conformance.dcp_replay): every rank of a release's DCP decode executed, merged by the
release's own LSE merge, judged against the float32 reference over the whole KV.

The end-to-end tests run release code (cached sdist trees) and are marked ``network`` like the
vllm backend's; the merge is vLLM's Triton kernel, run in Triton's interpreter on a CPU.
"""

from __future__ import annotations

import math
import types

import pytest
import torch
from click.testing import CliRunner

from conformance.backends import vllm_replay
from conformance.cli.conform import conform_command
from conformance.dcp_replay import execute
from mla_model.shape import Shape
from tests.params import regular_and_slow

RELEASE = "0.34.0"
# 0.34.0 routes a gfx950 bf16 MTP verify of 2 tokens under DCP to AITER's segmented MLA; 16-token pages over
# a 64-token KV give every verify row several segments, the last one partly filled.
SEGMENTED = {"arch": "gfx950", "max_qo_len": 2, "spec_method": "mtp", "num_spec_tokens": 1}
PAGED = {"kv_len": 64, "block_size": 16}


def _run(shapes, **options):
    pytest.importorskip("triton")
    from spec.realcode.executed.harness import release_code

    return execute(release_code(RELEASE), shapes, "aiter-0.1.20", {"kv_len": 32, **options})


def test_stand_in_lse_merges_shards_into_the_whole():
    """The stand-in's LSE is its shard's true log-sum-exp: two shards merged by it give the whole."""
    g = torch.Generator().manual_seed(0)
    q, kv = torch.randn(1, 4, 576, generator=g), torch.randn(10, 576, generator=g)
    k, v = kv, kv[:, :512]
    whole, _ = vllm_replay._attend_rows(q, k, v, torch.tensor([0, 10]), torch.arange(10), 0.05)
    parts = [
        vllm_replay._attend_rows(q, k, v, torch.tensor([0, 5]), idx, 0.05)
        for idx in (torch.arange(0, 10, 2), torch.arange(1, 10, 2))
    ]
    lses = torch.stack([lse for _, lse in parts])
    weights = torch.softmax(lses, dim=0)[..., None]
    merged = sum(w * o for w, (o, _) in zip(weights, parts))
    torch.testing.assert_close(merged, whole, rtol=1e-5, atol=1e-5)


def test_segment_partials_reduce_to_the_whole_row():
    """The segmented stand-in's partials are AITER's: per segment a base-2 max, the exp-sum below it and the
    unnormalised output, so weighting each segment by 2**max gives the row's attention and its LSE."""
    g = torch.Generator().manual_seed(1)
    heads, n, page, segments = 4, 11, 2, 8
    q, kv = torch.randn(1, heads, 576, generator=g), torch.randn(8, page, 1, 576, generator=g)
    table = torch.randperm(8, generator=g)[None].to(torch.int32)
    segm = torch.full((1, heads, segments, 512), float("nan"))
    stats = {"segm_max": torch.full((1, heads, segments), float("nan"))}
    stats["segm_expsum"] = stats["segm_max"].clone()
    tensors = {"q": q, "kv": kv, "o": segm, "seq_lens": torch.tensor([n]), "block_table": table, **stats}
    call = {"page_size": page, "sm_scale": 0.05, "kv_scale": 2.0}
    vllm_replay._segmented(call, tensors, types.SimpleNamespace(arch="gfx950"), {})
    active = math.ceil(n / page)  # tiles_per_segment 1: one page per segment, the rest never written
    assert not stats["segm_max"][..., active:].isfinite().any()
    weight = torch.exp2(
        stats["segm_max"][..., :active] - stats["segm_max"][..., :active].amax(-1, keepdim=True)
    )
    denom = (stats["segm_expsum"][..., :active] * weight).sum(-1)
    merged = (segm[..., :active, :] * weight[..., None]).sum(-2) / denom[..., None]
    tokens = (table[0, torch.arange(n) // page].long() * page + torch.arange(n) % page).tolist()
    rows = kv.reshape(-1, 576)[tokens] * 2.0
    whole, lse = vllm_replay._attend_rows(q, rows, rows[:, :512], torch.tensor([0, n]), torch.arange(n), 0.05)
    torch.testing.assert_close(merged, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        (stats["segm_max"][..., :active].amax(-1) + denom.log2()) * math.log(2), lse, rtol=1e-5, atol=1e-5
    )


@pytest.mark.network
@pytest.mark.parametrize("dcp", regular_and_slow([2, 4], ids=str))
def test_segmented_simulated_ranks_pass(dcp):
    """The stand-in's segment partials, the release's merge_mla_segments_triton, then its DCP merge."""
    (row,) = _run([Shape(dcp_world_size=dcp, **SEGMENTED)], dcp_ranks="simulated", **PAGED)
    assert row["dcp_routes"] == ["SEGMENTED"]
    segmented = [c for c in row["calls"] if c["entry"] == "segmented_mla_decode_fwd"]
    merges = [c for c in row["calls"] if c["entry"] == "merge_mla_segments_triton"]
    assert len(segmented) == len(merges) == dcp
    assert all(c["num_segments"] >= 8 and c["page_size"] == 16 for c in segmented)
    assert all("release's merge_mla_segments_triton" in c["replay"]["compute"] for c in merges)
    assert row["verdict"]["status"] == "PASS", row["verdict"]


@pytest.mark.slow  # 7 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_segmented_dropped_lse_is_a_mismatch():
    (row,) = _run(
        [Shape(dcp_world_size=2, **SEGMENTED)], dcp_ranks="simulated", inject_fault="drop-rank-lse", **PAGED
    )
    assert row["dcp_routes"] == ["SEGMENTED"] and row["fault"] == "drop-rank-lse"
    assert row["verdict"]["status"] == "MISMATCH"


@pytest.mark.network
@pytest.mark.parametrize("dcp", regular_and_slow([2, 4, 8], 2, ids=str))
def test_simulated_ranks_pass(dcp):
    (row,) = _run([Shape(dcp_world_size=dcp)], dcp_ranks="simulated")
    assert row["dcp_routes"] == ["PLAIN"]
    assert len({c["rank"] for c in row["calls"]}) == dcp
    assert row["calls"][0]["q_shape"][1] == 16 * dcp  # heads gathered over the DCP group
    assert row["verdict"]["status"] == "PASS", row["verdict"]


@pytest.mark.network
@pytest.mark.slow
def test_simulated_dropped_lse_is_a_mismatch():
    clean, cprr = (
        Shape(dcp_world_size=2),
        Shape(dcp_world_size=2, num_heads=64, max_qo_len=3, spec_method="mtp", num_spec_tokens=2),
    )
    rows = _run([clean, cprr], dcp_ranks="simulated", inject_fault="drop-rank-lse")
    assert [r["verdict"]["status"] for r in rows] == ["MISMATCH", "MISMATCH"]
    assert rows[1]["dcp_routes"] == ["CPRR"] and rows[0]["fault"] == "drop-rank-lse"


@pytest.mark.network
@pytest.mark.slow
def test_gloo_two_ranks_pass_and_flag_a_dropped_lse():
    pytest.importorskip("torch.distributed")
    (clean,) = _run([Shape(dcp_world_size=2)], dcp_ranks="gloo")
    (faulty,) = _run([Shape(dcp_world_size=2)], dcp_ranks="gloo", inject_fault="drop-rank-lse")
    assert clean["ranks"] == "gloo" and clean["verdict"]["status"] == "PASS", clean.get("verdict")
    assert faulty["verdict"]["status"] == "MISMATCH"


@pytest.mark.network
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL ranks need two GPUs")
def test_nccl_two_ranks_pass():
    (row,) = _run([Shape(dcp_world_size=2)], dcp_ranks="nccl")
    assert row["verdict"]["status"] == "PASS"


def test_inject_fault_is_a_vllm_backend_switch(tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("")
    result = CliRunner().invoke(
        conform_command, ["--backend", "model", "--cases", str(cases), "--inject-fault", "drop-rank-lse"]
    )
    assert result.exit_code == 2
    assert "--inject-fault are switches of the vllm backend only" in result.output
