"""Stub ``vllm.v1.attention.ops.rocm_aiter_mla_prefill`` (rocm_aiter_mla.py 0.33.0 L47-51, 0.34.0 L51-55).

``context_row_indices``, ``expand_context`` and ``gather_compressed_context``
serve chunked-prefill context (vllm/v1/attention/ops/rocm_aiter_mla_prefill.py
0.34.0 L14/L39/L72); decode never reaches them, and reaching one is a harness
fault (:class:`mla_spec_stub.StubMissing`), never a silent answer.
"""

from mla_spec_stub import StubMissing, prefill_only, strict

__getattr__ = strict("vllm.v1.attention.ops.rocm_aiter_mla_prefill")


context_row_indices = prefill_only(what="op", name="context_row_indices")
expand_context = prefill_only(what="op", name="expand_context")
gather_compressed_context = prefill_only(what="op", name="gather_compressed_context")
