"""Stub ``vllm.distributed.parallel_state``: the groups one simulated rank asks for, no collectives.

vLLM defines ``GroupCoordinator`` (vllm/distributed/parallel_state.py, 0.34.0
L427: ``rank``, ``ranks``, ``world_size``, ``rank_in_group``, ``local_rank``,
the collectives), ``get_tp_group`` (L1598) and ``get_dcp_group`` (L1632), each
asserting that its group was initialised; ``vllm.distributed`` re-exports them
(``from .parallel_state import *``).  rocm_aiter_mla.py imports
``get_dcp_group`` from 0.29.0 (0.34.0 L17); 0.34.0's MLA layer imports both at
module level (mla_attention.py L228-231), and its shipped DCP tests patch them
there (test_rocm_aiter_mla_dcp_cprr_numerics.py, _verify_gfx942.py).

* ``get_dcp_group()``: the world size of the config being built
  (``parallel_config.decode_context_parallel_size`` of the current
  ``VllmConfig``) and rank ``STATE.dcp_rank`` (0 unless the DCP replay,
  :mod:`conformance.dcp_replay`, runs another rank).
* ``get_tp_group()``: the harness drives no tensor parallelism; the group
  exists (tests save and patch the name), reading anything of it is a
  harness fault naming what was read.
* Collectives (``all_gather``) are never run: calling one is a harness fault.
"""

from typing import Any

from mla_spec_stub import StubMissing, strict

__getattr__ = strict("vllm.distributed.parallel_state")


class GroupCoordinator:
    """vLLM's process-group wrapper, as far as a single simulated rank reads it (0.34.0 L427)."""

    def all_gather(self, input_: Any, dim: int = -1) -> Any:
        raise StubMissing("the release reaches GroupCoordinator.all_gather, which the harness does not stub")


class _DCPGroup(GroupCoordinator):
    @property
    def rank_in_group(self) -> int:
        """The rank being simulated (``STATE.dcp_rank``: 0 unless conformance.dcp_replay sets it)."""
        from mla_spec_stub import STATE

        return STATE.dcp_rank

    @property
    def world_size(self) -> int:
        from vllm.config import get_current_vllm_config_or_none

        config = get_current_vllm_config_or_none()
        if config is None:
            raise StubMissing("get_dcp_group() reached before the harness set a VllmConfig")
        return int(config.parallel_config.decode_context_parallel_size)


class _TPGroup(GroupCoordinator):
    def __getattr__(self, name: str) -> Any:
        raise StubMissing(f"the release reaches get_tp_group().{name}, which the harness does not stub")


def get_dcp_group() -> GroupCoordinator:
    return _DCPGroup()


def get_tp_group() -> GroupCoordinator:
    return _TPGroup()
