"""The ``model`` backend against the float32 reference, and the runner catching every injected fault.

Risk model: a conformance runner that never fails proves nothing.  So the
negative cases matter most here: each documented failure mode, injected into
the emulated data path, must turn every case it touches into NAN or MISMATCH,
and the one real defect the pinned pre-#51011 routes still carry (fp8 KV
handed to Gluon with ``kv_scale=1.0``) must show up without any injection.
"""

from __future__ import annotations

import glob
import time
from pathlib import Path

import pytest
import torch

from conformance.backends import load_backend
from conformance.runner import Stopwatch, classify, run_case
from mla_model.case import read_cases
from mla_model.decision import decide
from mla_model.emulation import (
    FAULTS,
    NoKernel,
    as_kernel_heads,
    asm_num_kv_splits,
    fault_touches,
    gluon_num_kv_splits,
    lse_reduce,
    pad_heads,
    unpad_heads,
)
from mla_model.failures import first_failure
from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from tests.params import regular_and_slow

ROOT = Path(__file__).resolve().parent
CASES = [
    c for f in sorted(glob.glob(str(ROOT / "generated" / "*" / "cases.jsonl"))) for c in read_cases(Path(f))
]
KV_LEN = 16  # short contexts keep the whole sweep to a few seconds on CI's two cores
PRE_FIX = ("vllm-0.27", "main-pre-51011")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def baseline():
    model = load_backend("model")
    return {id(c): run_case(c, model, "cpu", KV_LEN) for c in CASES}


def _decision(case):
    return decide(get_revision(case.revision), load_registry(case.registry), case.shape)


def _vllm_fails(case) -> bool:
    """The case's first failure is vLLM's (it raises, its Gluon loader fails, its padding is wrong):
    a CRASH."""
    found = first_failure(decide(get_revision(case.revision), load_registry(case.registry), case.shape))
    return found is not None and not found[0].refusal


def _fp8_on_gluon_with_unit_scale(case) -> bool:
    route = _decision(case).route
    return route.path.startswith("gluon") and route.request.kv_dtype == "fp8" and not route.kv_scale_passed


def _cprr_unpad(case) -> bool:
    return case.expected_outcome["cause"] == "head_unpad"


def test_the_suite_has_cases_to_replay():
    assert len(CASES) > 100


def test_every_routed_kernel_matches_the_reference(baseline):
    """PASS wherever a kernel serves the route; NO_KERNEL exactly where the model says none does."""
    for case in CASES:
        r = baseline[id(case)]
        assert r["status"] in ("PASS", "NO_KERNEL", "MISMATCH", "CRASH"), (case.id, r["detail"])
        if r["status"] == "MISMATCH":  # Gluon's kv_scale=1.0, or the CPRR route's unpad (sources §61)
            assert _fp8_on_gluon_with_unit_scale(case) or _cprr_unpad(case), (case.id, r["detail"])
        pinned = case.expected_route
        # vLLM raising on a shape the engine accepts is a crash; AITER turning the request down is NO_KERNEL.
        assert (r["status"] == "CRASH") == _vllm_fails(case), (case.id, r["detail"])
        if pinned["path"].startswith("asm") and pinned["kernel"] is None and not _vllm_fails(case):
            assert r["status"] == "NO_KERNEL", (case.id, r["detail"])
    assert sum(r["status"] == "PASS" for r in baseline.values()) > len(CASES) / 2


def test_fp8_on_gluon_with_a_hard_coded_scale_is_caught_without_injection(baseline):
    """The pre-#51011 routes send fp8 KV to Gluon with kv_scale=1.0: wrong numbers, only there."""
    mismatched = [c for c in CASES if baseline[id(c)]["status"] == "MISMATCH" and not _cprr_unpad(c)]
    assert mismatched, "the pinned pre-fix counterexamples should reach Gluon with fp8 KV"
    assert {c.revision for c in mismatched} <= set(PRE_FIX)
    fixed = [c for c in CASES if c.revision not in PRE_FIX and not _cprr_unpad(c)]
    assert fixed and all(
        baseline[id(c)]["status"] in ("PASS", "NO_KERNEL") for c in fixed if not _vllm_fails(c)
    )


@pytest.mark.parametrize("fault", regular_and_slow(FAULTS, "fp8-read-as-bf16", "metadata-short-qlen"))
def test_every_fault_is_flagged_on_every_case_it_touches(fault, baseline):
    model = load_backend("model")
    touched = [c for c in CASES if fault_touches(fault, _decision(c)) and baseline[id(c)]["status"] == "PASS"]
    assert touched, f"no case exercises {fault}"
    for case in touched:
        r = run_case(case, model, "cpu", KV_LEN, fault)
        assert r["status"] in ("NAN", "MISMATCH"), (fault, case.id, r["status"], r["detail"])
    untouched = [c for c in CASES if not fault_touches(fault, _decision(c))][:20]
    for case in untouched:
        assert run_case(case, model, "cpu", KV_LEN, fault)["status"] == baseline[id(case)]["status"]


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 8, 12, 15])
def test_head_padding_round_trips_and_the_repeat_pad_of_a_non_divisor_does_not(heads):
    q = torch.randn(3, heads, 576)
    how = "repeat_interleave" if 16 % heads == 0 else "tile"
    padded = pad_heads(q, heads, 16, how)
    assert padded.shape == (3, 16, 576) and padded.is_contiguous()
    assert torch.equal(unpad_heads(padded, heads, 16, how), q)
    if how == "tile":  # vLLM 0.27's repeat pad: too few heads, read past the end, the wrong heads back
        seen = as_kernel_heads(pad_heads(q, heads, 16, "repeat_interleave"), 16)
        assert seen.shape == (3, 16, 576) and torch.isnan(seen[-1]).any()
        assert unpad_heads(seen, heads, 16, "repeat_interleave").shape[1] != heads


def test_lse_reduce_ignores_empty_splits():
    o = torch.randn(3, 2, 4)
    lse = torch.tensor([[0.5, -1.0], [float("-inf"), float("-inf")], [0.1, 2.0]])
    merged = lse_reduce(o, lse)
    w = torch.softmax(torch.stack([lse[0], lse[2]]), dim=0)
    torch.testing.assert_close(merged, w[0, :, None] * o[0] + w[1, :, None] * o[2])


def test_split_counts_follow_aiter():
    reg = load_registry("aiter-0.1.20")
    assert gluon_num_kv_splits(1, 1, 8) == 256 and gluon_num_kv_splits(32, 4, 16) == 2
    assert 1 <= asm_num_kv_splits(reg, "gfx950", 4, 4000, 16, 1, "bf16") <= 16
    with pytest.raises(NoKernel, match=r"get_block_n_fp8\[80\]"):
        asm_num_kv_splits(reg, "gfx950", 1, 100, 16, 5, "fp8")


def test_classify_poisoned_rows_shape_and_tolerance():
    ref = torch.randn(4, 2, 512)
    assert classify(ref.to(torch.bfloat16), ref, ref.to(torch.bfloat16))["status"] == "PASS"
    poisoned = ref.clone()
    poisoned[3] = float("nan")
    assert classify(poisoned, ref, ref)["status"] == "NAN"
    assert classify(ref[:, :1], ref, ref)["status"] == "MISMATCH"
    assert classify(ref * 1.1, ref, ref)["status"] == "MISMATCH"


def test_a_crashing_backend_is_recorded_and_survived():
    class Exploding:
        name = "exploding"

        def unavailable(self, device):
            return None

        def run(self, *args):
            raise RuntimeError("device-side assert triggered")

    case = CASES[0]
    r = run_case(case, Exploding(), "cpu", KV_LEN)
    assert r["status"] == "CRASH" and "device-side assert" in r["detail"]
    assert run_case(case, load_backend("model"), "cpu", KV_LEN)["status"] in ("PASS", "NO_KERNEL")


def test_stopwatch_keeps_the_fastest_run():
    """Runs of 60, 5 and 30 ms: millis() reports the 5 ms one, not the first (60) nor the mean (about 32)."""
    naps = iter((0.060, 0.005, 0.030))
    watch = Stopwatch("cpu")
    watch.best("x", lambda: time.sleep(next(naps)), 3)
    spans = watch.spans["x"]
    assert len(spans) == 3 and spans[0] >= 60 and spans[1] >= 5 and spans[2] >= 30
    assert watch.millis()["x"] == min(spans) and 5 <= watch.millis()["x"] < 30
