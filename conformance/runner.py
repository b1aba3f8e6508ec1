"""Run one case on one backend: seeded inputs, the float32 reference, a verdict, a JSON line.

Verdicts (:data:`STATUSES`):

``PASS``      finite, within tolerance, cosine >= :data:`COSINE_MIN`
``MISMATCH``  wrong shape, outside tolerance, or cosine too low
``NAN``       some output is NaN or Inf (outputs start NaN-poisoned, so a row never written is NaN)
``CRASH``     the backend raised (CUDA error, assertion, ...): recorded, and the run goes on
``NO_KERNEL`` the routed stack has no kernel for this request (the backend says who refuses it)
``SKIP``      the backend cannot run here (a stale cases file is refused before any case runs)

Tolerance follows PyTorch's attention tests (``test/test_transformers.py``
``get_tolerances``): the float32 reference is compared with the same
computation in the kernel's dtype (bf16), and the absolute tolerance is a
fudge factor times ``max(that deviation, a dtype default)``.  The relative
tolerance is the dtype default (their derived rtol divides by outputs near
zero and would pass a mis-scaled output).

Results stream to a JSONL file, one line per case, appended with one write;
a rerun skips the cases the file already holds, so an interrupted run
resumes.  This module imports torch; the pytest plugin imports it lazily.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from conformance.backends import case_key
from mla_model.case import Case
from mla_model.decision import decide
from mla_model.emulation import NoKernel
from mla_model.reference import (
    FP8_DTYPE_OF_ARCH,
    HEAD_DIM,
    V_HEAD_DIM,
    DecodeInputs,
    PagedKV,
    attend,
    operands,
    quantize_fp8,
)
from mla_model.registry import load_registry
from mla_model.revisions import get_revision

# PyTorch test_transformers.py default_atol / default_rtol for bf16.
DEFAULT_ATOL = 1e-3
DEFAULT_RTOL = 1.6e-2
FUDGE = 4.0
COSINE_MIN = 0.999

REFERENCE_RUNS = 2  # the reference is timed at its best of these (the kernel at its best of 3 warm runs)
DEFAULT_KV_LEN = 256  # context tokens per request drawn from [1, kv_len] (exactly kv_len with full_context)
PAGE_SIZES = (1, 16, 64)  # kv-cache block sizes the inputs cycle through (the kernels see page size 1)


class Unavailable(Exception):
    """The backend cannot run this case here (SKIP)."""


def resolve_device(device: str, worker: int | None = None) -> str:
    """``auto``: CUDA when present; a bare ``cuda`` under xdist picks GPU ``worker % count``
    (one worker a GPU)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and worker is not None and torch.cuda.device_count() > 1:
        device = f"cuda:{worker % torch.cuda.device_count()}"
    return device


# --- inputs ---------------------------------------------------------------------------------


def build_inputs(
    case: Case, heads: int, device: str, kv_len: int = DEFAULT_KV_LEN, full_context: bool = False
) -> DecodeInputs:
    """Seeded inputs for the case: random pages in a random block table, never zeros, fp8 where routed.

    Each request holds a random context of 1..kv_len tokens before its verify block, or exactly kv_len
    with ``full_context`` (the setting for timing against the HBM floor: no request is short).
    """
    s, route = case.shape, case.expected_route
    g = torch.Generator(device=device).manual_seed(case.seed)
    R, Q = s.num_reqs, s.max_qo_len
    page = PAGE_SIZES[case.seed % len(PAGE_SIZES)]
    low = kv_len if full_context else 1
    seq_lens = torch.randint(low, kv_len + 1, (R,), generator=g, device=device) + Q
    blocks = -(-int(seq_lens.max()) // page)
    block_table = torch.randperm(R * blocks, generator=g, device=device).view(R, blocks).to(torch.int32)
    cache = torch.randn(R * blocks, page, HEAD_DIM, generator=g, device=device)
    q = torch.randn(R * Q, heads, HEAD_DIM, generator=g, device=device)
    fp8 = FP8_DTYPE_OF_ARCH[s.arch]
    kv_scale = q_scale = 1.0
    if route["kv_dtype"] == "fp8":
        cache, kv_scale = quantize_fp8(cache, fp8)
    else:
        cache = cache.to(torch.float16 if route["kv_dtype"] == "fp16" else torch.bfloat16)
    if route["q_dtype"] == "fp8":
        q, q_scale = quantize_fp8(q, fp8)
    else:
        q = q.to(torch.bfloat16)
    return DecodeInputs(q, PagedKV(cache, block_table, seq_lens, kv_scale), Q, s.causal, q_scale)


# --- timing ---------------------------------------------------------------------------------


@dataclass
class Stopwatch:
    """Named spans in milliseconds: CUDA events on a GPU (device time), the wall clock on CPU."""

    device: str
    spans: dict[str, list[Any]] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.spans.setdefault(name, []).append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self.spans.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)

    def best(self, name: str, fn: Callable[[], Any], repeats: int = 3) -> None:
        """Run ``fn`` ``repeats`` times under ``name``; :meth:`millis` keeps the fastest."""
        for _ in range(repeats):
            with self(name):
                fn()

    def millis(self) -> dict[str, float]:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        return {
            name: min(s if isinstance(s, float) else s[0].elapsed_time(s[1]) for s in spans)
            for name, spans in self.spans.items()
        }


# --- verdict --------------------------------------------------------------------------------


def tolerance(ref: torch.Tensor, ref_lowp: torch.Tensor) -> tuple[float, float]:
    """``(atol, rtol)``: FUDGE x max(deviation of the same-dtype reference, DEFAULT_ATOL), DEFAULT_RTOL."""
    deviation = float((ref - ref_lowp.float()).abs().max())
    return FUDGE * max(deviation, DEFAULT_ATOL), DEFAULT_RTOL


def classify(out: torch.Tensor, ref: torch.Tensor, ref_lowp: torch.Tensor) -> dict[str, Any]:
    """PASS, MISMATCH or NAN, with the numbers behind it."""
    if tuple(out.shape) != tuple(ref.shape):
        return {
            "status": "MISMATCH",
            "detail": f"output shape {tuple(out.shape)} is not the reference's "
            f"{tuple(ref.shape)} (heads {out.shape[1]} for {ref.shape[1]})",
        }
    o = out.float()
    bad = ~torch.isfinite(o)
    if bad.any():
        return {
            "status": "NAN",
            "detail": f"{int(bad.sum())} of {o.numel()} outputs are NaN/Inf "
            f"(in {int(bad.flatten(1).any(1).sum())} of {o.shape[0]} query rows)",
        }
    atol, rtol = tolerance(ref, ref_lowp)
    err = (o - ref).abs()
    outside = err > atol + rtol * ref.abs()
    cosine = float(torch.nn.functional.cosine_similarity(o.flatten(), ref.flatten(), dim=0))
    numbers = {"max_abs_err": float(err.max()), "atol": atol, "rtol": rtol, "cosine": cosine}
    if outside.any() or cosine < COSINE_MIN:
        detail = (
            f"{int(outside.sum())} of {o.numel()} outputs outside atol {atol:.2e} + rtol {rtol} x |ref|; "
            f"max abs err {numbers['max_abs_err']:.3e}; cosine {cosine:.6f}"
        )
        return {"status": "MISMATCH", "detail": detail, **numbers}
    return {"status": "PASS", "detail": "", **numbers}


# --- one case -------------------------------------------------------------------------------


def case_record(case: Case, backend_name: str, device: str, fault: str | None) -> dict[str, Any]:
    """The fields every result record starts with: the case, the backend, and the route the case pins."""
    s, pinned = case.shape, case.expected_route
    return {
        "key": case_key(case),
        "id": case.id,
        "backend": backend_name,
        "fault": fault,
        "device": device,
        "revision": case.revision,
        "registry": case.registry,
        "origin": case.origin,
        "seed": case.seed,
        "path": pinned["path"],
        "kernel": pinned["kernel"],
        "arch": s.arch,
        "q_dtype": pinned["q_dtype"],
        "kv_dtype": pinned["kv_dtype"],
        "num_reqs": s.num_reqs,
        "qlen": s.max_qo_len,
        "padded_heads": pinned["padded_q_heads"],
        "head_padding": pinned["head_padding"],
    }


def run_case(
    case: Case,
    backend: Any,
    device: str,
    kv_len: int = DEFAULT_KV_LEN,
    fault: str | None = None,
    full_context: bool = False,
) -> dict[str, Any]:
    """Run the case on the backend and return its result record (never raises for a backend failure).

    A backend with its own ``run_case`` (``vllm``: the release builds its own inputs) makes the record itself.
    """
    own = getattr(backend, "run_case", None)
    if own is not None:
        return own(case, device, kv_len, fault, full_context)
    started = time.time()
    s = case.shape
    record = case_record(case, backend.name, device, fault)
    try:
        revision, registry = get_revision(case.revision), load_registry(case.registry)
        decision = decide(revision, registry, s)
        why = backend.unavailable(device)
        if why:
            raise Unavailable(why)
        heads = int(decision.route.decode_heads)
        inputs = build_inputs(case, heads, device, kv_len, full_context)
        kv_tokens = int(inputs.kv.seq_lens.sum())
        record.update(
            heads=heads,
            page_size=inputs.kv.page_size,
            max_seq_len=int(inputs.kv.seq_lens.max()),
            kv_tokens=kv_tokens,
            kv_bytes=kv_tokens * HEAD_DIM * inputs.kv.cache.element_size(),
        )
        watch = Stopwatch(device)
        ops32 = operands(inputs)  # gathering and masking are input preparation, as the backends' is
        ops16 = ops32.to(torch.bfloat16)
        refs: list[torch.Tensor] = []

        def reference() -> None:
            refs[:] = [attend(ops32).view(-1, heads, V_HEAD_DIM), attend(ops16).view(-1, heads, V_HEAD_DIM)]

        # Timed warm, as the kernel is: the first call of a shape pays for cuBLAS's algorithm choice.
        watch.best("reference", reference, REFERENCE_RUNS if device.startswith("cuda") else 1)
        ref, ref_lowp = refs
        t0 = time.perf_counter()
        out, info = backend.run(case, decision, registry, inputs, watch, fault)
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        record["t_backend_ms"] = (time.perf_counter() - t0) * 1e3
        record["info"] = info
        record.update(classify(out, ref, ref_lowp))
        record.update({f"t_{name}_ms": ms for name, ms in watch.millis().items()})
    except NoKernel as e:
        record.update(status="NO_KERNEL", detail=str(e))
    except Unavailable as e:
        record.update(status="SKIP", detail=str(e))
    except Exception as e:  # noqa: BLE001 - a crash is a verdict, recorded and survived
        record.update(status="CRASH", detail=f"{type(e).__name__}: {e}".splitlines()[0][:500])
        record["device_lost"] = device.startswith("cuda") and not _device_alive(device)
    record["t_case_s"] = time.time() - started
    record["finished_at"] = time.time()
    return record


def _device_alive(device: str) -> bool:
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
        return True
    except Exception:  # noqa: BLE001 - any error here means the context is gone
        return False


# --- the results file -----------------------------------------------------------------------


class ResultsLog:
    """A JSONL results file: one record per line, appended atomically, read back for resume and reports."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._checked_tail = False

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record, read line by line (a line cut short by an interrupted run is skipped, and so
        is a line that is not a result: its case runs again)."""
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.endswith("\n"):
                    return  # the torn last line of an interrupted run: its case runs again
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if is_result(record):
                    yield record

    def _drop_torn_tail(self) -> None:
        """Cut a last line an interrupted run left without its newline, so new records start on a line."""
        self._checked_tail = True
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            size = f.seek(0, os.SEEK_END)
            keep = 0
            step = 1 << 16
            while size > 0:  # scan back for the last newline
                start = max(0, size - step)
                f.seek(start)
                chunk = f.read(size - start)
                at = chunk.rfind(b"\n")
                if at >= 0:
                    keep = start + at + 1
                    break
                size = start
            f.truncate(keep)

    def done(self, backend: str, fault: str | None) -> set[str]:
        return {
            r["key"]
            for r in self.records()
            if r.get("backend") == backend and r.get("fault") == fault and r.get("status") != "ERROR"
        }  # an ERROR (the harness failed) is run again on resume

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self._checked_tail:
            self._drop_torn_tail()
        line = (json.dumps(record, default=_plain) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def is_result(record: Any) -> bool:
    """A record that a resume and a report can read: its case's key, its verdict and its route path as
    strings, its times as numbers (what :func:`run_case` writes; not so a hand-edited or foreign line)."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    return (
        isinstance(record, dict)
        and all(isinstance(record.get(k), str) for k in ("key", "status", "path"))
        and all(number(record.get(k)) for k in ("t_case_s", "finished_at"))
        and all(number(record[k]) for k in ("t_kernel_ms", "t_reference_ms") if k in record)
    )


def _plain(value: Any) -> Any:
    """JSON for what json cannot write: numpy/torch scalars by value, anything else as text."""
    return value.item() if hasattr(value, "item") else str(value)
