"""Route emulation: what each decode route does to the data, in torch.

Given a :class:`~mla_model.decision.Decision` (the route a gate revision picks
and what the AITER registry makes of it) and the step's inputs, this runs the
route's data path the way the routed kernel would:

* **Gluon decode / verify** (``mla_gluon``): the query's own heads, the KV
  dequantised with the scale vLLM passes, which is the hard-coded ``1.0``
  where ``Route.kv_scale_passed`` is False (vLLM 0.28.0 ``forward_mqa``
  L1219/L1301 ``kv_scale=1.0``; sources §27); verify rows in their causal
  windows; split-KV as ``mla_gluon`` partitions it.
* **Triton verify** (vLLM 0.34 on CDNA3): the query's own heads, the layer's
  ``k_scale`` (0.34.0 ``_forward_triton_verify`` L3393-3407 ``k_scale=layer._k_scale``; sources §30), one
  split (vLLM's ``verify_num_kv_splits`` lives outside this backend file and
  is not modelled).
* **ASM persistent / non-persistent** (``aiter.mla.mla_decode_fwd``): the
  query padded to the kernel's head count (``get_mla_padded_q``:
  repeat_interleave for divisors, tile-and-slice otherwise) and to the
  kernel's qlen, fp8 dequantised in-kernel with ``q_scale``/``kv_scale``,
  split-KV with AITER's split count, a log-sum-exp reduce, then the route's
  unpad (``Route.head_unpad``: get_mla_unpadded_o's, or the CPRR route's prefix
  cut, which does not undo a repeat_interleave pad; sources §61).
  Non-persistent multi-token output is zero-filled first (vLLM 0.28.0 L1325).

Where the routed stack has no kernel (AITER's "cannot get heuristic kernel",
a ``get_block_n_fp8`` KeyError, a ``mla_gluon`` assert, vLLM raising before
any kernel) :class:`NoKernel` is raised with the reason.

Buffers a kernel writes start NaN-poisoned (``torch.empty`` in vLLM), so a row
a kernel never writes shows up as NaN.

Fault injection (:data:`FAULTS`) replays the documented failure modes so that
a conformance runner can show it detects them.
"""

from __future__ import annotations

from typing import Any

import torch

from mla_model.decision import Decision
from mla_model.failures import first_failure
from mla_model.reference import HEAD_DIM, V_HEAD_DIM, DecodeInputs, PagedKV, row_kv_lens
from mla_model.registry import Registry
from mla_model.route import ASM_PATHS, GLUON_PATHS, UNPAD_OF_PADDING

FAULTS = {
    "fp8-read-as-bf16": "the fp8 cache's bytes are read by a kernel that only reads bf16 (the pre-#51011 "
    "fp8-to-Gluon route): every 1152-byte bf16 row spans two fp8 rows, and rows past the "
    "cache's end read poisoned memory",
    "repeat-pad-non-divisor": "a non-divisor head count is padded by repeat_interleave(16 // h) and "
    "unpadded by the stride slice (vLLM 0.27's get_mla_padded_q/unpadded_o): too few query heads "
    "reach the kernel and the wrong heads come back",
    "metadata-short-qlen": "the persistent work metadata is sized for qlen - 1 (the pre-#51011 drafter "
    "whitelist): the kernel leaves the last query row of every request unwritten",
}

# get_cu_num(): compute units of MI300X/MI325X (gfx942) and MI355X (gfx950), per AMD's datasheets.
CU_NUM = {"gfx942": 304, "gfx950": 256}
# get_meta_param's per-split overhead constant (aiter/mla.py v0.1.20 L308).
_SPLIT_OVERHEAD = 84.1
# mla_gluon bh16 regimes: BLOCK_N 128 for fp8 KV (bh16bn128), 64 for bf16 (bh16bn64), 16 heads a block
# (aiter/ops/triton/gluon/mla_gluon.py v0.1.20 L951-953).
_GLUON_BLOCK_N = {"fp8": 128, "bf16": 64}
_GLUON_BLOCK_H = 16
_GLUON_WG_BUDGET = 256


class NoKernel(Exception):
    """The routed stack has no kernel that takes this request; the message says who refuses it."""


# --- head and qlen padding ------------------------------------------------------------------


def pad_heads(q: torch.Tensor, heads: int, m: int, padding: str) -> torch.Tensor:
    """``get_mla_padded_q`` (vLLM 0.28.0 L877-896; 0.34.0 L2510-2534): ``heads`` query heads to ``m``."""
    if padding == "none":
        return q
    if padding == "repeat_interleave":
        return q.repeat_interleave(m // heads, dim=1)
    tiled = torch.cat([q] * -(-m // heads), dim=1)  # whole copies of the rank's heads, then cut to m
    return tiled[:, :m].contiguous()


def unpad_heads(o: torch.Tensor, heads: int, m: int, padding: str) -> torch.Tensor:
    """``get_mla_unpadded_o``: the stride slice undoes repeat_interleave, the prefix undoes the tile."""
    return cut_heads(o, heads, m, UNPAD_OF_PADDING[padding])


def cut_heads(o: torch.Tensor, heads: int, m: int, unpad: str) -> torch.Tensor:
    """The kernel's ``m`` output heads cut back to ``heads`` as ``unpad`` says
    (:data:`mla_model.route.HEAD_UNPADS`): every ``(m // heads)``-th, the first ``heads`` (also the CPRR
    route's ``o[:, :heads]`` whatever the padding, vLLM 0.34.0 L3705-3709; sources §61), or all."""
    if unpad == "stride":
        return o[:, :: m // heads, :]
    if unpad == "prefix":
        return o[:, :heads, :]
    return o


def as_kernel_heads(q: torch.Tensor, m: int) -> torch.Tensor:
    """The ``[tokens, m, 576]`` query the ASM kernel reads from ``q``'s packed storage.

    A padded query with the wrong head count is read past its end, into
    poisoned memory (``asm_mla.cu`` only checks ``Q.is_contiguous()``).
    """
    if q.shape[1] == m:
        return q
    tokens = q.shape[0]
    flat = q.contiguous().reshape(-1)
    need = tokens * m * HEAD_DIM
    tail = torch.full((max(0, need - flat.numel()),), float("nan"), dtype=q.dtype, device=q.device)
    return torch.cat([flat, tail])[:need].view(tokens, m, HEAD_DIM)


def pad_qlen(q: torch.Tensor, num_reqs: int, qlen: int, kernel_qlen: int) -> torch.Tensor:
    """Prepend ``kernel_qlen - qlen`` zero rows to every request, so each real row keeps its right-aligned
    causal window (the LSE-PS qlen pad of sources §46)."""
    if kernel_qlen == qlen:
        return q
    q4 = q.view(num_reqs, qlen, *q.shape[1:])
    pad = q4.new_zeros(num_reqs, kernel_qlen - qlen, *q.shape[1:])
    return torch.cat([pad, q4], dim=1).reshape(num_reqs * kernel_qlen, *q.shape[1:])


def unpad_qlen(o: torch.Tensor, num_reqs: int, qlen: int, kernel_qlen: int) -> torch.Tensor:
    """Drop the leading pad rows of every request."""
    if kernel_qlen == qlen:
        return o
    return o.view(num_reqs, kernel_qlen, *o.shape[1:])[:, kernel_qlen - qlen :].reshape(
        num_reqs * qlen, *o.shape[1:]
    )


# --- split counts ---------------------------------------------------------------------------


def occupancy_num_kv_splits(cu_num: int, bs: int, total_kv: int) -> int:
    """get_meta_param's automatic split count (aiter/mla.py v0.1.20 L305-343): the ``i`` in 1..16 that best
    fills the CUs, discounted by the per-split overhead."""
    avg_kv = total_kv / bs
    return max(
        (
            (bs * i / ((bs * i + cu_num - 1) // cu_num * cu_num) * avg_kv / (avg_kv + _SPLIT_OVERHEAD * i), i)
            for i in range(1, 17)
        ),
        key=lambda x: x[0],
    )[1]


def asm_num_kv_splits(
    registry: Registry, arch: str, bs: int, total_kv: int, nhead: int, qlen: int, q_dtype: str
) -> int:
    """get_meta_param (aiter/mla.py v0.1.20 L282-375) for the non-persistent ASM path.

    fp8 queries cap the count by ``get_block_n_fp8[nhead * qlen]``; a missing key is AITER's KeyError.
    """
    splits = occupancy_num_kv_splits(CU_NUM[arch], bs, total_kv)
    if q_dtype != "fp8":
        return splits
    block_n = dict(registry.block_n_fp8).get(nhead * qlen)
    if block_n is None:
        raise NoKernel(
            f"AITER {registry.aiter_version} get_meta_param: get_block_n_fp8[{nhead * qlen}] "
            f"(nhead {nhead} x qlen {qlen}) raises KeyError"
        )
    splits = min(splits, (total_kv + bs * block_n - 1) // (bs * block_n))
    if splits > 1:
        splits = min(splits, int(abs(total_kv / bs - qlen) // block_n) + 1)
    return splits


def gluon_num_kv_splits(batch: int, qlen: int, nhead: int) -> int:
    """mla_gluon's bh16 launch budget (v0.1.20 L959-960; sources §43).

    ``max(1, 256 // (batch * qlen * head_blocks))``: the verify flatten (batch ``R*Q``, qlen 1) and
    native MTP (batch ``R``, qlen ``Q``) get the same count.
    """
    return max(1, _GLUON_WG_BUDGET // (batch * qlen * -(-nhead // _GLUON_BLOCK_H)))


# --- split-KV attention and the reduce --------------------------------------------------------


def lse_reduce(partial_o: torch.Tensor, partial_lse: torch.Tensor) -> torch.Tensor:
    """Merge per-split outputs ``[n, ..., 512]`` by their log-sum-exp ``[n, ...]``; an empty split (-inf)
    weighs 0."""
    top = partial_lse.max(dim=0).values
    weight = torch.exp(partial_lse - top)
    return (weight[..., None] * partial_o).sum(dim=0) / weight.sum(dim=0)[..., None]


def split_kv_attention(
    q: torch.Tensor, kv: torch.Tensor, row_lens: torch.Tensor, bounds: torch.Tensor, sm_scale: float
) -> torch.Tensor:
    """Attention of ``q [R, Q, H, 576]`` over ``kv [R, S, 576]`` computed split by split and LSE-reduced.

    ``bounds [n, 2, R, Q]`` holds each split's KV range per query row; a row also stops at its
    ``row_lens [R, Q]``.  One loop over splits, never over requests.
    """
    scores = torch.einsum("rqhd,rsd->rqhs", q, kv) * sm_scale
    pos = torch.arange(kv.shape[1], device=kv.device)[None, None, :]
    outs, lses = [], []
    for start, end in bounds:
        keep = (pos >= start[..., None]) & (pos < torch.minimum(end, row_lens)[..., None])
        s = scores.masked_fill(~keep[:, :, None, :], float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.nan_to_num(neginf=0.0)[..., None])  # an empty split: p = 0, lse = -inf
        outs.append(torch.einsum("rqhs,rsd->rqhd", p, kv[..., :V_HEAD_DIM]))
        lses.append(lse)
    return lse_reduce(torch.stack(outs), torch.stack(lses))


def even_split_bounds(seq_lens: torch.Tensor, qlen: int, splits: int) -> torch.Tensor:
    """Every request's KV cut into ``splits`` chunks of ``ceil(seq_len / splits)`` (the ASM split-KV stage 1);
    all rows of a request share the chunks."""
    chunk = (seq_lens + splits - 1) // splits
    i = torch.arange(splits, device=seq_lens.device)[:, None]
    start = (i * chunk[None, :]).clamp(max=seq_lens[None, :])
    end = ((i + 1) * chunk[None, :]).clamp(max=seq_lens[None, :])
    return torch.stack([start, end], dim=1)[..., None].expand(-1, -1, -1, qlen)


def gluon_split_bounds(row_lens: torch.Tensor, splits: int, block_n: int) -> torch.Tensor:
    """mla_gluon's partition of each row's KV (v0.1.20 L146-156): ``max(BLOCK_N, len // splits)`` per split,
    the last split to the end, splits past the end inactive (and left out: a split starts at
    ``i * BLOCK_N`` or later, so only the first ``ceil(max_len / BLOCK_N)`` can hold tokens)."""
    chunk = torch.clamp(row_lens // splits, min=block_n)
    live = min(splits, -(-int(row_lens.max()) // block_n))
    i = torch.arange(live, device=row_lens.device)[:, None, None]
    start = (i * chunk[None]).clamp(max=row_lens[None])
    end = torch.where(i == splits - 1, row_lens[None], ((i + 1) * chunk[None]).clamp(max=row_lens[None]))
    return torch.stack([start, end], dim=1)


# --- faults ---------------------------------------------------------------------------------


def fault_touches(fault: str, decision: Decision) -> bool:
    """Whether the fault changes what this decision's route does (the cases a runner must flag)."""
    route = decision.route
    if fault == "fp8-read-as-bf16":
        return route.request.kv_dtype == "fp8"
    if fault == "repeat-pad-non-divisor":
        return route.path in ASM_PATHS and route.head_padding == "tile"
    if fault == "metadata-short-qlen":
        return route.path == "asm_persistent" and int(route.request.kernel_qlen) >= 2
    raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")


def fp8_bytes_as_bf16(kv: PagedKV) -> PagedKV:
    """The fp8 cache as a bf16-only kernel reads it: its bytes viewed as bf16 with the bf16 row stride,
    the half past the end of the buffer poisoned; no scale."""
    raw = kv.cache.contiguous().view(torch.uint8).reshape(-1).view(torch.bfloat16)
    past_end = torch.full_like(raw, float("nan"))
    return PagedKV(torch.cat([raw, past_end]).view(kv.cache.shape), kv.block_table, kv.seq_lens, 1.0)


# --- the routes -----------------------------------------------------------------------------


def _dequantised(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x.to(torch.float32) * scale


def emulate(
    decision: Decision, registry: Registry, inputs: DecodeInputs, fault: str | None = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The routed output ``[R * Q, H, 512]`` (bf16) and what the route did (splits, padding)."""
    route, shape = decision.route, decision.shape
    if fault is not None and not fault_touches(fault, decision):
        fault = None
    failure = first_failure(decision)
    if failure:  # a refusal of the request is NO_KERNEL; anything else raises what the code raises (a CRASH)
        kind, why = failure
        if not kind.refusal:
            raise kind.exception(why)
        raise NoKernel(f"AITER {registry.aiter_version}: {why}" if kind.where == "asm" else why)
    R, Q, H = inputs.num_reqs, inputs.qlen, inputs.num_heads
    kv = fp8_bytes_as_bf16(inputs.kv) if fault == "fp8-read-as-bf16" else inputs.kv
    seq_lens = kv.seq_lens
    rows = row_kv_lens(seq_lens, Q, inputs.causal)
    q = _dequantised(inputs.q, inputs.q_scale)

    if route.path in GLUON_PATHS or route.path == "triton_verify":
        if route.path in GLUON_PATHS:
            splits = gluon_num_kv_splits(R, Q, H)
            bounds = gluon_split_bounds(
                rows, splits, _GLUON_BLOCK_N["fp8" if route.request.kv_dtype == "fp8" else "bf16"]
            )
            kv_scale = kv.scale if route.kv_scale_passed else 1.0
        else:
            splits, bounds, kv_scale = 1, even_split_bounds(seq_lens, Q, 1), kv.scale
        o = split_kv_attention(
            q.view(R, Q, H, HEAD_DIM), kv.gather(torch.float32, kv_scale), rows, bounds, inputs.sm_scale
        )
        return o.reshape(R * Q, H, V_HEAD_DIM).to(torch.bfloat16), {"splits": splits, "kv_scale": kv_scale}

    m, qk = int(route.request.padded_heads), int(route.request.kernel_qlen)
    padding, unpad = route.head_padding, route.head_unpad
    if fault == "repeat-pad-non-divisor":
        padding, unpad = "repeat_interleave", "stride"
    persistent = bool(decision.asm.persistent)
    total_kv = int(seq_lens.sum())
    if persistent:
        # get_mla_metadata_v1 (C++) balances work items over the CUs; not modelled: its split count is taken
        # from get_meta_param's occupancy search.
        splits = occupancy_num_kv_splits(CU_NUM[shape.arch], R, total_kv)
    else:
        splits = asm_num_kv_splits(registry, shape.arch, R, total_kv, m, qk, route.request.q_dtype)
    qp = pad_qlen(q, R, Q, qk)
    qp = as_kernel_heads(pad_heads(qp, H, m, padding), m)
    krows = row_kv_lens(seq_lens, qk, inputs.causal)
    written = split_kv_attention(
        qp.view(R, qk, m, HEAD_DIM),
        kv.gather(torch.float32),
        krows,
        even_split_bounds(seq_lens, qk, splits),
        inputs.sm_scale,
    )
    fill = 0.0 if (qk > 1 and not persistent) else float("nan")
    o = torch.full((R, qk, m, V_HEAD_DIM), fill, dtype=torch.bfloat16, device=q.device)
    covered = qk - 1 if fault == "metadata-short-qlen" else qk
    o[:, :covered] = written[:, :covered].to(torch.bfloat16)
    o = unpad_qlen(o.view(R * qk, m, V_HEAD_DIM), R, Q, qk)
    return cut_heads(o, H, m, unpad), {
        "splits": splits,
        "kv_scale": kv.scale,
        "padded_heads": m,
        "kernel_qlen": qk,
        "persistent": persistent,
    }
