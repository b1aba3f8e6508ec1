"""The ``vllm`` backend: a vLLM release's real decode path, with each AITER call replayed in its contract.

Each case's Shape runs through the executing harness
(:mod:`spec.realcode.executed`): the release's real ``rocm_aiter_mla.py``
(``AiterMLAMetadataBuilder`` and ``build``, ``AiterMLAImpl.forward_mqa``) over
stub ``vllm``/``aiter`` packages, with vLLM's own padding, metadata, scales and
routing.  The recorder refuses a call where AITER would (the registry's
tables and asserts); a call it admits is filled by
:mod:`conformance.backends.vllm_replay`, a stand-in that computes with exactly
the tensors and scalars vLLM passed (the ``kv_scale`` vLLM hands Gluon, fp8
bytes read as the kernel reads them) and never corrects them.  The step's
output is judged against the float32 reference of the *true* logical inputs
with the runner's own tolerance and :func:`conformance.runner.classify`.

Verdicts: PASS / MISMATCH / NAN from the output; the row's outcome otherwise:
an AITER refusal (``aiter:<kind>``) is NO_KERNEL for the kinds in
:data:`mla_model.failures.REFUSALS`, CRASH for any other; vLLM raising before a kernel
runs is CRASH with the error; a shape the release does not admit as a decode
(``max_qo_len`` above its reorder threshold) is SKIP; a release's own Triton kernel this GPU's
Triton cannot compile is replayed by its stand-in, as on the CPU (the call's ``computed_by`` says
so); a harness fault (a name the stubs lack, a stand-in or the harness itself raising: mla-spec's
code, not the release) is ERROR for that case, naming the fault, and is run again on resume.

A case with ``dcp_world_size > 1`` is a DCP replay (:mod:`conformance.dcp_replay`):
every rank runs the release's decode over its KV shard and the ranks' outputs
are merged by the release's own LSE merge, simulated in one process or as
gloo/NCCL processes (option ``dcp_ranks``); option ``inject_fault``
(``drop-rank-lse``) drops the last rank's LSE before the merge.

Cases run in batches: one harness child per chunk of :data:`CHUNK` cases
(same registry, DCP or not), started when the first case of the chunk is asked for; the
rest of the chunk is answered from memory.  On a GPU every chunk still to run starts at the first
case, side by side.  Each child (the harness's, or the DCP replay's with simulated ranks) imports torch
and the release once and forks its workers (:func:`spec.realcode.executed.harness.worker_count`): a
case spends most of its time in Python around small kernels, so workers side by side keep the GPU busy
(the H200 acceptance run, benchmarks/gpu.py).
The release is ``--vllm`` (``mla-spec conform``) / ``--mla-vllm`` (pytest): a version (``0.28.0``), a
vLLM tree or a ``rocm_aiter_mla.py`` inside one; without it each case runs
through its own revision's release.
"""

from __future__ import annotations

import ast
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conformance.backends import case_key
from mla_model.failures import REFUSALS

CHUNK = 256
REPLAY = "conformance.backends.vllm_replay"
DCP_ENV = {"dcp_ranks": "MLA_SPEC_DCP_RANKS", "inject_fault": "MLA_SPEC_INJECT_FAULT"}


class VllmBackend:
    name = "vllm"

    def __init__(self) -> None:
        self.release: str | None = None
        self.pending: list[Any] = []  # cases the run will ask for, in order (chunks are cut from here)
        self.rows: dict[str, dict[str, Any]] = {}  # case key -> the harness row (or a "skip" note)
        self.options: dict[str, Any] = {}

    def configure(self, release: str | None = None, cases: Iterable[Any] = (), **options: Any) -> None:
        """The release to execute, the cases to batch (in run order), harness options (``kv_scale``, ...).

        The DCP replay's ``dcp_ranks`` and ``inject_fault`` default to what ``mla-spec conform``'s
        ``--dcp-ranks``/``--inject-fault`` put in :data:`DCP_ENV` for its pytest run."""
        self.release = release
        self.pending = list(cases)
        self.rows = {}
        from_env = {k: os.environ[v] for k, v in DCP_ENV.items() if os.environ.get(v)}
        self.options = {**from_env, **options}

    def unavailable(self, device: str) -> str | None:
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                return f"device {device}: no CUDA device"
        return None

    def run(self, case: Any, decision: Any, registry: Any, inputs: Any, watch: Any, fault: str | None) -> Any:
        raise NotImplementedError("the vllm backend builds its own inputs: use run_case")

    # --- the harness ------------------------------------------------------------------------

    def _release_of(self, case: Any) -> str | None:
        if self.release:
            return self.release
        from mla_model.revisions import RELEASE_OF_REVISION

        return RELEASE_OF_REVISION.get(case.revision)

    def _chunk(self, case: Any, release: str) -> list[Any]:
        key = case_key(case)
        keys = [case_key(c) for c in self.pending]
        if key not in keys:
            return [case]
        start = keys.index(key)
        return [
            c
            for c in self.pending[start:]
            if c.registry == case.registry
            and self._release_of(c) == release
            and (c.shape.dcp_world_size > 1) == (case.shape.dcp_world_size > 1)
            and case_key(c) not in self.rows
        ][:CHUNK]

    def _execute_pending(self, case: Any, release: str, device: str, kv_len: int) -> None:
        """The case's chunk; on a GPU, every chunk still pending, side by side (each child forks its own
        workers: :func:`spec.realcode.executed.harness.worker_count`)."""
        if not _parallel(device):
            self._execute(self._chunk(case, release), release, device, kv_len)
            return
        chunks, claimed = [], set()
        for c in [case, *self.pending]:
            key = case_key(c)
            if key in self.rows or key in claimed or self._release_of(c) is None:
                continue
            chunk = (
                self._chunk(c, self._release_of(c)) if key != case_key(case) else self._chunk(case, release)
            )
            chunk = [x for x in chunk if case_key(x) not in claimed]
            claimed.update(case_key(x) for x in chunk)
            chunks.append(chunk)
        with ThreadPoolExecutor(max(1, len(chunks))) as pool:
            list(pool.map(lambda p: self._execute(p, self._release_of(p[0]), device, kv_len), chunks))

    def _execute(self, chunk: list[Any], release: str, device: str, kv_len: int) -> None:
        """Run the chunk in one harness child; a case whose shape is a harness fault is noted and left out.

        A chunk of DCP cases (``dcp_world_size > 1``) runs every rank (:mod:`conformance.dcp_replay`):
        simulated in one process, or as gloo/NCCL processes (option ``dcp_ranks``)."""
        from conformance import dcp_replay
        from spec.realcode.executed import harness
        from spec.realcode.executed.harness import HarnessError, release_code
        from spec.realcode.source import SourceError

        execute = dcp_replay.execute if chunk[0].shape.dcp_world_size > 1 else harness.execute

        try:
            code = release_code(release)
        except SourceError as e:
            for c in chunk:
                self.rows[case_key(c)] = {"_skip": f"cannot resolve --vllm {release}: {e}"}
            return
        options = {**self.options, "replay": REPLAY, "device": device, "kv_len": kv_len}
        todo = list(chunk)
        while todo:
            seed = todo[0].seed
            started = time.time()
            try:
                rows = execute(code, [c.shape for c in todo], todo[0].registry, options, seed)
            except HarnessError as e:
                bad = _faulting_case(str(e), todo)
                for c in todo if bad is None else [bad]:
                    self.rows[case_key(c)] = {"_error": f"harness fault ({code.label}): {e}"[:500]}
                todo = [] if bad is None else [c for c in todo if c is not bad]
                continue
            seconds = time.time() - started
            for i, (c, row) in enumerate(zip(todo, rows)):
                row.update(_release=code.label, _harness_seed=seed + i, _harness_s=seconds / len(todo))
                self.rows[case_key(c)] = row
            todo = []

    # --- one case ---------------------------------------------------------------------------

    def run_case(
        self, case: Any, device: str, kv_len: int, fault: str | None = None, full_context: bool = False
    ) -> dict[str, Any]:
        from conformance.runner import case_record

        started = time.time()
        record = case_record(case, self.name, device, fault)
        try:
            why = self.unavailable(device)
            release = self._release_of(case)
            if why is None and release is None:
                why = f"no vLLM release for revision {case.revision}: pass --vllm RELEASE"
            if why is None and fault is not None:
                why = "the vllm backend takes no --fault"
            if why:
                record.update(status="SKIP", detail=why)
            else:
                key = case_key(case)
                if key not in self.rows:
                    self._execute_pending(case, release, device, kv_len)
                record.update(judge(self.rows.pop(key)))
        except Exception as e:  # noqa: BLE001 - the backend itself failed: our fault, not the release's
            record.update(status="ERROR", detail=f"{type(e).__name__}: {e}".splitlines()[0][:500])
        record["t_case_s"] = time.time() - started
        record["finished_at"] = time.time()
        return record


def _parallel(device: str) -> bool:
    """Whether chunks run as parallel harness children (a GPU; on the CPU the harness forks its own)."""
    return device.startswith("cuda")


def judge(row: dict[str, Any]) -> dict[str, Any]:
    """The record fields of one harness row: the status, its detail, and what the release did."""
    if "_skip" in row:
        return {"status": "SKIP", "detail": row["_skip"]}
    if "_error" in row:
        return {"status": "ERROR", "detail": row["_error"]}
    calls = row.get("calls") or []
    out: dict[str, Any] = {
        "release": row.get("_release"),
        "harness_seed": row.get("_harness_seed"),
        "outcome": row.get("outcome"),
        "executed": [_call_summary(c) for c in calls],
        "decode": row.get("decode"),
        "metadata": row.get("metadata"),
        "sizing": row.get("sizing"),
    }
    if "ranks" in row:  # a DCP replay: how the ranks ran, the routes they took, the fault injected
        out["dcp"] = {"ranks": row["ranks"], "routes": row.get("dcp_routes"), "fault": row.get("fault")}
    outcome = row.get("outcome")
    if row.get("stage") == "refused":
        if not row.get("valid_heads", True):
            out.update(
                status="CRASH",
                detail=f"the release rejects {row['shape']['num_heads']} heads "
                "(AiterMLAHelper.is_valid_num_heads)",
            )
        else:
            out.update(
                status="SKIP",
                detail=f"max_qo_len {row['shape']['max_qo_len']} is above the release's "
                f"reorder_batch_threshold {row.get('threshold')}: not a decode step",
            )
        return out
    if outcome == "harness_fault":
        out.update(status="ERROR", detail=f"harness fault, not the release: {row.get('error')}")
        return out
    missing = [c["replay"]["no_stand_in"] for c in calls if (c.get("replay") or {}).get("no_stand_in")]
    if missing:
        out.update(status="SKIP", detail=missing[0])
        return out
    if outcome == "ran":
        v = dict(row.get("verdict") or {})
        if not v:
            out.update(status="CRASH", detail="forward_mqa returned but the replay gave no verdict")
            return out
        timed = [float(c["replay"]["t_ms"]) for c in calls if "t_ms" in (c.get("replay") or {})]
        unwritten = sum(int((c.get("replay") or {}).get("rows_unwritten", 0)) for c in calls)
        if unwritten and v.get("status") != "PASS":
            v["detail"] = f"{v.get('detail', '')}; {unwritten} query row(s) the kernel does not write".lstrip(
                "; "
            )
        out.update(v)
        if timed:  # the computing calls' time (vllm_replay.kernel_ms), compilation left out
            out["t_kernel_ms"] = sum(timed)
        return out
    error = f"{row.get('error', '')}" + (f" (at {row['where']})" if row.get("where") else "")
    if isinstance(outcome, str) and outcome.startswith("aiter:"):
        kind = outcome.split(":", 1)[1]
        status = "NO_KERNEL" if kind in REFUSALS else "CRASH"
        out.update(status=status, detail=f"AITER refuses ({kind}): {error}", failure=kind)
        return out
    out.update(
        status="CRASH",
        detail=f"vLLM raises: {error}"
        if outcome == "vllm_raises"
        else error or f"harness row without an outcome (stage {row.get('stage')})",
    )
    return out


def _call_summary(call: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "entry",
        "kernel",
        "q_shape",
        "q_dtype",
        "kv_dtype",
        "q_scale",
        "kv_scale",
        "max_seqlen_q",
        "persistent",
        "num_rows",
        "raised",
        "head_map",
        "rank",
        "replay",
        "computed_by",
    )
    return {k: call[k] for k in keep if k in call}


def _faulting_case(message: str, cases: list[Any]) -> Any:
    """The case whose shape the child names in a fatal ``(shape {...})`` message, if any."""
    at = message.rfind("(shape ")
    if at < 0:
        return None
    try:
        data = ast.literal_eval(message[at + len("(shape ") :].rstrip(")"))
    except (ValueError, SyntaxError):
        return None
    return next((c for c in cases if c.shape.to_json() == data), None)


BACKEND = VllmBackend()
