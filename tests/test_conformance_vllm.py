"""The ``vllm`` conformance backend: a release's real decode path, each AITER call replayed in its contract.

The stand-in and the verdict mapping are tested on hand-made calls (no
release needed); the end-to-end tests run real release code through the
executing harness and are marked ``network`` (the release trees come from
the sdists, cached in ~/.cache/mla-spec).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from conformance.backends import vllm as vllm_backend
from conformance.backends import vllm_replay
from conformance.cli.conform import conform_command
from mla_model.case import read_cases, write_cases
from mla_model.reference import DEFAULT_SM_SCALE, HEAD_DIM
from mla_model.shape import Shape
from spec.realcode.executed import child

ROOT = Path(__file__).resolve().parent.parent
FIXED = ROOT / "tests" / "generated" / "vllm_028" / "cases.jsonl"
PRE_FIX = ROOT / "tests" / "generated" / "vllm_027" / "cases.jsonl"


@pytest.fixture
def stub_state(monkeypatch):
    """The stubs' shared state (only :mod:`mla_spec_stub`, no vllm/aiter stubs installed), on gfx950."""
    monkeypatch.syspath_prepend(str(child.STUBS))
    import mla_spec_stub

    monkeypatch.setattr(mla_spec_stub.STATE, "arch", "gfx950")
    monkeypatch.setattr(mla_spec_stub.STATE, "events", [])
    yield mla_spec_stub.STATE


def _gluon_step(kv_scale_passed: float, true_scale: float = 0.5, heads: int = 4, tokens: int = 40):
    """One fp8-KV Gluon decode row as vLLM hands it (``kv_scale`` as passed), and the true Batch behind it."""
    g = torch.Generator().manual_seed(0)
    kv_true = torch.randn(tokens, HEAD_DIM, generator=g) * 0.5
    stored = (kv_true / true_scale).to(torch.float8_e4m3fn)
    kv_true = stored.float() * true_scale
    q_true = torch.randn(1, heads, HEAD_DIM, generator=g).to(torch.bfloat16).float()
    q = q_true.to(torch.bfloat16)
    o = torch.full((1, heads, 512), float("nan"), dtype=torch.bfloat16)
    call = {
        "entry": "mla_gluon",
        "q_dtype": "bf16",
        "kv_dtype": "fp8",
        "kv_scale": kv_scale_passed,
        "sm_scale": DEFAULT_SM_SCALE,
        "tensors": {
            "q_nope": q[..., :512],
            "q_pe": q[..., 512:],
            "o": o,
            "kv": stored.view(tokens, 1, HEAD_DIM),
            "kv_indptr": torch.tensor([0, tokens], dtype=torch.int32),
            "kv_indices": torch.randperm(tokens, generator=g).to(torch.int32),
        },
    }
    batch = type("Batch", (), {})()
    block_table = call["tensors"]["kv_indices"].view(1, -1)
    batch.q_true, batch.kv_true, batch.kv_lens, batch.block_table = q_true, kv_true, [tokens], block_table
    batch.kv_cache = stored.view(tokens, 1, HEAD_DIM)
    shape = Shape(arch="gfx950", kv_cache_dtype="fp8", q_dtype="bf16", num_heads=heads, max_qo_len=1)
    return call, batch, shape


def test_gluon_with_the_fp8_cache_behind_kv_scale_1_is_a_mismatch(stub_state):
    call, batch, shape = _gluon_step(kv_scale_passed=1.0)
    vllm_replay.kernel("mla_gluon", call)
    result = vllm_replay.verdict(shape, batch, call["tensors"]["o"], {}, {})
    assert result["status"] == "MISMATCH", result
    assert call["replay"]["kv_scale"] == 1.0  # what vLLM passed, not corrected


def test_gluon_with_the_true_kv_scale_passes(stub_state):
    call, batch, shape = _gluon_step(kv_scale_passed=0.5)
    vllm_replay.kernel("mla_gluon", call)
    result = vllm_replay.verdict(shape, batch, call["tensors"]["o"], {}, {})
    assert result["status"] == "PASS", result


def test_an_index_past_the_cache_reads_poison_not_a_clamped_row(stub_state):
    call, batch, shape = _gluon_step(kv_scale_passed=0.5)
    call["tensors"]["kv_indices"][3] = 10_000
    vllm_replay.kernel("mla_gluon", call)
    assert torch.isnan(call["tensors"]["o"].float()).all()


def _row(outcome: str, **extra):
    return {
        "shape": {"num_heads": 16, "max_qo_len": 1},
        "stage": "forward",
        "outcome": outcome,
        "calls": [],
        "error": "boom",
        **extra,
    }


@pytest.mark.parametrize(
    "row, status",
    [
        (_row("aiter:no_kernel"), "NO_KERNEL"),
        (_row("aiter:gluon_dtype"), "NO_KERNEL"),
        (_row("aiter:something_new"), "CRASH"),
        (_row("vllm_raises"), "CRASH"),
        ({"_skip": "cannot resolve --vllm 9.9.9"}, "SKIP"),
        ({"_error": "harness fault (vllm==0.27.1): RuntimeError"}, "ERROR"),
        (_row("harness_fault"), "ERROR"),
        ({**_row("ran"), "stage": "done", "verdict": {"status": "NAN", "detail": "x"}}, "NAN"),
        (
            {
                **_row("ran"),
                "stage": "done",
                "calls": [{"entry": "x", "replay": {"no_stand_in": "no stand-in for x"}}],
            },
            "SKIP",
        ),
        ({**_row("ran"), "stage": "refused", "valid_heads": True, "threshold": 1}, "SKIP"),
    ],
)
def test_a_harness_row_maps_to_a_verdict(row, status):
    assert vllm_backend.judge(row)["status"] == status


class CompilationError(Exception):
    """Named as Triton's, which the recorder tells apart by its name and message."""


def test_a_release_kernel_this_gpu_cannot_compile_is_served_by_the_stand_in(stub_state, monkeypatch):
    """vLLM 0.34.0's gfx942 verify reads fp8 e4m3fnuz, which NVIDIA's Triton cannot compile: the case is
    replayed by the stand-in (as on the CPU) and says so, instead of ending as a SKIP or an ERROR; any
    other failure of the release's kernel stays a harness fault; a kernel that runs is timed."""
    from mla_spec_stub import StandInFault, recorder

    served = []
    monkeypatch.setattr(stub_state, "kernel", lambda entry, call: served.append(entry) or "stand-in")
    monkeypatch.setattr(stub_state, "timer", lambda fn, device: 0.25)

    def no_fp8e4b8():
        raise CompilationError('ValueError("type fp8e4b8 not supported in this architecture.")')

    call: dict = {}
    assert recorder.compute("decode_attention_fwd_verify", call, no_fp8e4b8) == "stand-in"
    assert served == ["decode_attention_fwd_verify"]
    assert call["computed_by"].startswith("the stand-in (the release's own decode_attention_fwd_verify")

    def broken():
        raise RuntimeError("an illegal memory access")

    with pytest.raises(StandInFault, match="cannot run on this GPU: RuntimeError"):
        recorder.compute("decode_attention_fwd_verify", {}, broken)
    ran: dict = {}
    assert recorder.compute("decode_attention_fwd_verify", ran, lambda: "real") == "real"
    assert ran["computed_by"] == "the release's own kernel" and ran["replay"]["t_ms"] == 0.25


def test_vllm_is_a_backend_and_its_switch_is_its_own(tmp_path):
    from conformance.backends import BACKENDS

    assert BACKENDS["vllm"] == "conformance.backends.vllm"
    cases = tmp_path / "cases.jsonl"
    write_cases(read_cases(FIXED)[:1], cases)
    result = CliRunner().invoke(
        conform_command, ["--backend", "model", "--cases", str(cases), "--vllm", "0.28.0"]
    )
    assert result.exit_code == 2 and "--vllm" in result.output


# --- real release code ----------------------------------------------------------------------


def _run(cases, release: str, monkeypatch) -> tuple[list[dict], int]:
    """Every case through the backend (as the plugin drives it), and how many harness processes started."""
    from spec.realcode.executed import harness

    started = []
    real = harness.execute
    monkeypatch.setattr(harness, "execute", lambda *a, **k: started.append(1) or real(*a, **k))
    backend = vllm_backend.VllmBackend()
    backend.configure(release=release, cases=cases)
    from conformance import runner

    return [runner.run_case(c, backend, "cpu", 32) for c in cases], len(started)


@pytest.mark.network
def test_0_27_1_reads_the_fp8_cache_on_gluon_with_kv_scale_1_and_never_passes(monkeypatch):
    cases = [c for c in read_cases(PRE_FIX) if "fp8-never-reaches-gluon" in c.origin]
    records, processes = _run(cases, "0.27.1", monkeypatch)
    assert processes == 1
    status = {r["id"]: r["status"] for r in records}
    assert "PASS" not in status.values(), status
    assert status["gfx950-fp8-h1-q1-nospec-auto-qbf16"] == "MISMATCH"
    gluon = next(r for r in records if r["id"] == "gfx950-fp8-h1-q1-nospec-auto-qbf16")["executed"][0]
    assert gluon["entry"] == "mla_gluon" and gluon["kv_scale"] == 1.0 and gluon["kv_dtype"] == "fp8"


@pytest.mark.network
def test_0_28_0_computes_its_committed_cases_right(monkeypatch):
    cases = [c for c in read_cases(FIXED) if c.shape.num_reqs <= 2][:40]
    records, processes = _run(cases, "0.28.0", monkeypatch)
    assert processes == 1
    statuses = [r["status"] for r in records]
    assert "MISMATCH" not in statuses and "NAN" not in statuses, [r["detail"] for r in records]
    assert statuses.count("PASS") >= 10
    fp8 = [r for r in records if r["status"] == "PASS" and r["kv_dtype"] == "fp8"]
    assert fp8 and all(c["kv_scale"] == 0.5 for r in fp8 for c in r["executed"])


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_conform_streams_vllm_results(tmp_path):
    cases = tmp_path / "cases.jsonl"
    write_cases([c for c in read_cases(FIXED) if c.shape.num_reqs == 1][:6], cases)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        conform_command,
        [
            "--backend",
            "vllm",
            "--vllm",
            "0.28.0",
            "--cases",
            str(cases),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--kv-len",
            "16",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()[1:]]  # after the settings line
    assert len(records) == 6 and all(
        r["backend"] == "vllm" and r["release"] == "vllm==0.28.0" for r in records
    )
    assert sys.modules.get("vllm") is None or "stubs" not in str(getattr(sys.modules["vllm"], "__file__", ""))
