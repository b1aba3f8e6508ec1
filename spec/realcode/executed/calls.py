"""What a recorded AITER call asks for, read back from the record (the recorder's format,
``mla_spec_stub.recorder``): one reading for the recorder itself, the replay kernel and the tests."""

from __future__ import annotations

from typing import Any

from mla_model.route import KernelRequest


def asm_request(call: dict[str, Any]) -> KernelRequest:
    """The ASM request of a recorded ``mla_decode_fwd`` call, as vLLM made it (no ``causal`` passed: the
    causal default AITER takes; ``return_lse`` and ``g_kv_indptr`` as the DCP path passes them)."""
    return KernelRequest(
        q_dtype=call["q_dtype"],
        kv_dtype=call["kv_dtype"],
        padded_heads=call["q_shape"][1],
        kernel_qlen=call["max_seqlen_q"],
        persistent=call["persistent"],
        causal=True if call.get("causal") is None else bool(call["causal"]),
        lse=bool(call.get("return_lse", False)),
        cprr="g_kv_indptr" in call.get("extra", ()),
    )
