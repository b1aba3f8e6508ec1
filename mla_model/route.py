"""What a gate revision decides for one decode step: the :class:`Route`.

A Route's fields are plain values for one Shape, numpy arrays for a sweep and
z3 terms for the prover (see :mod:`mla_model.logic`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from mla_model.logic import EnumTerm, Term

# Where forward_mqa sends the step, in vLLM's own order of tests.
PATHS = (
    "gluon_decode",  # AITER Gluon kernel, one query token (use_gluon_decode)
    "gluon_verify",  # AITER Gluon kernel, multi-token verify (use_gluon_verify)
    "triton_verify",  # vLLM >= 0.34 CDNA3 causal verify on a Triton kernel
    "triton_dcp_verify",  # vLLM >= 0.33 DCP causal verify on gfx942, vLLM's split-KV Triton decode (row view)
    "segmented_dcp_verify",  # vLLM >= 0.29 DCP causal verify on AITER's segmented Triton MLA (row view)
    "asm_persistent",  # AITER ASM kernel with vLLM's persistent work metadata
    "asm_nonpersistent",  # AITER ASM kernel, AITER computes its own split metadata
)
GLUON_PATHS = ("gluon_decode", "gluon_verify")
ASM_PATHS = ("asm_persistent", "asm_nonpersistent")
# The paths whose forward_mqa returns the softmax LSE the DCP merge needs: the ASM call with return_lse and
# the two row-view DCP verifies (vLLM 0.34.0 L3226-3336, L3680); Gluon and the non-DCP Triton verify return
# None.
LSE_PATHS = ("triton_dcp_verify", "segmented_dcp_verify", *ASM_PATHS)

# vLLM's _DCPDecodeRoute (0.31.0 on; 0.29/0.30 have only the segmented flag): a step's DCP decode route.
DCP_ROUTES = ("plain", "segmented", "cprr", "triton")

# How get_mla_padded_q brings the query to the kernel's head count.
HEAD_PADDINGS = ("none", "repeat_interleave", "tile")
# How forward_mqa cuts the kernel's output (and LSE) back to the decode heads: nothing, every (m // h)-th
# head (get_mla_unpadded_o's stride slice), or the first h heads (its prefix, and the CPRR route's own
# ``o[:, :h]``; sources §61).
HEAD_UNPADS = ("none", "stride", "prefix")
# The unpad that undoes each padding: what get_mla_unpadded_o does after get_mla_padded_q (0.28.0 L877-906,
# 0.34.0 L2510-2552).
UNPAD_OF_PADDING = {"none": "none", "repeat_interleave": "stride", "tile": "prefix"}


@dataclass(frozen=True)
class KernelRequest:
    """What vLLM hands ``aiter.mla.mla_decode_fwd`` on an ASM path."""

    q_dtype: Term  # "bf16" | "fp8"
    kv_dtype: Term  # "bf16" | "fp16" | "fp8"
    padded_heads: Term  # m: the head count the kernel is launched with
    kernel_qlen: Term  # Q': max_seqlen_q passed to AITER
    persistent: Term  # vLLM passes work metadata (use_persistent_metadata)
    causal: Term  # the causal flag AITER sees (True where vLLM does not pass one)
    lse: Term = False  # vLLM asks for the LSE (return_lse=True: every ASM call under DCP)
    cprr: Term = False  # vLLM passes g_kv_indptr: AITER's round-robin context-parallel kernel (CPRR route)


@dataclass(frozen=True)
class Route:
    """The routing decision of one gate revision for one decode step."""

    path: Term  # one of PATHS
    use_gluon_decode: Term
    use_gluon_verify: Term
    use_persistent_metadata: Term  # the builder's persistent-metadata gate
    wants_persistent_metadata: Term  # that gate without its 1 <= qlen <= _mtp_decode_qlen clause
    mtp_decode_qlen: Term  # _mtp_decode_qlen: the longest qlen the persistent gate admits
    decode_heads: Term  # the head count the predicates are called with
    head_padding: Term  # one of HEAD_PADDINGS
    padded_q_heads: Term  # heads after get_mla_padded_q (equals padded_heads when correct)
    head_unpad: Term  # one of HEAD_UNPADS: how the output comes back (undoes head_padding when correct)
    request: KernelRequest
    gluon_batch_is_one: Term  # the Gluon kernel sees batch size 1 (the verify flatten makes R*Q rows)
    kv_scale_passed: bool  # the cache's KV scale reaches a Gluon kernel (False: hard-coded 1.0)
    vllm_raises: Term  # vLLM itself raises before any kernel runs
    builder_use_gluon_verify: Term = None  # None where the builder never evaluates verify
    # vLLM multiplies the ASM output by the cache's k_scale after the kernel (0.34.0's fp8_v_scale_fix):
    # right where the kernel left V unscaled, a second scaling where it did not (sources §57).
    v_scale_fix: Term = False
    dcp_route: Term = "plain"  # one of DCP_ROUTES
    # the longest qlen the builder's __init__ sizes the persistent buffers for (get_mla_metadata_info_v1's
    # max_seqlen_qo, the largest over its calls); None: they cover _mtp_decode_qlen, as every release sizes
    # them (0.28.0 L343-351, 0.34.0 L1256-1273).  Read from the file on a real revision.
    metadata_qlen: Term = None
    # vLLM raises while building the metadata builder (0.33.0+: DCP verify with no cprr head count and no
    # segmented MLA) or picking the DCP route (no route serves a DCP multi-token step)
    dcp_raises: Term = False

    @property
    def sized_qlen(self) -> Term:
        """The longest qlen the persistent buffers cover: :attr:`metadata_qlen`, else _mtp_decode_qlen."""
        return self.mtp_decode_qlen if self.metadata_qlen is None else self.metadata_qlen

    def to_json(self) -> dict[str, Any]:
        """The route of one concrete Shape as JSON-ready plain values."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "metadata_qlen" and value is None:  # a model revision's: the buffers cover T
                continue
            if isinstance(value, KernelRequest):
                out[f.name] = {g.name: _plain(getattr(value, g.name)) for g in fields(value)}
            else:
                out[f.name] = _plain(value)
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, EnumTerm):
        raise TypeError("to_json needs a concrete route (evaluate on a Shape)")
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return value
