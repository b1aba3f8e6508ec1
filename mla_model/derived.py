"""Values the engine derives from a Shape before the backend routes it (sources §1-§14).

Written with :mod:`mla_model.logic`, so each works on one Shape, on numpy
arrays of shapes and on the prover's symbolic shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mla_model.logic import (
    Term,
    all_of,
    choose,
    eq,
    if_then_else,
    iff,
    implies,
    is_in,
    maximum,
    ne,
    not_,
    product,
)
from mla_model.shape import DCP_WORLD_SIZES, FP8_KV_CACHE_DTYPES

# MLA checkpoints carry at most 128 query heads (DeepSeek-V3/R1 128, Kimi-K3 96,
# Kimi-K2 64), so the heads one rank decodes, after any DCP gather, are <= 128
# (sources §3: H_rank in [1, 128]).
MAX_MLA_QUERY_HEADS = 128

# Drafters that force SpeculativeConfig.parallel_drafting (vllm/config/speculative.py,
# sources §5).  The user-settable flag defaults to False and is not modelled.
PARALLEL_DRAFTING_METHODS = ("dflash", "dspark")

# Kernel-side dtype names (AITER's q_type/kv_type): the builder maps every fp8
# cache dtype to aiter.dtypes.fp8, and "auto" is the bf16 model dtype.
KERNEL_KV_DTYPES = ("bf16", "fp16", "fp8")


def is_quantized_kv_cache(kv_cache_dtype: Term) -> Term:
    """vLLM ``is_quantized_kv_cache``: exactly the fp8 spellings for this backend."""
    return is_in(kv_cache_dtype, FP8_KV_CACHE_DTYPES)


def spec_configured(s: Any) -> Term:
    return ne(s.spec_method, "none")


def parallel_drafting(s: Any) -> Term:
    return is_in(s.spec_method, PARALLEL_DRAFTING_METHODS)


def reorder_batch_threshold(s: Any, supports_dcp_with_varlen: Term = False) -> Term:
    """``_init_reorder_batch_threshold`` (vllm/v1/attention/backend.py, sources §6).

    ``max(1, 1 + (2 if parallel_drafting else 1) * k)`` when a drafter is
    configured, else 1; forced to 1 when DCP > 1 and the builder does not
    support DCP with varlen queries.
    """
    k = s.num_spec_tokens
    drafted = 1 + if_then_else(parallel_drafting(s), 2 * k, k)
    rbt = if_then_else(spec_configured(s), maximum(drafted, 1), 1)
    return if_then_else(all_of(s.dcp_world_size > 1, not_(supports_dcp_with_varlen)), 1, rbt)


def reorder_batch_threshold_031(s: Any, supports_dcp_with_varlen: Term = False) -> Term:
    """``_init_reorder_batch_threshold`` of vLLM 0.31.0-0.33.0 with the V2 model runner.

    The threshold is ``max_decode_query_len`` (0.31.0 vllm/v1/attention/backend.py
    L579-597; sources §7): ``1 + k``, plus ``k`` more for a parallel drafter only on the V1
    model runner.  V2 is the default (``VllmConfig.use_v2_model_runner``,
    0.31.0 vllm/config/vllm.py L701-760) unless ``VLLM_USE_V2_MODEL_RUNNER=0``,
    Triton is missing or V2 lacks a feature; in 0.31.0 only, ROCm also keeps
    DeepseekV32/DeepseekV4/GlmMoeDsa on V1 (L75-77; 0.32.0 and 0.33.0 default to V2
    for every architecture, sources §7).  V1 deployments keep 0.30's ``1 + 2k``
    and are outside this revision's scope.
    """
    rbt = if_then_else(spec_configured(s), maximum(1 + s.num_spec_tokens, 1), 1)
    return if_then_else(all_of(s.dcp_world_size > 1, not_(supports_dcp_with_varlen)), 1, rbt)


def reorder_batch_threshold_034(s: Any, supports_dcp_with_varlen: Term = False) -> Term:
    """``_init_reorder_batch_threshold`` of vLLM 0.34.0 (vllm/v1/attention/backend.py L652-683).

    The spec-as-decode threshold is ``max_decode_query_len`` (L565-583):
    ``1 + k + max_num_new_slots_for_drafting``, which the speculator configs set
    to 1 for ``draft_model`` (vllm/v1/worker/gpu/spec_decode/standalone_ar/config.py
    L24-26) and 0 for every other method (speculator_config.py L128-130).  A
    parallel drafter (dflash, dspark) no longer doubles k: it drafts in a
    separate query pass.  Forced to 1 under DCP as before.  Found by the
    executed differential (docs/fidelity.md): 0.34's revision had kept 0.28's
    ``1 + 2k``.
    """
    k = s.num_spec_tokens
    drafted = 1 + k + if_then_else(eq(s.spec_method, "draft_model"), 1, 0)
    rbt = if_then_else(spec_configured(s), maximum(drafted, 1), 1)
    return if_then_else(all_of(s.dcp_world_size > 1, not_(supports_dcp_with_varlen)), 1, rbt)


def dcp_decode_heads(s: Any) -> Term:
    """``_decode_num_heads`` of vLLM >= 0.29: heads per rank times the DCP size."""
    return product(s.dcp_world_size, s.num_heads, a_hint=DCP_WORLD_SIZES)


def kernel_kv_dtype(s: Any) -> Term:
    """The KV dtype AITER sees: fp8 for every fp8 spelling, fp16 for float16, else bf16."""
    return choose(
        KERNEL_KV_DTYPES,
        [(is_quantized_kv_cache(s.kv_cache_dtype), "fp8"), (eq(s.kv_cache_dtype, "float16"), "fp16")],
        "bf16",
    )


def engine_rules(reorder_batch_threshold: Callable[[Any], Term]) -> list[tuple[str, Callable[[Any], Term]]]:
    """The rules the engine enforces before the backend sees a shape, as ``(name, shape -> term)``."""
    return [
        (
            "a drafter iff speculative tokens",
            lambda s: iff(eq(s.spec_method, "none"), s.num_spec_tokens == 0),
        ),
        (
            "scheduler: 1 <= max_qo_len <= reorder_batch_threshold",
            lambda s: all_of(s.max_qo_len >= 1, s.max_qo_len <= reorder_batch_threshold(s)),
        ),
        (
            "fp8 query only with an fp8 KV cache",
            lambda s: implies(eq(s.q_dtype, "fp8"), is_quantized_kv_cache(s.kv_cache_dtype)),
        ),
        ("a Gluon build runs only on gfx950", lambda s: implies(s.gluon_build, eq(s.arch, "gfx950"))),
        (
            "at most 128 MLA query heads after the DCP gather",
            lambda s: dcp_decode_heads(s) <= MAX_MLA_QUERY_HEADS,
        ),
    ]
