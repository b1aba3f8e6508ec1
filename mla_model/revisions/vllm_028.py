"""Gate revision ``vllm-0.28``: vLLM 0.28.0, the first release with #51011.

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.28.0
(54,629 B, md5 65e2645d) = PR #51011 merged as 37fbf520 (2026-08-10) on top of
#50578 (sources §15, §20-§24).  Line numbers below
are that file's.
"""

from __future__ import annotations

from typing import Any

from mla_model.derived import is_quantized_kv_cache, reorder_batch_threshold
from mla_model.logic import Term, all_of, any_of, choose, eq, ne, not_
from mla_model.registry import Registry
from mla_model.revisions.base import (
    ASM_PADDED_MAX_PS_QLEN,
    divides_16,
    on_gfx950,
    pre_dcp_revision,
    pre_dcp_route,
)
from mla_model.route import Route
from mla_model.shape import KV_CACHE_DTYPES


def use_gluon_decode(num_heads: Term, max_qo_len: Term, kv_cache_dtype: Term, s: Any) -> Term:
    """L909.  Order in code: heads/qlen, then the dtype guard, then the mode knob."""
    mode = s.asm_padding_mode
    return all_of(
        num_heads < 16,
        max_qo_len == 1,
        not_(is_quantized_kv_cache(kv_cache_dtype)),
        ne(mode, "asm"),
        on_gfx950(s),  # _gluon_mla_decode_supported()
        any_of(eq(mode, "gluon"), divides_16(num_heads)),
    )


def use_gluon_verify(num_heads: Term, max_qo_len: Term, kv_cache_dtype: Term, s: Any) -> Term:
    """L931, hoisted from forward_mqa so the builder and the impl agree; no divisor test."""
    return all_of(
        num_heads < 16,
        max_qo_len > 1,
        not_(is_quantized_kv_cache(kv_cache_dtype)),
        ne(s.asm_padding_mode, "asm"),
        on_gfx950(s),  # _gluon_mla_decode_supported()
    )


def builder_kv_cache_dtype(s: Any) -> Term:
    """``self._kv_cache_dtype_str``: fp8_e4m3 and fp8_e5m2 become "fp8"."""
    return choose(
        KV_CACHE_DTYPES,
        [
            (is_quantized_kv_cache(s.kv_cache_dtype), "fp8"),
            (eq(s.kv_cache_dtype, "float16"), "float16"),
            (eq(s.kv_cache_dtype, "bfloat16"), "bfloat16"),
        ],
        "auto",
    )


def route(s: Any, reg: Registry) -> Route:
    heads, qlen = s.num_heads, s.max_qo_len
    builder_dtype = builder_kv_cache_dtype(s)
    # _build_decode (builder side, normalised dtype string)
    gd = use_gluon_decode(heads, qlen, builder_dtype, s)
    builder_gv = use_gluon_verify(heads, qlen, builder_dtype, s)
    mtp_decode_qlen = reorder_batch_threshold(s)  # L276: self.reorder_batch_threshold or 1
    wants = all_of(  # L698
        not_(gd),
        not_(builder_gv),
        any_of(heads >= 16, qlen <= ASM_PADDED_MAX_PS_QLEN, is_quantized_kv_cache(builder_dtype)),
    )
    # forward_mqa (impl side, raw dtype string)
    gv = use_gluon_verify(heads, qlen, s.kv_cache_dtype, s)
    return pre_dcp_route(s, gd, gv, wants, mtp_decode_qlen, builder_gv=builder_gv)


REVISION = pre_dcp_revision(
    id="vllm-0.28",
    title="vLLM 0.28.0 = PR #51011",
    source="vllm==0.28.0 rocm_aiter_mla.py (md5 65e2645d), L276, L698, L909, L931",
    route=route,
)
