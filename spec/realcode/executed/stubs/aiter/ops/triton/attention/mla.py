"""Stub ``aiter.ops.triton.attention.mla.mla_decode_fwd``: AITER's segmented MLA decode, recorded.

vLLM's DCP verify loads it (``_get_segmented_mla_decode``, rocm_aiter_mla.py
0.29.0 L170-174; its import probe ``_segmented_mla_decode_supported`` L176-186
decides whether the SEGMENTED route exists).  Every AITER the releases pin has
it (v0.1.19, v0.1.20: aiter/ops/triton/attention/mla.py L264; sources §60), so
the stub is always importable.

vLLM calls it with ``skip_reduce=True`` and merges the returned segment
partials itself (0.34.0 L3244-3276, ``merge_mla_segments_triton``).  The call
is recorded as ``segmented_mla_decode_fwd`` (the query, the KV dtype, the page
size, ``causal``) and returns partials of AITER's shapes, ``[tokens, heads,
segments, kv_lora_rank]`` and ``[tokens, heads, segments]``, one segment, for
the merge's stub to record.  AITER asserts ``causal`` (L283): so does the stub.  Where the kernel
does not fit the arch's LDS (gfx942, fp8 past 64 heads) its compile fails: the stub raises there.
"""

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
    output = torch.zeros((tokens, heads, 1, kv_lora_rank), dtype=torch.float32, device=q.device)
    recorder.vllm_triton_op(
        "segmented_mla_decode_fwd",
        q,
        kv_buffer,
        output,
        num_rows=int(seqused_k.numel()),
        page_size=int(kv_buffer.shape[1]),
        sm_scale=float(softmax_scale),
        kv_scale=kv_descale,
        causal=bool(causal),
        skip_reduce=bool(skip_reduce),
        tensors={"cu_seqlens_q": cu_seqlens_q, "seq_lens": seqused_k, "block_table": block_tables},
    )
    if lds:
        STATE.calls[-1]["raised"] = "segmented_lds"
        raise RuntimeError(lds)
    if not skip_reduce:
        return out
    zeros = torch.zeros((tokens, heads, 1), dtype=torch.float32, device=q.device)
    return output, zeros, zeros.clone()


def _lds_refusal(heads: int, kv_buffer: torch.Tensor) -> str | None:
    """Where the kernel does not compile on the arch's LDS, the Triton error (mla_model.failures
    SEGMENTED_LDS, from mla_model.registry.segmented_mla_fits; sources §60); None where it does."""
    from mla_model.registry import segmented_mla_fits

    if segmented_mla_fits(STATE.arch, recorder.dtype_name(kv_buffer.dtype), heads):
        return None
    return f"triton OutOfResources: segmented MLA for {heads} fp8 heads needs 128 KiB of LDS on {STATE.arch}"
