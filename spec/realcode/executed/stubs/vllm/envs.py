"""Stub ``vllm.envs``: ``VLLM_ROCM_AITER_MLA_ASM_PADDING`` (vllm/envs.py, 0.28.0+; default "auto").

The harness sets the mode per shape; every other environment knob is refused.
"""

from mla_spec_stub import STATE, StubMissing


def __getattr__(name: str):
    if name == "VLLM_ROCM_AITER_MLA_ASM_PADDING":
        return STATE.asm_padding_mode
    if name.startswith("__"):
        raise AttributeError(name)
    raise StubMissing(f"the release reaches vllm.envs.{name}, which the harness does not stub")
