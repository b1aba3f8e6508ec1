"""conform judged like check: each case's replay status against the one its class predicts.

A case carries ``expected_outcome`` (:func:`mla_model.case.expected_outcome`): the status the symptom
``check`` gives its step predicts (a crash: CRASH or NO_KERNEL; a silent wrong output: MISMATCH or
NAN; otherwise PASS) and the symptom's cause.  A result is *expected* when its status is one the
prediction accepts (:func:`mla_model.case.is_expected`) and a *surprise* otherwise: a PASS where a
MISMATCH was predicted is a detection lost, a MISMATCH where a PASS was predicted a new finding or a
broken replay.  SKIP is neither (nothing was compared: unknown); ERROR (the harness failed) is always a
failure.

What a backend can show depends on what computes.  :data:`KERNEL_DEFECTS` are wrong outputs that live
inside an AITER kernel's own arithmetic (a kernel the registry lists as known-wrong, ``mla_gluon``
past the 2 GiB it addresses): only the real ASM or Gluon kernel shows them, and every backend here
computes with a stand-in inside the kernel's contract (``vllm``, ``model``) or AITER's Triton kernel
(``aiter-triton``), so the class predicts PASS.
Fault injection moves the prediction: ``--inject-fault drop-rank-lse`` makes every DCP step that
would pass a MISMATCH; the model backend's ``--fault`` switches have no prediction (raw statuses).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.backends import case_key
from mla_model.case import is_expected

# Symptom causes (mla_model.failures.WRONG_OUTPUTS) inside an AITER kernel: the registry's known-wrong
# kernels and mla_gluon past its 2 GiB KV bound (sources §41-§42).
KERNEL_DEFECTS = ("known_wrong", "gluon_kv_bound")
NO_PREDICTION = "-"  # a run under a --fault switch: raw statuses only


def predicted(case: Any, fault: str | None = None, inject_fault: str | None = None) -> str:
    """The status the case's class predicts on any backend (:data:`NO_PREDICTION` under ``--fault``)."""
    if fault is not None:
        return NO_PREDICTION
    status, cause = case.expected_outcome["status"], case.expected_outcome.get("cause")
    if cause in KERNEL_DEFECTS:
        status = "PASS"
    if inject_fault == "drop-rank-lse" and case.shape.dcp_world_size > 1 and status == "PASS":
        status = "MISMATCH"
    return status


def verdict_of(expected: str, status: str) -> str:
    """``expected``, ``surprise``, ``unknown`` (SKIP: nothing compared) or ``error`` (ERROR)."""
    if status == "ERROR":
        return "error"
    if status == "SKIP":
        return "unknown"
    if expected == NO_PREDICTION:
        return "expected" if status in ("PASS", "NO_KERNEL") else "surprise"
    return "expected" if is_expected(expected, status) else "surprise"


def judge(
    records: Iterable[dict[str, Any]],
    cases: Iterable[Any],
    fault: str | None = None,
    inject_fault: str | None = None,
) -> list[dict[str, Any]]:
    """Each record with ``expected`` (the predicted status) and ``verdict`` (:func:`verdict_of`) added."""
    by_key = {case_key(c): c for c in cases}
    out = []
    for r in records:
        case = by_key.get(r["key"])
        expected = predicted(case, fault, inject_fault) if case is not None else NO_PREDICTION
        out.append({**r, "expected": expected, "verdict": verdict_of(expected, r["status"])})
    return out


def exit_status(judged: list[dict[str, Any]], missing: int = 0) -> int:
    """0 when every status is the expected one; 1 on a surprise, an ERROR or a case without a result;
    3 where some case was skipped (nothing compared) and nothing failed."""
    if missing or any(r["verdict"] in ("surprise", "error") for r in judged):
        return 1
    if any(r["verdict"] == "unknown" for r in judged) or not judged:
        return 3
    return 0
