"""Stub ``vllm.v1.attention.ops.triton_decode_attention``: vLLM's Triton MLA decode, recorded, not launched.

rocm_aiter_mla.py imports ``decode_attention_fwd`` (0.33.0 L52; gfx942 DCP
verify, 0.34.0 L3319) and, from 0.34.0 (L56-61), ``decode_attention_fwd_verify``
(the causal verify past qlen 4 where no ASM kernel is correct, L3393),
``warmup_decode_attention_fwd_verify`` (L3380) and ``verify_num_kv_splits``
(the split cap, L519).

The kernels are vLLM's own Triton code: each launch is recorded
(:func:`mla_spec_stub.recorder.vllm_triton_op`, entries ``decode_attention_fwd``
and ``decode_attention_fwd_verify``).  Where a GPU and Triton exist, the
release's own module (its file in the release tree) runs the launch; without
one the replay's stand-in fills the output.  The warmup, which only compiles
launch variants, is kept as an event.
``verify_num_kv_splits`` and the config helpers it calls are the release's
own definitions (vllm/v1/attention/ops/triton_decode_attention.py 0.34.0
L1283-1336, L1481-1503), executed from its tree.
"""

import functools
import importlib.util
from typing import Any  # noqa: F401  (read by the release's definitions)

from mla_spec_stub import STATE, kernels, recorder, release_defs, strict

from vllm.triton_utils import triton  # noqa: F401  (read by the release's definitions)

__getattr__ = strict("vllm.v1.attention.ops.triton_decode_attention")

_RELPATH = "vllm/v1/attention/ops/triton_decode_attention.py"
_VERIFY_DEFS = (
    "_VERIFY_BASE_CONFIG",
    "verify_row_blocks",
    "verify_num_kv_splits",
    "_VERIFY_SMALL_CONFIG",
    "_VERIFY_LARGE_CONFIG",
    "_VERIFY_SMALL_MAX_ROWS",
    "select_verify_config",
)


def decode_attention_fwd(
    q,
    k_buffer,
    v_buffer,
    o,
    lse,
    req_to_token,
    b_seq_len,
    attn_logits,
    num_kv_splits,
    sm_scale,
    page_size=1,
    logit_cap=0.0,
    k_scale=None,
    v_scale=None,
    is_mla=False,
    sliding_window=None,
):
    """0.33.0 L781 signature; recorded as ``decode_attention_fwd`` with the block table, the per-row KV
    lengths and the ``lse`` the kernel writes (0.34.0's gfx942 DCP verify reads it, L3299-3336)."""
    recorder.vllm_triton_op(
        "decode_attention_fwd",
        q,
        k_buffer,
        o,
        num_reqs=int(b_seq_len.numel()),
        num_kv_splits=int(num_kv_splits),
        sm_scale=float(sm_scale),
        kv_scale=k_scale,
        page_size=int(page_size),
        causal=None,
        tensors={"req_to_token": req_to_token, "seq_lens": b_seq_len, "lse": lse},
    )


def decode_attention_fwd_verify(
    q,
    k_buffer,
    v_buffer,
    o,
    lse,
    req_to_token,
    seq_lens,
    real_seq_lens,
    qlen,
    attn_logits,
    num_kv_splits,
    sm_scale,
    page_size,
    k_scale=None,
):
    """0.34.0 L1338 signature: causal verify, ``qlen`` tokens per request; recorded as
    ``decode_attention_fwd_verify``."""
    args = dict(locals())  # every parameter by name, for the release's own op where it can run
    real = _real_module()
    recorder.vllm_triton_op(
        "decode_attention_fwd_verify",
        q,
        k_buffer,
        o,
        max_seqlen_q=int(qlen),
        num_reqs=int(seq_lens.numel()),
        num_kv_splits=int(num_kv_splits),
        sm_scale=float(sm_scale),
        kv_scale=k_scale,
        q_scale=None,
        page_size=int(page_size),
        varlen=real_seq_lens is not None,
        causal=True,
        tensors={"req_to_token": req_to_token, "seq_lens": seq_lens, "real_seq_lens": real_seq_lens},
        real=None if real is None else lambda: real.decode_attention_fwd_verify(**args),
    )


@functools.lru_cache(maxsize=1)
def _real_module():
    """The release's own triton_decode_attention.py as a module, where its kernels can launch (GPU + Triton).

    The module reads ``current_platform.is_rocm()`` once, at import (``is_hip_``,
    0.34.0 L41), to pick launch options only (block sizes, warps,
    ``waves_per_eu``); a GPU here is NVIDIA's, whose Triton refuses the AMD
    options, so the module is imported with ``is_rocm()`` answering False:
    the same kernels and arithmetic, with the launch options vLLM uses on CUDA.
    """
    if not kernels.use_real_triton():
        return None
    from vllm.platforms import current_platform

    spec = importlib.util.spec_from_file_location(
        "mla_spec_release_triton_decode_attention", STATE.tree / _RELPATH
    )
    module = importlib.util.module_from_spec(spec)
    rocm = type(current_platform).is_rocm
    type(current_platform).is_rocm = lambda self: False
    try:
        spec.loader.exec_module(module)
    finally:
        type(current_platform).is_rocm = rocm
    return module


def warmup_decode_attention_fwd_verify(
    q, k_buffer, o, lse, req_to_token, has_real, qlens, attn_logits, sm_scale, page_size, k_scale=None
):
    """0.34.0 L1516 signature: compiles the verify variants; kept as a ``warmup`` event."""
    STATE.events.append(
        {
            "warmup": {
                "entry": "decode_attention_fwd_verify",
                "qlens": [int(x) for x in qlens],
                "num_heads": int(q.shape[1]),
            }
        }
    )


def _load() -> None:
    text = (STATE.tree / _RELPATH).read_text()
    if "def verify_num_kv_splits" in text:
        release_defs(_RELPATH, _VERIFY_DEFS, globals())


_load()
