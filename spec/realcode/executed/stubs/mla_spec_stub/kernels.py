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


def _expand_page_indices_kernel(grid: tuple, a: dict[str, Any]) -> None:
    """rocm_aiter_mla.py ``_expand_page_indices_kernel`` (every release's form): block table -> token indices.

    Program ``r`` (and, 0.32.0+, chunk ``c`` of ``BLOCK_SIZE`` tokens, grid
    axis 1) writes ``page_indices[cu[r] + t] = block_table[r, p // K] * K + p % K``
    with ``K = KERNEL_BLOCK_SIZE`` for each token ``t`` it covers, where:

    * the token count is ``seq_lens[r]`` (0.27.0-0.28.0, L790-826 of 0.28.0)
      or ``cu[r + 1] - cu[r]`` (0.29.0+, L1157 of 0.29.0);
    * the table is read at ``r * stride_0 + (p // K) * stride_1``
      (``block_table_stride_1`` from 0.32.0, L1600; 1 before);
    * ``p = t``, or ``0`` past ``num_real_tokens[r]`` under ``CLAMP_TAIL``
      (0.33.0 L1909), plus ``start_offsets[r]`` under ``HAS_START_OFFSETS``
      (0.34.0 L2313).
    """
    import torch

    page_indices, block_table = a["page_indices"], a["block_table"]
    k, block = int(a["KERNEL_BLOCK_SIZE"]), int(a["BLOCK_SIZE"])
    stride_0 = int(a.get("block_table_stride", a.get("block_table_stride_0")))
    stride_1 = int(a.get("block_table_stride_1", 1))
    rows = int(grid[0])
    cu = a["cu_num_tokens"][: rows + 1].tolist()
    counts = a["seq_lens"][:rows].tolist() if "seq_lens" in a else [b - e for e, b in zip(cu, cu[1:])]
    if len(grid) > 1:
        counts = [min(n, int(grid[1]) * block) for n in counts]
    counts = [max(n, 0) for n in counts]
    # Every program's tokens at once: token t of row r is written at cu[r] + t.
    device = page_indices.device
    n = torch.tensor(counts, dtype=torch.long, device=device)
    row = torch.repeat_interleave(torch.arange(rows, device=device), n)
    first = torch.cumsum(n, 0) - n  # each row's first position in the concatenation
    t = torch.arange(int(n.sum()), device=device) - first[row]
    p = t
    if a.get("CLAMP_TAIL"):
        p = torch.where(t < a["num_real_tokens"][:rows].to(device)[row], t, torch.zeros_like(t))
    if a.get("HAS_START_OFFSETS"):
        p = p + a["start_offsets"][:rows].to(device)[row]
    ids = block_table.reshape(-1)[row * stride_0 + torch.div(p, k, rounding_mode="floor") * stride_1]
    starts = torch.tensor(cu[:rows], dtype=torch.long, device=device)
    page_indices[starts[row] + t] = (ids * k + p % k).to(page_indices.dtype)


RENDERINGS = {"_expand_page_indices_kernel": _expand_page_indices_kernel}
# The 0.27.0-0.28.0 parameter list, for callers that name a kernel without its function.
_DEFAULT_PARAMS = {
    "_expand_page_indices_kernel": (
        "page_indices",
        "block_table",
        "block_table_stride",
        "cu_num_tokens",
        "seq_lens",
    )
}


def launch(name: str, grid: Any, args: tuple, kwargs: dict, params: tuple[str, ...] | None = None) -> None:
    """Run the rendering of kernel ``name``; ``params`` are the release kernel's parameter names, in order."""
    if name not in RENDERINGS:
        raise StubMissing(
            f"the release launches the Triton kernel {name}, which has no CPU rendering in the harness"
        )
    grid = grid if isinstance(grid, tuple) else (grid,)
    names = params if params is not None else _DEFAULT_PARAMS[name]
    bound = {**dict(zip(names, args)), **kwargs}
    RENDERINGS[name](grid, bound)
