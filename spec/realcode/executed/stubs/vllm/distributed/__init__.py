"""Stub ``vllm.distributed``: re-exports the parallel-state groups (vLLM: ``from .parallel_state import *``).

rocm_aiter_mla.py imports ``get_dcp_group`` from here at module level from
0.29.0 (L14; 0.34.0 L17).  The groups are :mod:`vllm.distributed.parallel_state`'s.
"""

from mla_spec_stub import strict

from vllm.distributed.parallel_state import GroupCoordinator, get_dcp_group, get_tp_group

__all__ = ["GroupCoordinator", "get_dcp_group", "get_tp_group"]

__getattr__ = strict("vllm.distributed")
