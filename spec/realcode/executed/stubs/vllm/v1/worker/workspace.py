"""Stub ``vllm.v1.worker.workspace`` (vllm/v1/worker/workspace.py): a manager that hands out zeroed scratch.

Reached only on paths the harness does not drive (prefill); decode reaches it
in 0.33+ for the Triton verify workspace (0.34.0 L531-546, L3366-3369).  As
vLLM's shared workspace does, it hands out uninitialised storage: reservations
(whose result the release drops) cost no memory traffic.
"""

import torch
from mla_spec_stub import STATE, StubMissing, strict

__getattr__ = strict("vllm.v1.worker.workspace")


class _Workspace:
    def get_simultaneous(self, *specs):
        """On the worker's device, as vLLM's manager (made with it) allocates: on a GPU, the release's
        Triton verify reads this scratch (0.34.0 L3366-3369; a CPU tensor there was 'Pointer argument
        cannot be accessed from Triton' on the H200)."""
        return [torch.empty(shape, dtype=dtype, device=STATE.device) for shape, dtype in specs]

    def reserve_simultaneous(self, *specs):
        return None


def current_workspace_manager():
    return _Workspace()


def is_workspace_manager_initialized() -> bool:
    return True


def init_workspace_manager(*args, **kwargs):
    """vllm/v1/worker/workspace.py 0.34.0 L352; 0.34.0's shipped DCP tests import it, and call it only
    where :func:`is_workspace_manager_initialized` says False, which the harness's never does."""
    raise StubMissing("the release reaches init_workspace_manager; the harness's workspace is always set up")
