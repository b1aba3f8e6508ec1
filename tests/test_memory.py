"""Memory (issue 13 item 5): the persistent decode metadata and AITER's reduce scratch, measured by executing
the release's builder over AITER's own sizing (spec.analyses.memory), and check --memory-budget.

Tests marked ``network`` fetch the release trees and the amd-aiter wheel from PyPI on first use (cached).
"""

from __future__ import annotations

import math
import textwrap
from types import SimpleNamespace

import pytest

from mla_model.shape import Shape
from tests.cli import run
from tests.params import regular_and_slow


def _dtypes(arch: str):
    import torch

    fp8 = torch.float8_e4m3fnuz if arch == "gfx942" else torch.float8_e4m3fn
    return SimpleNamespace(
        bf16=torch.bfloat16, fp16=torch.float16, fp32=torch.float32, fp8=fp8, i32=torch.int32
    )


def _bytes(entry) -> int:
    """One (shape, dtype) of a get_mla_metadata_info_v1 answer, in bytes."""
    shape, dtype = entry
    dims = shape if isinstance(shape, tuple) else (shape,)
    return math.prod(dims) * dtype.itemsize


# --- the executor, on a stand-in AITER file (no network) ------------------------------------------------

FAKE_ATTENTION = """
import math
import torch
from aiter import dtypes
from ..jit.core import compile_ops
from ..jit.utils.chip_info import get_cu_num, get_gfx

SCALE = 2

@compile_ops("module_mla_metadata")
def get_mla_metadata_v1(x):
    ...

def helper(heads):
    return heads * SCALE if get_gfx() == "gfx950" else heads

def get_mla_metadata_info_v1(batch, qlen, heads, q_dtype, kv_dtype, is_sparse=False, fast_mode=True):
    cu = get_cu_num()
    props = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return (
        (batch * qlen, torch.int32), (helper(heads), torch.int32), (cu, torch.uint64), (props, torch.int32)
    )

def uses_a_kernel():
    return get_mla_metadata_v1(1)
"""


def test_the_executor_answers_the_arch_and_refuses_compiled_code(tmp_path):
    pytest.importorskip("torch")
    from mla_model.emulation import CU_NUM
    from spec.realcode import aiter_sizing

    path = tmp_path / "attention.py"
    path.write_text(textwrap.dedent(FAKE_ATTENTION))
    for arch in ("gfx942", "gfx950"):
        record = aiter_sizing.Allocations()
        fn = aiter_sizing.load(path, "get_mla_metadata_info_v1", arch, _dtypes(arch), record)
        info = fn(4, 3, 16, None, None)
        assert [s for s, _ in info] == [12, 16 * (2 if arch == "gfx950" else 1), CU_NUM[arch], CU_NUM[arch]]
    kernel = aiter_sizing.load(path, "uses_a_kernel", "gfx950", _dtypes("gfx950"), aiter_sizing.Allocations())
    with pytest.raises(aiter_sizing.AiterUnsupported, match="get_mla_metadata_v1.*compiled"):
        kernel()


def test_allocations_inside_aiters_code_are_meta_and_recorded(tmp_path):
    pytest.importorskip("torch")
    from spec.realcode import aiter_sizing

    path = tmp_path / "mla.py"
    path.write_text(
        "import torch\nfrom aiter import dtypes\n"
        "def mla_decode_fwd(n):\n"
        "    a = torch.empty((n, 4), dtype=dtypes.fp32, device='cuda')\n"
        "    b = torch.zeros(n, dtype=torch.int32)\n"
        "    return a.device.type, b.device.type\n"
    )
    record = aiter_sizing.Allocations()
    fn = aiter_sizing.load(path, "mla_decode_fwd", "gfx950", _dtypes("gfx950"), record)
    assert fn(10) == ("meta", "meta")
    assert [t["bytes"] for t in record.tensors] == [160, 40] and record.bytes == 200


# --- bad input: one line, exit 2 (no network: the input is refused before anything runs) ---------------


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--memory-budget", "-1"],
        ["check", "--memory-budget", "0"],
        ["check", "--memory-budget", "abc"],
        ["check", "--memory-budget", "1e9"],
        ["check", "--memory-budget", "nan"],
        ["check", "--memory-budget", "99999999999999999999"],
        ["check", "--memory-budget", "2PiB"],
        ["check", "--memory-budget", ""],
        ["check", "--memory-budget", "1GiB", "--max-num-seqs", "0"],
        ["check", "--memory-budget", "1GiB", "--max-num-seqs", "x"],
        ["check", "--memory-budget", "1GiB", "--max-num-seqs", str(1 << 40)],
        ["check", "--max-num-seqs", "64"],
        ["explain", "--max-num-seqs", "-3"],
        ["explain", "--max-num-seqs", "many"],
    ],
)
def test_bad_memory_input_is_one_line_exit_2(args):
    r = run(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("mla-spec: error: ")


@pytest.mark.parametrize(("text", "n"), [("17179869184", 1 << 34), ("16GiB", 16 << 30), ("512m", 512 << 20)])
def test_byte_counts_take_binary_units(text, n):
    from conformance.cli.memory_options import ByteCount

    assert ByteCount().convert(text, None, None) == n


# --- the exit status composes with the manifest (the measurement faked: no network) ---------------------


def _fake_over(monkeypatch, over: bool):
    import spec.analyses.memory as memory

    m = memory.Memory("vllm==0.28.0", "amd-aiter==x", Shape(), 1024, 17, 17, (), {}, {"bytes": 5}, None)
    found = [memory.OverBudget("vllm-0.28", "Kimi-K3 TP8 fp8 dspark k=8 gfx950", m)] if over else []
    monkeypatch.setattr(
        memory, "over_budget", lambda targets, budget, seqs: (found, ["main-pre: not measured"])
    )


ARGS = ["check", "--revision", "vllm-0.28", "--registry", "aiter-0.1.20", "--invariant", "total"]


def test_over_budget_exits_1_after_the_verdicts(monkeypatch):
    _fake_over(monkeypatch, over=True)
    r = run(*ARGS, "--memory-budget", "4")
    assert r.returncode == 1
    assert r.stdout.index("As expected") < r.stdout.index("memory budget 4 B: 1 over")
    assert "Kimi-K3 TP8 fp8 dspark k=8 gfx950" in r.stdout and "main-pre: not measured" in r.stdout
    js = run(*ARGS, "--memory-budget", "4", "--format", "json")
    assert js.returncode == 1
    import json

    out = json.loads(js.stdout)
    assert out["as_expected"] and out["memory"]["budget"] == 4
    assert out["memory"]["over_budget"][0]["deployment"] == "Kimi-K3 TP8 fp8 dspark k=8 gfx950"


def test_within_budget_keeps_the_manifests_exit(monkeypatch):
    _fake_over(monkeypatch, over=False)
    r = run(*ARGS, "--memory-budget", "1PiB")
    assert r.returncode == 0 and "none over" in r.stdout
    sarif = run(*ARGS, "--memory-budget", "1PiB", "--format", "sarif")
    assert sarif.returncode == 0 and sarif.stdout.lstrip().startswith("{") and "none over" in sarif.stderr


# --- the numbers are the executed code's (network) -----------------------------------------------------

SHAPES = [
    Shape(arch="gfx950", num_heads=12, kv_cache_dtype="fp8", spec_method="dspark", num_spec_tokens=7),
    Shape(arch="gfx942", num_heads=16, spec_method="mtp", num_spec_tokens=3),
    Shape(arch="gfx950", num_heads=128, kv_cache_dtype="fp8", spec_method="mtp", num_spec_tokens=1),
    Shape(arch="gfx942", num_heads=64, kv_cache_dtype="fp8", spec_method="eagle3", num_spec_tokens=3),
]


@pytest.mark.network
@pytest.mark.parametrize("release", regular_and_slow(["0.28.0", "0.34.0"], "0.34.0"))
def test_the_bytes_are_the_executed_sizing_call_times_aiters_function(release):
    """Each buffer's bytes equal AITER's executed get_mla_metadata_info_v1 on the sizing call the harness
    records for the release's builder (the per-dimension maximum over its calls on 0.34.0, which sizes per
    qlen), and the scratch is AITER's reduce_partial_map rows x qlen x heads x (512 + 1) fp32 plus the
    final LSE, as mla_decode_fwd allocates them."""
    pytest.importorskip("torch")
    import torch

    from spec.analyses.memory import measure
    from spec.realcode import aiter_sizing
    from spec.realcode.executed.harness import execute, release_code

    seqs = 256
    code = release_code(release)
    executed = execute(code, SHAPES, options={"max_num_seqs": seqs})
    aiter = aiter_sizing.aiter_code()
    for shape, row, mem in zip(SHAPES, executed, measure(code, SHAPES, seqs)):
        assert mem.error is None, mem.error
        assert mem.threshold == row["threshold"] and mem.mtp_decode_qlen == row["mtp_decode_qlen"]
        assert (
            mem.sizing[-1] == row["sizing"]
            or max(mem.sizing, key=lambda c: c["max_seqlen_qo"]) == row["sizing"]
        )
        dt = _dtypes(shape.arch)
        fn = aiter_sizing.load(
            aiter.attention, "get_mla_metadata_info_v1", shape.arch, dt, aiter_sizing.Allocations()
        )
        names = {"bf16": dt.bf16, "fp16": dt.fp16, "fp8": dt.fp8}
        answers = [
            fn(
                c["max_num_reqs"],
                c["max_seqlen_qo"],
                c["num_heads"],
                names[c["q_dtype"]],
                names[c["kv_dtype"]],
                False,
                True,
            )
            for c in mem.sizing
        ]
        merged = [
            (
                tuple(max(d) for d in zip(*[(s if isinstance(s, tuple) else (s,)) for s, _ in entries])),
                entries[0][1],
            )
            for entries in zip(*answers)
        ]
        assert [b["bytes"] for b in mem.buffers.values()] == [_bytes(e) for e in merged]
        assert all(c["max_num_reqs"] == seqs for c in mem.sizing)
        if mem.scratch and "bytes" in mem.scratch:
            partial = mem.buffers["_mla_reduce_partial_map"]["shape"][0]
            qlen, heads = mem.scratch["qlen"], mem.scratch["heads"]
            folded = 16 if heads != 16 and not (heads == 128 and shape.kv_cache_dtype == "fp8") else heads
            rows = seqs * qlen * (heads // folded)
            f32 = torch.float32.itemsize
            assert mem.scratch_bytes == partial * qlen * folded * (512 + 1) * f32 + rows * folded * f32


@pytest.mark.network
@pytest.mark.parametrize("method", ["dspark", "dflash"])
@pytest.mark.parametrize("k", [2, 7, 8])
def test_parallel_drafters_threshold_1_plus_2k_oversizes_the_buffers_until_0_31(method, k):
    """0.28-0.30 size the persistent buffers for 1 + 2k (the parallel drafter's threshold); 0.31.0 and
    0.34.0 for 1 + k, so the same k takes fewer bytes (Kimi-K3 TP8 fp8 on gfx950; 0.27.1 sizes for qlen 1,
    the whitelist #51011 removed)."""
    from spec.analyses.memory import measure

    shape = Shape(arch="gfx950", num_heads=12, kv_cache_dtype="fp8", spec_method=method, num_spec_tokens=k)
    mem = {
        v: measure(v, [shape], 1024)[0] for v in ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.34.0")
    }
    for v in ("0.28.0", "0.29.0", "0.30.0"):
        assert mem[v].mtp_decode_qlen == 1 + 2 * k
        for later in ("0.31.0", "0.34.0"):
            assert mem[later].mtp_decode_qlen == 1 + k
            assert mem[v].total_bytes > mem[later].total_bytes
            assert mem[v].metadata_bytes >= mem[later].metadata_bytes
            assert mem[v].scratch_bytes > mem[later].scratch_bytes
    assert max(c["max_seqlen_qo"] for c in mem["0.27.1"].sizing) == 1


@pytest.mark.network
def test_the_default_max_num_seqs_is_vllms_own_for_these_gpus():
    """vllm serve on a 192 GB MI300X or a 288 GB MI355X: get_batch_defaults' large-GPU tier, executed."""
    from spec.analyses.memory import default_max_num_seqs

    for release in ("0.27.1", "0.34.0"):
        assert {default_max_num_seqs(release, arch) for arch in ("gfx942", "gfx950")} == {1024}


@pytest.mark.network
def test_explain_shows_the_buffers_and_check_names_what_exceeds_the_budget():
    shape = (
        "--model Kimi-K3 --tp 8 --kv-cache-dtype fp8 --spec-method dspark --num-spec-tokens 8 --arch gfx950"
    )
    r = run("explain", "--revision", "vllm-0.30", *shape.split(), "--memory")
    assert r.returncode == 0
    assert (
        "max_num_seqs 1024 (vLLM's default on this GPU)" in r.stdout and "_mla_reduce_partial_map" in r.stdout
    )
    assert "threshold 17, _mtp_decode_qlen 17" in r.stdout
    c = run(*ARGS[:2], "vllm-0.30", *ARGS[3:], "--memory-budget", "500MiB", "--max-num-seqs", "1024")
    assert c.returncode == 1
    assert "Kimi-K3 TP8 fp8 dspark k=8 gfx950" in c.stdout
    assert run(*ARGS[:2], "vllm-0.34", *ARGS[3:], "--memory-budget", "1PiB").returncode == 0
