"""The replay module of the ``vllm`` backend: loaded inside the executing harness's child.

The harness (:mod:`spec.realcode.executed`) runs a vLLM release's real
``rocm_aiter_mla.py`` over stub ``vllm``/``aiter`` packages; its recorder
checks each AITER call against the registry (raising where AITER raises) and
then calls :func:`kernel` to fill the call's output in place.  After
``forward_mqa`` returns, the child calls :func:`verdict` with the step's
output.

:func:`kernel` is a stand-in for the routed kernel that computes with exactly
the tensors and scalars vLLM passed and nothing else, inside the kernel's
contract as far as the registry records it:

* fp8 operands: the bytes are read as the fp8 flavour of the arch the kernel
  runs on (``e4m3fnuz`` on gfx942, ``e4m3fn`` on gfx950), bf16/fp16 as
  themselves; the KV rows are read through the page-size-1 view vLLM hands
  AITER (``kv_buffer.view(-1, 1, 1, 576)``), so ``kv_indices`` are token rows;
  an index outside the buffer reads NaN (poisoned memory), never a clamp;
* scales: the ``q_scale``/``kv_scale`` *vLLM passed* dequantise fp8 operands
  (``kv_scale`` on scores and values alike, except on a kernel the registry
  lists under ``v_scale_dropped``, which reads V unscaled: sources §57, so a
  release's own rescale is executed against it); Gluon's ``kv_scale`` is whatever vLLM
  passed, so an fp8 cache behind ``kv_scale=1.0`` comes back mis-scaled;
* ``sm_scale`` as passed (AITER's ``1/sqrt(576)`` default when None);
* ASM (``mla_decode_fwd``): per request the ``qo_indptr`` rows, causal
  windows unless vLLM passes ``causal=False``; with vLLM's persistent work
  metadata only the first ``max_seqlen_qo`` rows the metadata was built for
  are written (the rest of ``o`` keeps what vLLM put there);
* ASM with ``return_lse`` (the DCP path, 0.29.0+; 0.34.0 L3656-3674): the
  call also returns the true natural-log LSE of the rows over the KV it was
  given (the rank's shard), NaN on rows it does not write; with CPRR's
  ``g_kv_indptr``/``cp_world_size``/``cp_rank`` (0.34.0 L3641-3654) a causal
  row's window is the global positions below ``G - qlen + t + 1``, read off
  the round-robin shard;
* vLLM's ``decode_attention_fwd`` (0.34.0's gfx942 DCP verify, L3279-3336):
  one query row per block-table row over its ``row_lens`` tokens, output and
  LSE written (an empty row: NaN output, LSE -inf);
* AITER's segmented MLA decode (``segmented_mla_decode_fwd``, 0.34.0's DCP
  verify, L3226-3276): each row's segment partials as AITER's kernel stores
  them with ``skip_reduce`` (base-2 running max, exp-sum, unnormalised
  output), over the row's ``row_lens`` tokens of its paged block table; the
  release's own ``merge_mla_segments_triton`` then runs on them, executed
  from the release tree (:func:`conformance.dcp_merge.load_segment_merge`);
* Gluon (``mla_gluon``): each ``seq_info`` row is one query row over its
  ``page_table`` slice (``kv_pe_offset`` 512, ``k_pe=None``, as both 0.27 and
  0.28 pass them; the recorder does not keep them).

The dtype, head-count and batch limits themselves are the recorder's (it
raises AITER's error before this runs).  On CUDA the arithmetic runs in
AITER's Triton MLA decode (:func:`conformance.backends.aiter_triton.load_kernel`)
when the installed wheel can be loaded next to the stubs, else in torch on
the GPU; on CPU in torch (float32).  What was done goes into the call record
under ``replay``.

:func:`verdict` compares the step's output with the float32 reference of the
*true* logical inputs (``batch.q_true``, ``batch.kv_true``, the true
dequantisation, causal verify windows) using the runner's own
:func:`conformance.runner.classify` and tolerance.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import torch

from mla_model.reference import (
    DEFAULT_SM_SCALE,
    FP8_DTYPE_OF_ARCH,
    HEAD_DIM,
    KV_LORA_RANK,
    V_HEAD_DIM,
    DecodeInputs,
    PagedKV,
    attend,
    operands,
)

_FP8_STORAGE = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.uint8)


def _state() -> Any:
    import mla_spec_stub

    return mla_spec_stub.STATE


def read_as_kernel(t: torch.Tensor, arch: str, info: dict[str, Any], name: str) -> torch.Tensor:
    """``t``'s bytes as the kernel reads them, in float32: fp8 storage in the arch's flavour."""
    if t.dtype in _FP8_STORAGE:
        flavour = FP8_DTYPE_OF_ARCH[arch]
        if t.dtype != flavour:
            info.setdefault("notes", []).append(f"{name} is {t.dtype}, read as {flavour} on {arch}")
        return t.contiguous().view(torch.uint8).view(flavour).float()
    return t.float()


def _scale(value: Any, what: str, info: dict[str, Any]) -> float:
    if value is None:
        info.setdefault("notes", []).append(f"{what} not passed: the kernel reads 1.0")
        return 1.0
    return float(value)


TIMING_REPEATS = 3  # runs of a computation timed after the one that gave the result; the fastest counts


def kernel_ms(fn: Callable[[], Any], device: Any) -> float:
    """The fastest of :data:`TIMING_REPEATS` further runs of ``fn``, in ms: CUDA events on a GPU (device
    time), the wall clock on the CPU (:class:`conformance.runner.Stopwatch`, as the other backends time
    theirs).  Run after the call that gave the result, so a Triton kernel's compilation (its first
    launch) is never counted.  ``fn`` must be a pure function of its inputs: it writes what it wrote."""
    from conformance.runner import Stopwatch

    watch = Stopwatch(str(device))
    watch.best("run", fn, TIMING_REPEATS)
    return watch.millis()["run"]


def _timed(info: dict[str, Any], device: Any, fn: Callable[[], Any]) -> Any:
    """``fn()``, its time (:func:`kernel_ms`) added to the call's ``t_ms``: the kernel time of the call."""
    result = fn()
    info["t_ms"] = info.get("t_ms", 0.0) + kernel_ms(fn, device)
    return result


# --- the arithmetic ---------------------------------------------------------------------------


def _attend_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``i`` of ``q [n, H, 576]`` over KV rows ``indices[indptr[i]:indptr[i+1]]`` (-1: out of bounds),
    and the row's log-sum-exp of its scaled scores ``[n, H]`` (natural log, as AITER's ``return_lse``:
    ``lse_base_on_e``, rocm_aiter_mla.py 0.34.0 L2659-2663)."""
    n = q.shape[0]
    lens = (indptr[1:] - indptr[:-1]).long()
    width = max(int(lens.max()) if n else 0, 1)
    pos = torch.arange(width, device=q.device)
    live = pos[None, :] < lens[:, None]
    flat = (indptr[:-1].long()[:, None] + pos[None, :]).clamp(max=max(indices.numel() - 1, 0))
    tok = indices.long()[flat] if indices.numel() else torch.zeros_like(flat)
    poisoned = torch.cat([k, torch.full((1, k.shape[1]), float("nan"), device=k.device)])
    poisoned_v = torch.cat([v, torch.full((1, v.shape[1]), float("nan"), device=v.device)])
    tok = torch.where((tok < 0) | (tok >= k.shape[0]), k.shape[0], tok)
    kk, vv = poisoned[tok], poisoned_v[tok]  # [n, width, 576], [n, width, 512]
    scores = torch.einsum("nhd,nld->nhl", q, kk) * sm_scale
    scores = scores.masked_fill(~live[:, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)  # a row with no KV: NaN, as an empty softmax is
    vv = vv.masked_fill(~live[..., None], 0.0)
    return torch.einsum("nhl,nld->nhd", p, vv), torch.logsumexp(scores, dim=-1)  # LSE base e; no KV: -inf


def _triton_attend(
    q: torch.Tensor,
    kv_rows: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    info: dict[str, Any],
) -> torch.Tensor | None:
    """AITER's Triton MLA decode on the same rows (bf16 operands, scales already applied), or None; the
    kernel's launch alone is timed (:func:`_timed`), its operands' preparation is not."""
    kernel = _load_triton()
    if kernel is None or (
        indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= kv_rows.shape[0])
    ):
        return None
    from conformance.backends.aiter_triton import grouped_rope_decode

    n, heads = q.shape[0], q.shape[1]
    k_buffer = kv_rows.to(torch.bfloat16).view(-1, 1, HEAD_DIM)
    out = torch.full((n, heads, V_HEAD_DIM), float("nan"), dtype=torch.bfloat16, device=q.device)
    splits = 1
    logits = torch.empty(n, heads, splits, KV_LORA_RANK + 1, dtype=torch.float32, device=q.device)
    q16, indptr32, indices32 = (
        q.to(torch.bfloat16).contiguous(),
        indptr.to(torch.int32),
        indices.to(torch.int32),
    )
    args = (q16, k_buffer, out, indptr32, indices32, logits, splits, sm_scale)
    _timed(info, q.device, lambda: grouped_rope_decode(kernel, *args))
    return out.float()


_TRITON: list[Any] = []
_TRITON_MISSING: list[str] = []  # why AITER's Triton decode could not be loaded, where it could not


def _load_triton() -> Any:
    """The installed amd-aiter's Triton decode, imported with the harness's stub ``aiter`` set aside, once."""
    if _TRITON:
        return _TRITON[0]
    kernel = None
    guard = [f for f in sys.meta_path if type(f).__name__ == "StubsOnly"]
    stubbed = {n: m for n, m in sys.modules.items() if n == "aiter" or n.startswith("aiter.")}
    stub_paths = [p for p in sys.path if p.endswith("stubs")]  # the harness's stub folder shadows the wheel
    try:
        for f in guard:
            sys.meta_path.remove(f)
        for n in stubbed:
            del sys.modules[n]
        for p in stub_paths:
            sys.path.remove(p)
        from conformance.backends.aiter_triton import load_kernel

        load_kernel.cache_clear()
        kernel = load_kernel()
    except Exception as e:  # noqa: BLE001 - no wheel, no Triton, no GPU: torch does the arithmetic
        kernel = None
        _TRITON_MISSING.append(f"{type(e).__name__}: {e}"[:200])
    finally:
        for n in [n for n in sys.modules if n == "aiter" or n.startswith("aiter.")]:
            del sys.modules[n]
        sys.modules.update(stubbed)
        sys.path[:0] = stub_paths
        for f in reversed(guard):
            sys.meta_path.insert(0, f)
    _TRITON.append(kernel)
    return kernel


def _compute(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    same_scale: bool,
    info: dict[str, Any],
    need_lse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rows' output and, with ``need_lse``, their LSE (AITER's Triton decode gives no LSE here: torch)."""
    if q.device.type == "cuda" and same_scale and not need_lse:
        out = _triton_attend(q, k, indptr, indices, sm_scale, info)
        if out is not None:
            info["compute"] = "aiter-triton decode_attention_fwd_grouped_rope"
            return out, None
    info["compute"] = f"torch float32 ({q.device.type})"
    if q.device.type == "cuda" and _TRITON_MISSING:
        info["aiter_triton_unavailable"] = _TRITON_MISSING[0]
    return _timed(info, q.device, lambda: _attend_rows(q, k, v, indptr, indices, sm_scale))


def _row_windows(
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    rows_of: list[tuple[int, int, int]],
    causal: bool,
    shard: tuple[torch.Tensor, int, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query row (request ``b``, row ``t`` of ``n``) its KV window as one indptr/indices pair.

    ``shard`` = ``(g_kv_indptr, cp_world_size, cp_rank)``: the KV rows are this DCP rank's round-robin
    shard (local token ``j`` is global position ``j * cp_world_size + cp_rank``, interleave 1), and a
    causal row sees the global positions below ``G - n + t + 1`` for the request's global length ``G``:
    CPRR's in-kernel window (rocm_aiter_mla.py 0.34.0 L570-590: "rebuilds global positions from
    g_kv_indptr, cp_rank and cp_world_size and applies the causal window in-kernel").
    """
    starts = kv_indptr.long().tolist()
    g_starts = shard[0].long().tolist() if shard else []
    lens, chunks = [], []
    for b, t, n in rows_of:
        total = starts[b + 1] - starts[b]
        length = max(total - (n - 1) + t, 0) if causal else total
        if shard and causal:
            world, rank = shard[1], shard[2]
            visible = g_starts[b + 1] - g_starts[b] - (n - 1) + t  # global positions 0..visible-1
            length = min(max(-(-(visible - rank) // world), 0), total)
        lens.append(length)
        chunks.append(kv_indices[starts[b] : starts[b] + length].long())
    indptr = torch.zeros(len(lens) + 1, dtype=torch.long, device=kv_indices.device)
    if lens:
        indptr[1:] = torch.cumsum(torch.tensor(lens, device=kv_indices.device), 0)
    indices = torch.cat(chunks) if chunks else kv_indices.new_zeros(0).long()
    return indptr, indices


# --- the stand-ins ----------------------------------------------------------------------------


def _asm(call: dict[str, Any], t: dict[str, Any], st: Any, info: dict[str, Any]) -> torch.Tensor | None:
    """Fill ``o``; with ``return_lse`` (the DCP path) return the ``[rows, heads]`` float32 LSE, NaN on
    the rows the kernel does not write."""
    q, o, kv = t["q"], t["o"], t["kv"]
    lse = torch.full(q.shape[:2], float("nan"), device=o.device) if call.get("return_lse") else None
    qf = read_as_kernel(q, st.arch, info, "q")
    kvf = read_as_kernel(kv, st.arch, info, "kv").reshape(-1, kv.shape[-1])
    q_scale = _scale(call.get("q_scale"), "q_scale", info) if call["q_dtype"] == "fp8" else 1.0
    kv_scale = _scale(call.get("kv_scale"), "kv_scale", info) if call["kv_dtype"] == "fp8" else 1.0
    qf = qf * q_scale
    k = kvf * kv_scale
    # A kernel the registry lists as leaving V unscaled (sources §57) reads V without the cache's scale.
    drops_v = call["kv_dtype"] == "fp8" and call["v_scale_dropped"]  # the recorder's registry lookup
    v = kvf[:, :V_HEAD_DIM] * (1.0 if drops_v else kv_scale)
    sm = call.get("sm_scale")
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm is None else float(sm)
    causal = True if call.get("causal") is None else bool(call["causal"])
    covered = int(call["max_seqlen_q"])
    if call.get("persistent"):
        meta = next((e["metadata"] for e in reversed(st.events) if "metadata" in e), None)
        if meta is None:
            info.setdefault("notes", []).append(
                "persistent call without get_mla_metadata_v1: no work item, nothing written"
            )
            covered = 0
        else:
            covered = min(covered, int(meta["max_seqlen_qo"]))
            if int(meta["num_heads"]) != q.shape[1]:
                info.setdefault("notes", []).append(
                    f"work metadata for {meta['num_heads']} heads, query has {q.shape[1]}"
                )
    qo = t["qo_indptr"].long().tolist()
    rows_of, qrows = [], []
    unwritten = 0
    for b in range(len(qo) - 1):
        n = qo[b + 1] - qo[b]
        for r in range(n):
            if r < covered:
                rows_of.append((b, r, n))
                qrows.append(qo[b] + r)
            else:
                unwritten += 1
    info.update(
        kv_scale=kv_scale,
        q_scale=q_scale,
        sm_scale=sm,
        causal=causal,
        rows_written=len(qrows),
        rows_unwritten=unwritten,
        scales="kv_scale on the scores only (the registry's v_scale_dropped)"
        if drops_v
        else "kv_scale on scores and values",
    )
    shard = None
    if "g_kv_indptr" in t:  # CPRR (0.34.0 L3641-3654): the causal window over global positions
        extra = call["extra_values"]
        shard = (t["g_kv_indptr"], int(extra["cp_world_size"]), int(extra["cp_rank"]))
        info["window"] = f"CPRR: global positions of rank {shard[2]} of {shard[1]}"
    if not qrows:
        return lse
    indptr, indices = _row_windows(t["kv_indptr"], t["kv_indices"], rows_of, causal, shard)
    sel = torch.tensor(qrows, device=o.device)
    out, rows_lse = _compute(  # V read unscaled: AITER's Triton decode (one KV for K and V) cannot serve it
        qf[sel], k, v, indptr.to(o.device), indices.to(o.device), sm, not drops_v, info, lse is not None
    )
    o[sel] = out.to(o.dtype)
    if lse is not None and rows_lse is not None:
        lse[sel] = rows_lse
    return lse


def _gluon(call: dict[str, Any], t: dict[str, Any], st: Any, info: dict[str, Any]) -> None:
    q_nope, q_pe, o, kv = t["q_nope"], t["q_pe"], t["o"], t["kv"]
    if (
        q_nope.dim() == 4
    ):  # native multi-token verify (0.29+): [requests, qlen, heads, dim], one seq_info entry each
        q_nope, q_pe, o = q_nope.flatten(0, 1), q_pe.flatten(0, 1), o.flatten(0, 1)
        if o.data_ptr() != t["o"].data_ptr():
            raise ValueError("the 4-D Gluon output is not contiguous: cannot write through a flattened view")
    qf = torch.cat(
        [read_as_kernel(q_nope, st.arch, info, "q_nope"), read_as_kernel(q_pe, st.arch, info, "q_pe")], dim=-1
    )
    kvf = read_as_kernel(kv, st.arch, info, "kv").reshape(-1, kv.shape[-1])
    kv_scale = _scale(call.get("kv_scale"), "kv_scale", info) if call["kv_dtype"] == "fp8" else 1.0
    k = kvf * kv_scale
    v = kvf[:, :V_HEAD_DIM] * kv_scale
    sm = float(call["sm_scale"])
    seq_info, page_table = t["kv_indptr"], t["kv_indices"]
    entries, rows = seq_info.numel() - 1, qf.shape[0]
    info.update(kv_scale=kv_scale, sm_scale=sm, scales="kv_scale on scores and values")
    if rows == entries:  # one query row per entry (decode, or vLLM's verify flatten)
        indptr, indices = seq_info.long(), page_table.long()
    elif entries and rows % entries == 0:  # native multi-token rows: causal within each entry
        per = rows // entries
        indptr, indices = _row_windows(
            seq_info, page_table, [(b, r, per) for b in range(entries) for r in range(per)], True
        )
        info.setdefault("notes", []).append(f"{per} query rows per seq_info entry, read causally")
    else:
        info.setdefault("notes", []).append(
            f"{rows} query rows for {entries} seq_info entries: outside mla_gluon's contract, nothing written"
        )
        info["rows_unwritten"] = rows
        return
    out, _ = _compute(qf, k, v, indptr.to(o.device), indices.to(o.device), sm, True, info)
    o.copy_(out.to(o.dtype))
    info.update(rows_written=rows, rows_unwritten=0)


def _paged_tokens(
    table: torch.Tensor, lens: torch.Tensor, page: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``b``'s first ``lens[b]`` tokens of block table row ``b`` (pages of ``page`` tokens) as KV rows."""
    table = table.long()
    starts, tokens = [0], []
    for b, n in enumerate(lens.long().tolist()):
        pos = torch.arange(n, device=table.device)
        tokens.append(table[b, pos // page] * page + pos % page)
        starts.append(starts[-1] + n)
    indices = torch.cat(tokens) if tokens else table.new_zeros(0)
    return torch.tensor(starts, device=device), indices.to(device)


def _triton_decode(call: dict[str, Any], t: dict[str, Any], st: Any, info: dict[str, Any]) -> None:
    """vLLM's ``decode_attention_fwd`` as 0.34.0's gfx942 DCP verify calls it (L3279-3336): one query
    row per block-table row over its first ``row_lens`` tokens, the cache scaled by ``k_scale`` (scores
    and values); fills ``o`` and the ``lse`` vLLM passed (an empty row: NaN output, LSE -inf, L3287)."""
    q, o, kv, lse = t["q"], t["o"], t["kv"], t["lse"]
    kvf = read_as_kernel(kv, st.arch, info, "kv").reshape(-1, kv.shape[-1])
    kv_scale = _scale(call.get("kv_scale"), "kv_scale", info) if call["kv_dtype"] == "fp8" else 1.0
    indptr, indices = _paged_tokens(t["req_to_token"], t["seq_lens"], int(call["page_size"]), o.device)
    qf = read_as_kernel(q, st.arch, info, "q")
    sm = float(call["sm_scale"])
    k, v = kvf * kv_scale, kvf[:, :V_HEAD_DIM] * kv_scale
    out, rows_lse = _timed(info, q.device, lambda: _attend_rows(qf, k, v, indptr, indices, sm))
    info["compute"] = f"torch float32 ({q.device.type})"
    o.copy_(out.to(o.dtype))
    lse.copy_(rows_lse)
    info.update(
        kv_scale=kv_scale, sm_scale=sm, scales="k_scale on scores and values", rows_written=q.shape[0]
    )


def _triton_verify(call: dict[str, Any], t: dict[str, Any], st: Any, info: dict[str, Any]) -> None:
    """vLLM 0.34.0's ``decode_attention_fwd_verify`` (triton_decode_attention.py L1338): causal verify of
    ``qlen`` rows per request over a paged block table, the cache scaled by ``k_scale`` (scores, values)."""
    q, o, kv = t["q"], t["o"], t["kv"]
    qlen, page = int(call["max_seqlen_q"]), int(call["page_size"])
    kvf = read_as_kernel(kv, st.arch, info, "kv").reshape(-1, kv.shape[-1])
    kv_scale = _scale(call.get("kv_scale"), "kv_scale", info) if call["kv_dtype"] == "fp8" else 1.0
    seq_lens = t["real_seq_lens"] if t.get("real_seq_lens") is not None else t["seq_lens"]
    kv_indptr, kv_indices = _paged_tokens(t["req_to_token"], seq_lens, page, o.device)
    rows_of = [(b, r, qlen) for b in range(seq_lens.numel()) for r in range(qlen)]
    indptr, indices = _row_windows(kv_indptr, kv_indices, rows_of, True)
    qf = read_as_kernel(q, st.arch, info, "q")
    sm = float(call["sm_scale"])
    out, _ = _compute(
        qf,
        kvf * kv_scale,
        kvf[:, :V_HEAD_DIM] * kv_scale,
        indptr.to(o.device),
        indices.to(o.device),
        sm,
        True,
        info,
    )
    o.copy_(out.reshape(o.shape).to(o.dtype))
    info.update(
        kv_scale=kv_scale,
        sm_scale=sm,
        scales="k_scale on scores and values",
        rows_written=len(rows_of),
        rows_unwritten=0,
    )


def _segmented(call: dict[str, Any], t: dict[str, Any], st: Any, info: dict[str, Any]) -> None:
    """AITER's segmented MLA decode with ``skip_reduce`` (aiter v0.1.20 aiter/ops/triton/_triton_kernels/
    attention/mla.py ``_mla_decode_fwd_kernel`` L336-648), as vLLM's DCP verify calls it: one query row per
    sequence (``qo_indptr`` an arange, rocm_aiter_mla.py 0.34.0 L1707-1765), so the kernel's causal bound
    is the row's ``seq_lens`` entry itself.  Per row of ``n`` tokens over its ``block_table`` pages of
    ``page_size`` (the kernel's ``TILE_SIZE``): ``tiles_per_segment = cdiv(n, NUM_SEGMENTS * TILE_SIZE)``
    (L403) and segment ``g`` covers tokens ``[g * tps * TILE, (g + 1) * tps * TILE) ∩ [0, n)``; a segment
    starting at or past ``n`` returns before writing anything (L405-406), so an empty row writes nothing.
    A written segment stores, per head (L626-648): ``segm_max`` the maximum of its scores in base 2,
    ``S = q·k * softmax_scale * log2(e) * q_descale * kv_descale`` (L381-382, L408-418, the scales where
    passed); ``segm_expsum`` ``sum exp2(S - max)``; ``segm_output`` ``kv_descale * sum exp2(S - max) * V``,
    unnormalised (the kernel's running ``acc``, rescaled as the max moves, L605-628).  The arithmetic is
    float32 over the exact operand values (AITER casts ``P`` to the KV dtype before its PV dot)."""
    q, kv, segm_output = t["q"], t["kv"], t["o"]
    seq_lens = t["seq_lens"].long()
    if q.shape[0] != seq_lens.numel():
        raise ValueError(
            f"{q.shape[0]} query rows for {seq_lens.numel()} sequences: the stand-in serves one query row "
            "per sequence, as vLLM's DCP verify row view passes"
        )
    page, segments = int(call["page_size"]), segm_output.shape[2]
    kvf = read_as_kernel(kv, st.arch, info, "kv").reshape(-1, kv.shape[-1])
    poisoned = torch.cat([kvf, torch.full((1, kvf.shape[1]), float("nan"), device=kvf.device)])
    qf = read_as_kernel(q, st.arch, info, "q")
    kv_scale = _scale(call.get("kv_scale"), "kv_scale", info)
    q_scale = 1.0 if call.get("q_scale") is None else float(call["q_scale"])
    qk = float(call["sm_scale"]) / math.log(2) * q_scale * kv_scale
    indptr, indices = _paged_tokens(t["block_table"], seq_lens, page, q.device)

    def fill() -> int:
        written = 0
        for b, n in enumerate(seq_lens.tolist()):
            if n <= 0:
                continue
            tok = indices[indptr[b] : indptr[b + 1]].long()
            rows = poisoned[torch.where((tok < 0) | (tok >= kvf.shape[0]), kvf.shape[0], tok)]
            scores = qk * (qf[b] @ rows.T)  # [heads, n], base 2
            span = -(-n // (segments * page)) * page  # tiles_per_segment * TILE_SIZE tokens
            for g, start in enumerate(range(0, n, span)):
                s = scores[:, start : start + span]
                m = s.amax(-1)
                p = torch.exp2(s - m[:, None])
                t["segm_max"][b, :, g] = m
                t["segm_expsum"][b, :, g] = p.sum(-1)
                segm_output[b, :, g, :KV_LORA_RANK] = (
                    p @ rows[start : start + span, :KV_LORA_RANK]
                ) * kv_scale
            written += 1
        return written

    written = _timed(info, q.device, fill)
    info.update(
        compute=f"torch float32 ({q.device.type})",
        kv_scale=kv_scale,
        q_scale=q_scale,
        sm_scale=float(call["sm_scale"]),
        segments=segments,
        scales="kv_descale on scores and values (AITER applies whatever vLLM passed)",
        rows_written=written,
        rows_unwritten=seq_lens.numel() - written,
    )


def _segment_merge(call: dict[str, Any], t: dict[str, Any], info: dict[str, Any]) -> None:
    """vLLM's ``merge_mla_segments_triton``: the release's own, executed from its tree
    (:func:`conformance.dcp_merge.load_segment_merge`), into the output and LSE the stub allocated."""
    from conformance.dcp_merge import load_segment_merge

    merge = load_segment_merge()
    output, lse = _timed(
        info,
        t["o"].device,
        lambda: merge(
            t["q"], t["segm_max"], t["segm_expsum"], t["seq_lens"], int(call["tile_size"]), t["o"].dtype
        ),
    )
    t["o"].copy_(output)
    t["lse"].copy_(lse)
    where = "natively" if output.is_cuda else "in Triton's interpreter"
    info["compute"] = f"the release's merge_mla_segments_triton, {where}"


def kernel(entry: str, call: dict[str, Any]) -> Any:
    """Fill the recorded call's output ``o`` as the routed kernel would (the recorder admitted the call);
    an ASM call with ``return_lse`` returns ``(o, lse)`` with the true LSE of the rows it was given."""
    info: dict[str, Any] = {}
    call["replay"] = info
    st = _state()
    result = None
    if entry == "mla_decode_fwd":
        lse = _asm(call, call["tensors"], st, info)
        result = (call["tensors"]["o"], lse) if call.get("return_lse") else None  # AITER's (logits, lse)
    elif entry == "mla_gluon":
        _gluon(call, call["tensors"], st, info)
    elif entry == "decode_attention_fwd_verify":
        _triton_verify(call, call["tensors"], st, info)
    elif entry == "decode_attention_fwd":
        _triton_decode(call, call["tensors"], st, info)
    elif entry == "segmented_mla_decode_fwd":
        _segmented(call, call["tensors"], st, info)
    elif entry == "merge_mla_segments_triton":
        _segment_merge(call, call["tensors"], info)
    else:
        info["no_stand_in"] = f"no stand-in for {entry}: output left as vLLM allocated it"
    return result


# --- the verdict ------------------------------------------------------------------------------


def reference(
    shape: Any, batch: Any, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, DecodeInputs, float]:
    """The float32 reference and its bf16 twin (for the tolerance) from the batch's true logical inputs,
    and their time (:func:`kernel_ms`: the two attentions, as :func:`conformance.runner.run_case` times
    the reference of the other backends)."""
    R, Q = shape.num_reqs, shape.max_qo_len
    pages = batch.kv_cache.shape[0]
    kv = PagedKV(
        batch.kv_true.to(device).view(pages, -1, HEAD_DIM),
        batch.block_table.to(device),
        torch.tensor(batch.kv_lens, device=device),
        1.0,
    )
    inputs = DecodeInputs(batch.q_true.to(device), kv, Q, bool(shape.causal), 1.0, DEFAULT_SM_SCALE)
    ops = operands(inputs)  # gathering and masking: input preparation, untimed (as conformance.runner's)
    ops16 = ops.to(torch.bfloat16)
    H = batch.q_true.shape[1]
    refs: list[torch.Tensor] = []

    def both() -> None:
        refs[:] = [attend(ops).view(R * Q, H, V_HEAD_DIM), attend(ops16).view(R * Q, H, V_HEAD_DIM)]

    both()
    return refs[0], refs[1], inputs, kernel_ms(both, device)


def verdict(
    shape: Any, batch: Any, output: Any, row: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """PASS / MISMATCH / NAN of the step's output against the true reference (the runner's classify)."""
    from conformance.runner import classify

    ref, ref_lowp, inputs, t_ref = reference(shape, batch, output.device)
    result = classify(output, ref, ref_lowp)
    kv_tokens = int(inputs.kv.seq_lens.sum())
    result.update(
        t_reference_ms=t_ref,
        heads=int(ref.shape[1]),
        page_size=int(inputs.kv.page_size),
        max_seq_len=int(inputs.kv.seq_lens.max()),
        kv_tokens=kv_tokens,
        kv_bytes=kv_tokens * HEAD_DIM * batch.kv_cache.element_size(),
    )
    return result
