"""The float32 reference: MLA decode in absorbed form over a paged KV cache.

In DeepSeek-style MLA decode with the weights absorbed, every query head
attends to one shared latent KV row per token: ``kv_lora_rank`` (512) latent
dims plus ``qk_rope_head_dim`` (64) rotary dims, 576 in all.  Scores use all
576; the value is the first 512 (``v = kv[..., :512]``).  This is the layout
vLLM hands AITER (``kv_c_and_k_pe_cache`` viewed as ``(-1, 1, 1, 576)``,
sources §14).

A decode step is ``R`` requests of ``Q`` query tokens each (``Q > 1`` is a
speculative verify).  Causal verify: row ``t`` of request ``r`` sees the first
``seq_len_r - (Q - 1) + t`` KV tokens (vLLM 0.28.0 ``forward_mqa``'s Gluon
verify flatten builds exactly these windows, L1253-1288); a non-causal block
sees all ``seq_len_r``.

fp8 caches hold ``round(kv / scale)`` in the arch's fp8 flavour with one
per-tensor scale; the reference reads them dequantised (``kv8 * scale``), so
quantisation is part of the input, not of the error being measured.

Everything is batched over requests (a gather through the block table, one
masked einsum); it runs on CPU and CUDA alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
HEAD_DIM = KV_LORA_RANK + QK_ROPE_HEAD_DIM  # 576
V_HEAD_DIM = KV_LORA_RANK  # 512
# softmax scale of DeepSeek-V3 / Kimi MLA: 1 / sqrt(qk_nope_head_dim 128 + qk_rope_head_dim 64)
DEFAULT_SM_SCALE = 1.0 / math.sqrt(128 + QK_ROPE_HEAD_DIM)

# aiter/utility/dtypes.py (v0.1.19): aiter.dtypes.fp8 is e4m3fnuz on gfx942 and e4m3fn on gfx950 (sources §2).
FP8_DTYPE_OF_ARCH = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}


@dataclass(frozen=True)
class PagedKV:
    """A paged latent KV cache and the pages each request owns."""

    cache: torch.Tensor  # [num_blocks, page_size, 576]: bf16, fp16 or fp8
    block_table: torch.Tensor  # [R, max_blocks_per_request] int32 block ids
    seq_lens: torch.Tensor  # [R] int64, KV tokens of each request (its verify block included)
    scale: float = 1.0  # per-tensor dequantisation scale (fp8); 1.0 for bf16/fp16

    @property
    def page_size(self) -> int:
        return self.cache.shape[1]

    def slots(self) -> torch.Tensor:
        """``[R, blocks * page_size]`` flat token slot (``block * page_size + offset``) of each request
        position (positions past a request's ``seq_len`` point at its padding pages; readers mask them)."""
        pos = torch.arange(self.block_table.shape[1] * self.page_size, device=self.cache.device)
        blocks = self.block_table.long()[:, pos // self.page_size]
        return blocks * self.page_size + pos % self.page_size

    def gather(self, dtype: torch.dtype, scale: float | None = None) -> torch.Tensor:
        """``[R, S, 576]`` KV rows of each request, dequantised with ``scale`` (default: the cache's)."""
        rows = self.cache.reshape(-1, HEAD_DIM)[self.slots()].to(dtype)
        scale = self.scale if scale is None else scale
        return rows if scale == 1.0 else rows * scale


@dataclass(frozen=True)
class DecodeInputs:
    """One decode step as the attention backend receives it."""

    q: torch.Tensor  # [R * Q, H, 576], request-major: bf16, or fp8 with q_scale
    kv: PagedKV
    qlen: int  # Q: query tokens per request (uniform, as the UNIFORM decode batch is)
    causal: bool
    q_scale: float = 1.0
    sm_scale: float = DEFAULT_SM_SCALE

    @property
    def num_reqs(self) -> int:
        return self.kv.seq_lens.numel()

    @property
    def num_heads(self) -> int:
        return self.q.shape[1]


def row_kv_lens(seq_lens: torch.Tensor, qlen: int, causal: bool) -> torch.Tensor:
    """``[R, Q]`` KV tokens each query row may see: its causal window, or the whole sequence."""
    if not causal:
        return seq_lens[:, None].expand(-1, qlen)
    t = torch.arange(qlen, device=seq_lens.device)
    return (seq_lens[:, None] - (qlen - 1) + t[None, :]).clamp(min=0)


@dataclass(frozen=True)
class Operands:
    """The attention's operands, gathered and dequantised: what the reference computes on."""

    q: torch.Tensor  # [R, Q * H, 576]
    kv: torch.Tensor  # [R, S, 576]
    bias: torch.Tensor  # [R, Q * H, S]: 0 where the row sees the token, -inf elsewhere
    sm_scale: float

    def to(self, dtype: torch.dtype) -> Operands:
        return Operands(self.q.to(dtype), self.kv.to(dtype), self.bias.to(dtype), self.sm_scale)


def operands(inputs: DecodeInputs) -> Operands:
    """Gather each request's KV through the block table, dequantise, and mask each row to its window."""
    R, Q, H = inputs.num_reqs, inputs.qlen, inputs.num_heads
    q = inputs.q.to(torch.float32).view(R, Q * H, HEAD_DIM)
    if inputs.q_scale != 1.0:
        q = q * inputs.q_scale
    kv = inputs.kv.gather(torch.float32)  # [R, S, 576]
    hidden = (
        torch.arange(kv.shape[1], device=kv.device)[None, None, :]
        >= row_kv_lens(inputs.kv.seq_lens, Q, inputs.causal)[:, :, None]
    )  # [R, Q, S]
    bias = torch.zeros(R, Q, H, kv.shape[1], device=kv.device).masked_fill_(
        hidden[:, :, None, :], float("-inf")
    )
    return Operands(q, kv, bias.view(R, Q * H, -1), inputs.sm_scale)


def attend(ops: Operands) -> torch.Tensor:
    """``softmax(bias + scale * q k^T) v`` in the operands' dtype: ``[R, Q * H, 512]``.

    In float32 this is the reference; in bf16 the scores, probabilities and
    output are rounded as a bf16 kernel rounds them, which makes it the
    same-dtype reference the tolerance is derived from.
    """
    scores = torch.baddbmm(ops.bias, ops.q, ops.kv.transpose(1, 2), alpha=ops.sm_scale)
    return torch.matmul(torch.softmax(scores, dim=-1), ops.kv[..., :V_HEAD_DIM])


def mla_decode(inputs: DecodeInputs, compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The attention output ``[R * Q, H, 512]`` of the step, computed in ``compute_dtype``."""
    ops = operands(inputs)
    return attend(ops.to(compute_dtype)).view(inputs.num_reqs * inputs.qlen, inputs.num_heads, V_HEAD_DIM)


def quantize_fp8(x: torch.Tensor, fp8_dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    """Per-tensor fp8 quantisation: ``(round(x / scale), scale)`` with ``scale = amax / fp8 max``."""
    scale = float(x.abs().max()) / torch.finfo(fp8_dtype).max
    return (x / scale).to(fp8_dtype), scale
