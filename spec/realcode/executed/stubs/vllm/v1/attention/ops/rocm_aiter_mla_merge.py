"""Stub ``vllm.v1.attention.ops.rocm_aiter_mla_merge.merge_mla_segments_triton``
(rocm_aiter_mla.py 0.29.0 L35).

vLLM's own Triton merge of segmented-MLA partials (vllm/v1/attention/ops/
rocm_aiter_mla_merge.py 0.34.0 L100-107), reached only by DCP segmented
verify (0.29.0 L1746, 0.34.0 L3270).  The call is recorded as
``merge_mla_segments_triton`` and returns the ``(output, lse)`` tensors of the
release's signature.  Where a replay is active (:data:`STATE.kernel` set) the
replay fills them by executing the release's own merge from its tree
(:func:`conformance.dcp_merge.load_segment_merge`); a record-only run leaves
them as allocated.
"""

import torch
from mla_spec_stub import recorder, strict

__getattr__ = strict("vllm.v1.attention.ops.rocm_aiter_mla_merge")


def merge_mla_segments_triton(segm_output, segm_max, segm_expsum, seq_lens, tile_size, out_dtype):
    num_tokens, num_heads, _, kv_lora_rank = segm_output.shape
    output = torch.empty((num_tokens, num_heads, kv_lora_rank), dtype=out_dtype, device=segm_output.device)
    lse = torch.empty((num_tokens, num_heads), dtype=torch.float32, device=segm_output.device)
    recorder.vllm_triton_op(
        "merge_mla_segments_triton",
        segm_output,
        segm_output,
        output,
        tile_size=int(tile_size),
        num_rows=int(seq_lens.numel()),
        tensors={"segm_max": segm_max, "segm_expsum": segm_expsum, "seq_lens": seq_lens, "lse": lse},
    )
    return output, lse
