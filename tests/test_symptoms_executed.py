"""Every counterexample class's symptom against the release's executed decode path (issue 13, item 7).

For every model revision that a vLLM release carries (``RELEASE_OF_REVISION``:
vllm-0.27 -> 0.27.1 ... vllm-0.34 -> 0.34.0; ``main-pre-51011`` was never
released, so it has no code to execute and is left out) and every bundled
registry, ``check_all`` with ``max_classes=None`` gives every counterexample
class of every invariant.  Each class's smallest shape carries a symptom,
:func:`mla_model.failures.symptom_of` (what check's JSON calls
``symptom_kind``), and runs through the ``vllm`` conformance backend's
harness on CPU: the release's real ``rocm_aiter_mla.py`` (builder, ``build``,
``forward_mqa``) over the stub packages, each AITER call refused where the
registry says AITER refuses it and otherwise filled by a stand-in inside the
kernel's contract, the output judged against the float32 reference
(:func:`conformance.backends.vllm.judge`).  They must agree:

* **crash raised in vLLM**: the release itself raises (conform CRASH) the
  exception type the symptom names, in the function it names; the type and the
  place are the release's own code.
* **crash raised in AITER** (mla_gluon's asserts, ``get_meta_param``'s KeyError,
  the head fold, ``asm_mla.cu``): the release's call is refused with the same
  failure (conform NO_KERNEL) and exception type.  The refusal is the
  registry's (the stand-in raises what :mod:`mla_model.failures` says), so
  what is executed is the request: the padding, qlen, persistence and dtypes
  the release really hands AITER, which must be one that fails that way.
* **startup abort**: the release refuses while the builder or impl is built.
  No class has one today (the model's validity rules take those shapes out);
  the mapping stays so that one would be caught.
* **silent wrong output** the stand-in reproduces (an fp8 cache read by
  Gluon with the ``kv_scale=1.0`` vLLM passes; a DCP CPRR step's unpad, run
  with every rank and the release's merge): MISMATCH or NAN.
* **silent wrong output** it cannot reproduce: a kernel the registry lists as
  running but wrong (``[[known_wrong]]``: #51011's non-persistent fp8 path,
  aiter #5679), Gluon past its 2 GiB addressing bound.  The stand-in computes
  the kernel's contract, so the executed output is right (PASS, asserted: a
  wrong output there would be the harness's or the release's fault, not this
  one).  The wrongness is the registry's claim from the cited reports
  (docs/sources.md §47-§48), not executed; what is executed is that the
  release lands there: its ASM call, resolved against the registry, is a
  known-wrong entry, or its ``mla_gluon`` call reads a layer cache past the bound.
* **performance only**: PASS, and the record shows the schedule lost (vLLM's
  work metadata dropped by AITER, the persistent gate closed for the step's
  qlen, or metadata built for a step that runs elsewhere).

A class whose step shows none of these (``symptom_kind`` "none") fails the test:
its invariant needs an entry in the failure order.
"""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pytest

from conformance.backends.vllm import REPLAY, judge
from mla_model.decision import decide
from mla_model.failures import (
    CRASH,
    FAILURE_BY_KIND,
    PERFORMANCE,
    SILENT_WRONG_OUTPUT,
    STARTUP_ABORT,
    SYMPTOM_KINDS,
    Symptom,
    symptom_of,
)
from mla_model.registry import (
    REGISTRY_IDS,
    Registry,
    asm_lookup,
    known_wrong_matches,
    load_registry,
    v_scale_dropped,
)
from mla_model.revisions import RELEASE_OF_REVISION, get_revision
from mla_model.shape import Shape
from spec.proof.check_all import check_all
from spec.proof.invariants import INVARIANTS
from spec.proof.verdict import DEFAULT_TIMEOUT_MS, UNKNOWN, VIOLATED
from spec.realcode.executed.calls import asm_request

# The symptom replay of every class: CI's second step, `pytest -m slow`.
pytestmark = [pytest.mark.network, pytest.mark.slow]

# What the harness gives the replay: the backend's own stand-in, CPU, a short context (the verdict does not
# depend on its length; the run time does).
OPTIONS = {"replay": REPLAY, "device": "cpu", "kv_len": 16}
# Wrong output the executed release produces around a right kernel (vLLM's kv_scale=1.0 to Gluon, a V scale
# dropped, the CPRR unpad that keeps o[:, :heads] of a repeat-padded query: findings F10).
REPRODUCED = ("gluon_kv_scale", "asm_v_scale", "head_unpad")


@dataclass(frozen=True)
class Class:
    """One counterexample class: where it was found, its smallest shape and that step's symptom."""

    revision: str
    registry: str
    invariant: str
    shape: Shape
    symptom: Symptom
    reported: dict[str, Any]  # the counterexample as check's JSON has it

    def key(self) -> tuple[str, str, str]:
        return (self.revision, self.registry, repr(self.shape))

    def __str__(self) -> str:
        return f"{self.revision}/{self.registry} {self.invariant} {self.shape}"


def _classes() -> list[Class]:
    results = check_all(
        list(RELEASE_OF_REVISION),
        REGISTRY_IDS,
        [inv.id for inv in INVARIANTS],
        max_classes=None,
        timeout=DEFAULT_TIMEOUT_MS / 1000,
    )
    unfinished = [
        (r.revision, r.registry, r.invariant) for r in results if r.verdict == UNKNOWN or not r.complete
    ]
    assert not unfinished, f"classes not enumerated in full: {unfinished}"
    out = []
    for r in results:
        if r.verdict != VIOLATED:
            continue
        reg = load_registry(r.registry)
        for c in r.counterexamples:
            d = decide(get_revision(r.revision), reg, c.shape)
            out.append(Class(r.revision, r.registry, r.invariant, c.shape, symptom_of(d, reg), c.to_json()))
    return out


def _execute(release: str, registry: str, shapes: list[Shape]) -> list[dict[str, Any]]:
    from spec.realcode.executed.harness import execute, release_code

    return execute(release_code(release), shapes, registry, options=OPTIONS, seed=0)


@pytest.fixture(scope="module")
def replayed() -> tuple[list[Class], dict[tuple[str, str, str], dict[str, Any]]]:
    """Every class, and the executed record of each distinct (revision, registry, shape): one harness
    child per (release, registry), two at a time."""
    classes = _classes()
    jobs: dict[tuple[str, str], dict[str, Shape]] = collections.defaultdict(dict)
    for c in classes:
        jobs[(c.revision, c.registry)][repr(c.shape)] = c.shape
    with ThreadPoolExecutor(2) as pool:
        done = {
            job: pool.submit(_execute, RELEASE_OF_REVISION[job[0]], job[1], list(shapes.values()))
            for job, shapes in jobs.items()
        }
        rows = {
            (rev, reg, key): row
            for (rev, reg), future in done.items()
            for key, row in zip(jobs[(rev, reg)], future.result(), strict=True)
        }
    # A silent wrong output of a DCP step lives in the heads the ranks' merge returns (0.32-0.34's CPRR
    # unpad, findings F10): one rank's record cannot show it, so those classes run every rank and the
    # release's merge (conformance.dcp_replay, simulated ranks, as conform's vllm backend does).
    from conformance import dcp_replay
    from spec.realcode.executed.harness import release_code

    for c in classes:
        if c.shape.dcp_world_size > 1 and c.symptom.kind == SILENT_WRONG_OUTPUT:
            code = release_code(RELEASE_OF_REVISION[c.revision])
            (row,) = dcp_replay.execute(code, [c.shape], c.registry, OPTIONS, 0)
            rows[(c.revision, c.registry, repr(c.shape))] = row
    return classes, rows


# --- what the executed record shows --------------------------------------------------------------


def _asm_call(row: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in row.get("calls") or [] if c.get("entry") == "mla_decode_fwd"), None)


def _lands_on_known_wrong(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    """The executed ASM request (as the release made it) resolves to a registry entry of wrong kernels."""
    call = _asm_call(row)
    if call is None:
        return False
    req = asm_request(call)
    lookup = asm_lookup(reg, shape.arch, req, call["num_reqs"])
    return any(bool(m) for m in known_wrong_matches(reg, shape.arch, req, lookup))


def _v_scale_miscounted(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    """The executed ASM request lands on a kernel that drops V's scale exactly where the release's builder
    did not set fp8_v_scale_fix, or the other way round (the release rescales what the kernel scaled)."""
    call = _asm_call(row)
    if call is None or call["kv_dtype"] != "fp8":
        return False
    req = asm_request(call)
    dropped = bool(v_scale_dropped(reg, shape.arch, req, asm_lookup(reg, shape.arch, req, call["num_reqs"])))
    return dropped != bool((row.get("decode") or {}).get("fp8_v_scale_fix"))


def _gluon_past_bound(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    gluon = any(c.get("entry") == "mla_gluon" for c in row.get("calls") or [])
    return gluon and shape.kv_cache_bytes > reg.gluon_max_kv_cache_bytes


def _verify_through_decode(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    decode = row.get("decode") or {}
    gluon = any(c.get("entry") == "mla_gluon" for c in row.get("calls") or [])
    return gluon and bool(decode.get("use_gluon_decode")) and shape.max_qo_len > 1


def _persistent_dropped(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    call = _asm_call(row)
    return call is not None and call["persistent"] and not call["aiter_persistent"]


def _gate_closed(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    call = _asm_call(row)
    return (
        call is not None and not call["persistent"] and (row.get("mtp_decode_qlen") or 0) < shape.max_qo_len
    )


def _metadata_unused(row: dict[str, Any], shape: Shape, reg: Registry) -> bool:
    built = bool((row.get("decode") or {}).get("has_persistent_metadata"))
    return built and _asm_call(row) is None


# Per cause the symptom names (mla_model.failures.WRONG_OUTPUTS, PERFORMANCE_LOSSES): the executed fact that
# the step is where that cause says it is.
EVIDENCE = {
    "known_wrong": _lands_on_known_wrong,
    "asm_v_scale": _v_scale_miscounted,
    "gluon_kv_bound": _gluon_past_bound,
    "decode_verify_overlap": _verify_through_decode,
    "persistent_dropped": _persistent_dropped,
    "persistent_gate_closed": _gate_closed,
    "metadata_unused": _metadata_unused,
}


def executed_kind(row: dict[str, Any]) -> str:
    """The symptom kind the executed record shows, by its own facts (stage, outcome, conform's verdict)."""
    status = judge(row)["status"]
    if row.get("stage") == "refused":
        return STARTUP_ABORT if not row.get("valid_heads", True) else "not a decode step"
    if row.get("outcome") == "vllm_raises" and row.get("stage") == "init":
        return STARTUP_ABORT
    if status in ("CRASH", "NO_KERNEL"):
        return CRASH
    if status in ("MISMATCH", "NAN"):
        return SILENT_WRONG_OUTPUT
    return "ran right" if status == "PASS" else status


def disagreement(c: Class, row: dict[str, Any]) -> str | None:
    """Why the executed record does not show the class's symptom; None where it does."""
    s, reg = c.symptom, load_registry(c.registry)
    verdict = judge(row)
    seen = f"executed {executed_kind(row)} ({verdict['status']}: {verdict.get('detail', '')[:160]})"
    error = str(row.get("error") or "")
    raised = error.split(":", 1)[0]
    where = str(row.get("where") or "").split(":", 1)[0]
    if s.kind == CRASH:
        f = FAILURE_BY_KIND[s.cause]
        if f.where == "vllm":
            ok = row.get("outcome") == "vllm_raises" and row.get("stage") != "init" and bool(where)
            ok = ok and where in f.raised_in  # the release function that raised is the one the symptom names
            ok = ok and not any("raised" in call for call in row.get("calls") or [])
        else:
            ok = row.get("outcome") == f"aiter:{f.kind}" and verdict["status"] == (
                "NO_KERNEL" if f.refusal else "CRASH"
            )
        if ok and raised == s.exception:
            return None
        named = f"symptom: {s.exception} raised in {s.raised_in} ({s.cause})"
        return f"{named}; {seen}, raised {raised!r} at {where!r}"
    if s.kind == STARTUP_ABORT:
        return None if executed_kind(row) == STARTUP_ABORT else f"symptom: startup abort; {seen}"
    if s.kind == SILENT_WRONG_OUTPUT and s.cause in REPRODUCED:
        return None if verdict["status"] in ("MISMATCH", "NAN") else f"symptom: {s.headline}; {seen}"
    if s.kind in (SILENT_WRONG_OUTPUT, PERFORMANCE):
        if verdict["status"] != "PASS":
            return f"symptom: {s.headline}; {seen} (the step should run, its output in the kernel's contract)"
        if not EVIDENCE[s.cause](row, c.shape, reg):
            return f"symptom: {s.headline}; {seen}, but the record does not show {s.cause}"
        return None
    return f"no symptom derived ({s.kind}: {s.headline}); {seen}"


# --- the tests -----------------------------------------------------------------------------------


def test_every_class_has_a_symptom_kind(replayed):
    classes, _ = replayed
    assert len(classes) > 300
    nameless = [str(c) for c in classes if c.symptom.kind not in SYMPTOM_KINDS]
    assert not nameless, f"{len(nameless)} classes without a symptom in the failure order: {nameless[:10]}"


def test_check_json_carries_each_class_symptom(replayed):
    classes, _ = replayed
    for c in classes:
        assert {k: c.reported.get(k) for k in c.symptom.to_json()} == c.symptom.to_json(), c
        assert c.symptom.summary in c.reported["symptom"], c


def test_every_class_symptom_agrees_with_the_executed_release(replayed):
    classes, rows = replayed
    found = []
    for c in classes:
        why = disagreement(c, rows[c.key()])
        if why:
            found.append(f"{c}: {why}")
    assert not found, f"{len(found)} of {len(classes)} classes disagree:\n" + "\n".join(found[:20])


def test_every_kind_of_agreement_is_exercised(replayed):
    """So that the agreement above is not empty for a kind: each way of agreeing is met by some class."""
    classes, _ = replayed
    met = collections.Counter()
    for c in classes:
        s = c.symptom
        if s.kind == CRASH:
            met["crash in vLLM" if FAILURE_BY_KIND[s.cause].where == "vllm" else "crash in AITER"] += 1
        elif s.kind == SILENT_WRONG_OUTPUT:
            met["wrong output, executed" if s.cause in REPRODUCED else "wrong output, registry's claim"] += 1
        else:
            met[s.kind] += 1
    wanted = (
        "crash in vLLM",
        "crash in AITER",
        "wrong output, executed",
        "wrong output, registry's claim",
        PERFORMANCE,
    )
    assert all(met[k] for k in wanted), met


def test_a_symptom_the_release_does_not_show_is_a_disagreement(replayed):
    """The agreement can fail: each class's record, paired with a symptom of another kind, disagrees."""
    classes, rows = replayed
    by_kind = {}
    for c in classes:
        by_kind.setdefault((c.symptom.kind, c.symptom.cause in REPRODUCED), c)
    crash = next(c for (kind, _), c in by_kind.items() if kind == CRASH)
    wrong = by_kind[(SILENT_WRONG_OUTPUT, True)]
    claimed = by_kind[(SILENT_WRONG_OUTPUT, False)]
    slow = by_kind[(PERFORMANCE, False)]
    for c, other in ((crash, slow), (slow, crash), (wrong, slow), (claimed, wrong), (slow, claimed)):
        assert disagreement(replace(c, symptom=other.symptom), rows[c.key()]), (c, other.symptom)
    wrong_type = replace(crash.symptom, exception="ZeroDivisionError")
    assert disagreement(replace(crash, symptom=wrong_type), rows[crash.key()])
