"""Stub ``vllm.envs``: the environment knobs rocm_aiter_mla.py reads, nothing else.

* ``VLLM_ROCM_AITER_MLA_ASM_PADDING`` (vllm/envs.py 0.28.0+; 0.34.0 L155):
  the shape's ``asm_padding_mode``, set by the harness per shape.
* ``VLLM_ROCM_AITER_MLA_DCP_VERIFY`` (0.31.0 L148 "segmented", 0.32.0 L149
  "auto"; read by rocm_aiter_mla.py 0.31.0 L610, 0.32.0 L617) and
  ``VLLM_BATCH_INVARIANT`` (0.34.0 L95; read L517, L3302): the release's
  declared default, read from the ``if TYPE_CHECKING:`` block of its
  vllm/envs.py (the harness child runs with no ``VLLM_*`` variable set).

Every other knob is refused by name.
"""

import functools

from mla_spec_stub import STATE, StubMissing

_RELEASE_DEFAULTS = ("VLLM_ROCM_AITER_MLA_DCP_VERIFY", "VLLM_BATCH_INVARIANT")


@functools.cache
def _declared_default(name: str):
    from spec.realcode.source import declared_env_default

    try:
        return declared_env_default(STATE.tree / "vllm/envs.py", name)
    except KeyError:
        raise StubMissing(
            f"the release reaches vllm.envs.{name}, which its vllm/envs.py does not declare"
        ) from None


def __getattr__(name: str):
    if name == "VLLM_ROCM_AITER_MLA_ASM_PADDING":
        return STATE.asm_padding_mode
    if name in _RELEASE_DEFAULTS:
        return _declared_default(name)
    if name.startswith("__"):
        raise AttributeError(name)
    raise StubMissing(f"the release reaches vllm.envs.{name}, which the harness does not stub")
