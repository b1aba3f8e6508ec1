"""Stub ``aiter.ops.triton.attention.mla.mla_decode_fwd``: AITER's segmented MLA decode, recorded.

vLLM's DCP verify loads it (``_get_segmented_mla_decode``, rocm_aiter_mla.py
0.29.0 L170-174; its import probe ``_segmented_mla_decode_supported`` L176-186
decides whether the SEGMENTED route exists).  Every AITER the releases pin has
it (v0.1.19, v0.1.20: aiter/ops/triton/attention/mla.py L264; sources §60), so
the stub is always importable.

vLLM calls it with ``skip_reduce=True`` and merges the returned segment
partials itself (0.34.0 L3244-3276, ``merge_mla_segments_triton``).  With
``skip_reduce`` AITER allocates, and returns unreduced, three float32 tensors
(aiter v0.1.20 aiter/ops/triton/attention/mla.py L376-399, L493-496):
``segm_output [tokens, heads, NUM_SEGMENTS, next_pow2(kv_lora_rank)]``,
``segm_max`` and ``segm_expsum [tokens, heads, NUM_SEGMENTS]``, with
``NUM_SEGMENTS`` from its host-side rule (:func:`num_segments`).  The stub
allocates them the same way, poisoned with NaN where AITER's ``torch.empty``
leaves segments the kernel never writes, records the call as
``segmented_mla_decode_fwd`` (the query, the KV dtype, the page size,
``causal``, the segment count) and lets :data:`STATE.kernel`, where a replay
sets one, fill them.  AITER asserts ``causal`` (L283): so does the stub.  Where
the kernel does not fit the arch's LDS (gfx942, fp8 past 64 heads) its compile
fails: the stub raises there.
"""

import math

import torch
from mla_spec_stub import STATE, recorder, strict

__getattr__ = strict("aiter.ops.triton.attention.mla")


def mla_decode_fwd(
    q,
    kv_buffer,
    out,
    cu_seqlens_q,
    seqused_k,
    max_seqlen_kv,
    block_tables,
    softmax_scale,
    kv_lora_rank,
    qk_rope_head_dim,
    causal,
    q_descale,
    kv_descale,
    q_scales=None,
    out_scale=None,
    shuffled_kv_cache=False,
    skip_reduce=False,
):
    """aiter v0.1.20 L264-282 signature."""
    assert causal, "Only causal attention is supported"
    tokens, heads, _ = q.shape
    lds = _lds_refusal(heads, kv_buffer)
    fp8_kv = recorder.dtype_name(kv_buffer.dtype) == "fp8"
    seqs, tile = int(seqused_k.numel()), int(kv_buffer.shape[1])
    segments = num_segments(heads, fp8_kv, tokens, seqs, int(max_seqlen_kv), tile)
    width = 1 << (int(kv_lora_rank) - 1).bit_length()  # triton.next_power_of_2(kv_lora_rank)
    segm_output = torch.full((tokens, heads, segments, width), float("nan"), device=q.device)
    segm_max = torch.full((tokens, heads, segments), float("nan"), device=q.device)
    segm_expsum = segm_max.clone()
    recorder.vllm_triton_op(
        "segmented_mla_decode_fwd",
        q,
        kv_buffer,
        segm_output,
        num_rows=int(seqused_k.numel()),
        page_size=int(kv_buffer.shape[1]),
        num_segments=segments,
        sm_scale=float(softmax_scale),
        kv_scale=kv_descale,
        q_scale=q_descale,
        causal=bool(causal),
        skip_reduce=bool(skip_reduce),
        tensors={
            "cu_seqlens_q": cu_seqlens_q,
            "seq_lens": seqused_k,
            "block_table": block_tables,
            "segm_max": segm_max,
            "segm_expsum": segm_expsum,
        },
    )
    if lds:
        STATE.calls[-1]["raised"] = "segmented_lds"
        raise RuntimeError(lds)
    if not skip_reduce:
        return out
    return segm_output, segm_max, segm_expsum


def num_segments(heads: int, fp8_kv: bool, tokens: int, seqs: int, max_seqlen_kv: int, tile: int) -> int:
    """AITER's ``NUM_SEGMENTS_PER_SEQ`` on gfx942/gfx950 (aiter v0.1.20 aiter/ops/triton/attention/mla.py).

    ``mla_decode_fwd`` (L343-361): one KV head, so ``BLOCK_M`` is 16 up to 16 heads, else the next power
    of two of the heads capped at 128 (fp8 KV) or 64; ``NUM_HEAD_BLOCKS = cdiv(heads, BLOCK_M)``; the 2-D
    programs are ``seqs * NUM_HEAD_BLOCKS`` when every sequence has one query token, else ``cdiv(tokens
    per sequence, BLOCK_Q) * seqs * NUM_HEAD_BLOCKS`` with ``BLOCK_Q = max(BLOCK_M // heads, 1)``; the
    target is ``4 * get_num_sms()`` (the arch's compute units, :data:`mla_model.emulation.CU_NUM`).
    ``select_3d_config`` (L65-129, its non-gfx1250 branch): ``2 * cdiv(target, programs)`` capped at
    ``min(128, cdiv(max_seqlen_kv, TILE_SIZE))``, rounded up to a power of two, capped at 128, and at
    least 8.  v0.1.19 differs only in ``BLOCK_M``'s cap (16), which moves the count, not the merged result.
    """
    from mla_model.emulation import CU_NUM

    block_m = 16 if heads <= 16 else min(1 << (heads - 1).bit_length(), 128 if fp8_kv else 64)
    head_blocks = -(-heads // block_m)
    per_seq = tokens // seqs
    block_q = max(block_m // heads, 1)
    programs = seqs * head_blocks * (1 if per_seq == 1 else -(-per_seq // block_q))
    count = min(-(-4 * CU_NUM[STATE.arch] // programs) * 2, min(128, math.ceil(max_seqlen_kv / tile)))
    return max(min(1 << max(count - 1, 0).bit_length(), 128), 8)


def _lds_refusal(heads: int, kv_buffer: torch.Tensor) -> str | None:
    """Where the kernel does not compile on the arch's LDS, the Triton error (mla_model.failures
    SEGMENTED_LDS, from mla_model.registry.segmented_mla_fits; sources §60); None where it does."""
    from mla_model.registry import segmented_mla_fits

    if segmented_mla_fits(STATE.arch, recorder.dtype_name(kv_buffer.dtype) == "fp8", heads):
        return None
    return f"triton OutOfResources: segmented MLA for {heads} fp8 heads needs 128 KiB of LDS on {STATE.arch}"
