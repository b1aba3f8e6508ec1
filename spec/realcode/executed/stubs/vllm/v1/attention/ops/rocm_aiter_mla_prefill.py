"""Stub ``vllm.v1.attention.ops.rocm_aiter_mla_prefill`` (rocm_aiter_mla.py 0.33.0 L47-51, 0.34.0 L51-55).

``context_row_indices``, ``expand_context`` and ``gather_compressed_context``
serve chunked-prefill context (vllm/v1/attention/ops/rocm_aiter_mla_prefill.py
0.34.0 L14/L39/L72); decode never reaches them, and reaching one is a harness
fault (:class:`mla_spec_stub.StubMissing`), never a silent answer.
"""

from mla_spec_stub import StubMissing, strict

__getattr__ = strict("vllm.v1.attention.ops.rocm_aiter_mla_prefill")


def _prefill_only(name):
    def refuse(*args, **kwargs):
        raise StubMissing(f"the release reaches the prefill op {name}, which the harness does not drive")

    refuse.__name__ = name
    return refuse


context_row_indices = _prefill_only("context_row_indices")
expand_context = _prefill_only("expand_context")
gather_compressed_context = _prefill_only("gather_compressed_context")
