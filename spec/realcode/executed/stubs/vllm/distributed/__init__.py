"""Stub ``vllm.distributed.get_dcp_group`` (vllm/distributed/parallel_state.py, 0.29.0 L1534, 0.34.0 L1632).

rocm_aiter_mla.py imports it at module level from 0.29.0 (L14; 0.34.0 L17) and
reads ``world_size`` (0.34.0's MLACommonMetadataBuilder) and ``rank_in_group``
(only when ``dcp_world_size > 1``, 0.34.0 L1116).  The group answers the
world size of the config being built (``parallel_config.decode_context_parallel_size``
of :data:`vllm.config._current`) and rank 0.  DCP > 1 is not driven.
"""

from mla_spec_stub import StubMissing, strict

__getattr__ = strict("vllm.distributed")


class _DCPGroup:
    rank_in_group = 0

    @property
    def world_size(self) -> int:
        from vllm.config import get_current_vllm_config_or_none

        config = get_current_vllm_config_or_none()
        if config is None:
            raise StubMissing("get_dcp_group() reached before the harness set a VllmConfig")
        return int(config.parallel_config.decode_context_parallel_size)


def get_dcp_group() -> _DCPGroup:
    return _DCPGroup()
