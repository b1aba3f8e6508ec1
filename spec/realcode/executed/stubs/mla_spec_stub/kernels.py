"""vLLM's own Triton kernels on a machine without a GPU: torch renderings, one per kernel name.

Each rendering restates one ``@triton.jit`` kernel of rocm_aiter_mla.py
exactly (same arguments, same stores); ``tests/test_executed_harness.py``
runs the release's kernel in Triton's interpreter where Triton is installed
and compares.  A kernel with no rendering here is refused by name.
"""

from __future__ import annotations

import os
from typing import Any

from mla_spec_stub import StubMissing


def use_real_triton() -> bool:
    """Real Triton only where it can launch: a GPU is visible and Triton imports."""
    if os.environ.get("MLA_SPEC_REAL_TRITON") == "0":
        return False
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _expand_page_indices_kernel(grid: Any, args: tuple, kwargs: dict) -> None:
    """vLLM 0.27.0+ rocm_aiter_mla.py ``_expand_page_indices_kernel``: block table -> flat token indices.

    Program ``r`` writes ``page_indices[cu[r] + t] = block_table[r, t // K] * K + t % K``
    for ``t < seq_lens[r]``.
    """
    import torch

    page_indices, block_table, stride, cu_num_tokens, seq_lens = args[:5]
    k = int(kwargs["KERNEL_BLOCK_SIZE"])
    rows = int(grid[0])
    flat_table = block_table.reshape(-1)
    for r in range(rows):
        n = int(seq_lens[r])
        if n <= 0:
            continue
        t = torch.arange(n, device=page_indices.device)
        ids = flat_table[r * int(stride) + t // k]
        start = int(cu_num_tokens[r])
        page_indices[start:start + n] = (ids * k + t % k).to(page_indices.dtype)


RENDERINGS = {"_expand_page_indices_kernel": _expand_page_indices_kernel}


def launch(name: str, grid: Any, args: tuple, kwargs: dict) -> None:
    if name not in RENDERINGS:
        raise StubMissing(f"the release launches the Triton kernel {name}, which has no CPU rendering in the harness")
    grid = grid if isinstance(grid, tuple) else (grid,)
    RENDERINGS[name](grid, args, kwargs)
