"""Gate revision ``vllm-0.34``: vLLM 0.34.0, the newest release (2026-11-16).

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.34.0
(152,929 B, md5 f39fa31e; vllm_releases.md §3 revision d5; facts §2(c)).
Line numbers below are that file's.

Scope: the non-DCP paths (``dcp_world_size == 1``), with ``causal``, the 2 GiB
KV-cache bound on Gluon and the CDNA3 Triton verify.  The DCP decode routes
(CPRR, segmented, Triton DCP) are not modelled yet; shapes with DCP > 1 are
outside this revision's scope and ``mla-spec list`` says so.
"""

from __future__ import annotations

from typing import Any

from mla_model.derived import dcp_decode_heads, is_quantized_kv_cache, parallel_drafting, reorder_batch_threshold
from mla_model.logic import all_of, any_of, ceil_to_multiple, eq, if_then_else, implies, is_in, ne, not_
from mla_model.registry import Registry
from mla_model.revisions.base import (
    _ASM_PADDED_MAX_PS_QLEN, Revision, Rule, asm_request, divides_16, divides_padded, forward_path, padding_of,
)
from mla_model.route import Route

_AITER_MAX_PADDED_MLA_HEADS = 128
_GLUON_MAX_KV_CACHE_BYTES = 1 << 31
# Padded head counts with a non-causal fp8 qlen-2 fold in AITER.
_AITER_FP8_NON_CAUSAL_QLEN2_HEADS = (32, 64, 96, 128)


def is_valid_num_heads(num_heads: Any) -> Any:
    """``h > 0 and h not in () and (h <= 128 or h % 16 == 0)``."""
    return all_of(num_heads > 0, any_of(num_heads <= _AITER_MAX_PADDED_MLA_HEADS, num_heads % 16 == 0))


def get_actual_mla_num_heads(num_heads: Any, reg: Registry) -> Any:
    """``24 if h == 24 and _aiter_mla_native_h24_supported() else ceil(h / 16) * 16``."""
    return if_then_else(all_of(num_heads == 24, reg.native_h24), 24, ceil_to_multiple(num_heads, 16))


def _gluon_mla_decode_supported(s: Any) -> Any:
    """``on_gfx950()`` only: 0.34.0 has no Triton compile probe."""
    return eq(s.arch, "gfx950")


def _gluon_kv_cache_in_bounds(kv_cache_bytes: Any) -> Any:
    """Gluon drops its KV bounds mask past 2 GiB per layer."""
    return kv_cache_bytes <= _GLUON_MAX_KV_CACHE_BYTES


def use_gluon_decode(num_heads: Any, max_qo_len: Any, kv_cache_dtype: Any, kv_cache_bytes: Any, s: Any) -> Any:
    """L2555."""
    mode = s.asm_padding_mode
    return all_of(
        num_heads < 16,
        max_qo_len == 1,
        not_(is_quantized_kv_cache(kv_cache_dtype)),
        ne(mode, "asm"),
        _gluon_mla_decode_supported(s),
        any_of(eq(mode, "gluon"), divides_16(num_heads)),
        _gluon_kv_cache_in_bounds(kv_cache_bytes),
    )


def use_gluon_verify(num_heads: Any, max_qo_len: Any, kv_cache_dtype: Any, dcp_world_size: Any, causal: Any,
                     kv_cache_bytes: Any, s: Any) -> Any:
    """L2584: native 4-D Gluon MTP for causal, non-DCP, unquantized small-head verify."""
    return all_of(
        causal,
        max_qo_len > 1,
        dcp_world_size <= 1,
        not_(is_quantized_kv_cache(kv_cache_dtype)),
        num_heads < 16,
        _gluon_mla_decode_supported(s),
        ne(s.asm_padding_mode, "asm"),
        _gluon_kv_cache_in_bounds(kv_cache_bytes),
    )


def _asm_causal_verify_unsupported(mtp_decode_qlen: Any, kv_cache_dtype: Any, dcp_world_size: Any, m: Any,
                                   s: Any) -> Any:
    """CDNA3 has no correct ASM causal verify past qlen 4 except fp8 at 128 heads (ROCm/aiter#5679)."""
    return all_of(
        dcp_world_size == 1,
        mtp_decode_qlen > 4,
        eq(s.arch, "gfx942"),
        implies(is_quantized_kv_cache(kv_cache_dtype), m != 128),
    )


def route(s: Any, reg: Registry) -> Route:
    heads = dcp_decode_heads(s)  # self._decode_num_heads
    qlen, dtype, causal = s.max_qo_len, s.kv_cache_dtype, s.causal
    fp8 = is_quantized_kv_cache(dtype)
    m = get_actual_mla_num_heads(heads, reg)
    mtp_decode_qlen = reorder_batch_threshold(s)  # L1122
    gd = use_gluon_decode(heads, qlen, dtype, s.kv_cache_bytes, s)
    gv = use_gluon_verify(heads, qlen, dtype, s.dcp_world_size, causal, s.kv_cache_bytes, s)
    use_triton_verify = all_of(
        _asm_causal_verify_unsupported(mtp_decode_qlen, dtype, s.dcp_world_size, m, s),
        causal,
        not_(gv),
        qlen > 4,
    )
    wants = all_of(  # L2044 (the DCP row-view route is PLAIN at dcp 1)
        not_(gd),
        not_(gv),
        not_(use_triton_verify),
        any_of(not_(causal), heads >= 16, qlen <= _ASM_PADDED_MAX_PS_QLEN, fp8),
    )
    persistent = all_of(wants, qlen >= 1, qlen <= mtp_decode_qlen)
    return Route(
        path=forward_path(gd, gv, persistent, triton_verify=use_triton_verify),
        use_gluon_decode=gd,
        use_gluon_verify=gv,
        use_persistent_metadata=persistent,
        wants_persistent_metadata=wants,
        mtp_decode_qlen=mtp_decode_qlen,
        decode_heads=heads,
        head_padding=padding_of(heads, m, divides_padded(heads, m)),
        padded_q_heads=m,
        request=asm_request(s, m, persistent, causal=causal),
        gluon_batch_is_one=s.num_reqs == 1,  # native 4-D MTP: one batch row per request
        kv_scale_passed=False,  # both Gluon calls still pass kv_scale=1.0
        vllm_raises=all_of(not_(causal), qlen == 2, fp8, not_(is_in(m, _AITER_FP8_NON_CAUSAL_QLEN2_HEADS))),
        builder_use_gluon_verify=gv,
    )


def scope(reg: Registry) -> list[Rule]:
    return [
        ("is_valid_num_heads(_decode_num_heads)", lambda s: is_valid_num_heads(dcp_decode_heads(s))),
        ("modelled scope: dcp_world_size == 1 (DCP routes not modelled)", lambda s: s.dcp_world_size == 1),
        (
            "non-causal blocks only where supports_non_causal (gfx950, AITER takes causal=) for parallel drafters",
            lambda s: implies(not_(s.causal), all_of(eq(s.arch, "gfx950"), reg.lookup_takes_causal, parallel_drafting(s))),
        ),
    ]


REVISION = Revision(
    id="vllm-0.34",
    title="vLLM 0.34.0 (newest release), non-DCP paths",
    source="vllm==0.34.0 rocm_aiter_mla.py (md5 f39fa31e), L1122, L2044, L2555, L2584",
    route=route,
    reorder_batch_threshold=reorder_batch_threshold,
    is_valid_num_heads=is_valid_num_heads,
    scope=scope,
)
