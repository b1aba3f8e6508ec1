"""Stub ``vllm.v1.attention.ops.dcp``: decode-context-parallel ops, outside the AITER MLA backend.

Added for ``mla-spec vllm-tests``: 0.34.0's shipped ``test_rocm_aiter_mla_mtp_split.py``
imports ``CPTritonContext`` and ``correct_attn_out`` (vllm/v1/attention/ops/dcp.py 0.34.0
L363, L376-436: the LSE correction of DCP shard outputs, a Triton kernel) at module level;
one test calls them.  Its ``test_rocm_aiter_mla_dcp_cprr_numerics.py`` also imports
``mask_dcp_empty_shards_`` (L72) inside a test.  The stubs do not restate DCP: the names
exist so the files can be collected, and using any refuses, by name, so only the items
that need DCP end as not runnable.  Every other name of the module is refused as well.
"""

from mla_spec_stub import StubMissing, strict

__getattr__ = strict("vllm.v1.attention.ops.dcp")


def _refuse(name: str) -> StubMissing:
    return StubMissing(
        f"the release reaches vllm.v1.attention.ops.dcp.{name} (DCP, outside the backend), "
        "which the harness does not stub"
    )


class CPTritonContext:
    """vllm/v1/attention/ops/dcp.py L363: refused on construction."""

    def __init__(self, *args, **kwargs):
        raise _refuse("CPTritonContext")


def correct_attn_out(*args, **kwargs):
    """vllm/v1/attention/ops/dcp.py L376: refused on call."""
    raise _refuse("correct_attn_out")


def mask_dcp_empty_shards_(*args, **kwargs):
    """vllm/v1/attention/ops/dcp.py L72: refused on call."""
    raise _refuse("mask_dcp_empty_shards_")
