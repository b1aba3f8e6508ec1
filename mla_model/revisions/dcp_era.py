"""The gates vLLM 0.29.0-0.34.0 share (releases d1-d5 of sources §15, §25-§30).

From 0.29.0 on, ``rocm_aiter_mla.py`` decodes with ``_decode_num_heads =
num_heads * dcp_world_size``, pads heads to ``ceil(h/16)*16`` (native 24 where
AITER has the H24 reducer and metadata), and gates Gluon verify on DCP.  The
five release families differ in a few features, named in :class:`Features`
and set by each family's module (``vllm_029.py`` ... ``vllm_034.py``).  Each
family was checked against its releases' real decode path, executed
(``mla-spec bind --vllm X``; docs/fidelity.md).

Scope: ``dcp_world_size == 1`` (the DCP routes are modelled in a later
revision of these files).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from mla_model.derived import dcp_decode_heads, is_quantized_kv_cache, parallel_drafting
from mla_model.logic import Term, all_of, any_of, ceil_to_multiple, eq, if_then_else, implies, is_in, ne, not_
from mla_model.registry import Registry, probe_drops_v_scale
from mla_model.revisions import vllm_028
from mla_model.revisions.base import (
    ASM_PADDED_MAX_PS_QLEN,
    Revision,
    Rule,
    causal_only,
    compose_route,
    divides_padded,
    on_gfx950,
    padding_of,
)
from mla_model.route import Route

_AITER_MAX_PADDED_MLA_HEADS = 128
_GLUON_MAX_KV_CACHE_BYTES = 1 << 31
# Padded head counts with a non-causal fp8 qlen-2 fold in AITER (0.30.0 L1350, 0.34.0 L2414).
_AITER_FP8_NON_CAUSAL_QLEN2_HEADS = (32, 64, 96, 128)


@dataclass(frozen=True)
class Features:
    """What a release family adds to the 0.29.0 gates."""

    causal: (
        bool  # 0.30.0+: non-causal draft blocks (use_gluon_verify's ``causal``, the gate's ``not causal or``)
    )
    kv_bound: bool  # 0.31.0+: Gluon refused above _GLUON_MAX_KV_CACHE_BYTES per layer
    triton_verify: bool  # 0.34.0: CDNA3 causal verify past qlen 4 on vLLM's Triton kernel
    v_scale_fix: bool  # 0.34.0: the ASM output rescaled by k_scale where a probe finds V left unscaled
    reorder_batch_threshold: Callable[[Any], Term]


def is_valid_num_heads(num_heads: Term) -> Term:
    """``h > 0 and h not in () and (h <= 128 or h % 16 == 0)`` (0.29.0 on)."""
    return all_of(num_heads > 0, any_of(num_heads <= _AITER_MAX_PADDED_MLA_HEADS, num_heads % 16 == 0))


def get_actual_mla_num_heads(num_heads: Term, reg: Registry) -> Term:
    """``24 if h == 24 and _aiter_mla_native_h24_supported() else ceil(h / 16) * 16``."""
    return if_then_else(all_of(num_heads == 24, reg.native_h24), 24, ceil_to_multiple(num_heads, 16))


def _gluon_kv_cache_in_bounds(f: Features, kv_cache_bytes: Term) -> Term:
    """0.31.0+: Gluon drops its KV bounds mask past 2 GiB per layer (ROCm/aiter #4474)."""
    return kv_cache_bytes <= _GLUON_MAX_KV_CACHE_BYTES if f.kv_bound else True


def use_gluon_decode(
    f: Features, num_heads: Term, max_qo_len: Term, kv_cache_dtype: Term, kv_cache_bytes: Term, s: Any
) -> Term:
    """0.29.0 L1334 ... 0.34.0 L2555: 0.28.0's gate (heads/qlen, dtype guard, mode, arch, divisor), then
    [from 0.31.0] the KV bound."""
    return all_of(
        vllm_028.use_gluon_decode(num_heads, max_qo_len, kv_cache_dtype, s),
        _gluon_kv_cache_in_bounds(f, kv_cache_bytes),
    )


def use_gluon_verify(
    f: Features,
    num_heads: Term,
    max_qo_len: Term,
    kv_cache_dtype: Term,
    dcp_world_size: Term,
    causal: Term,
    kv_cache_bytes: Term,
    s: Any,
) -> Term:
    """0.29.0 L1356 ... 0.34.0 L2584: native 4-D Gluon MTP for [causal,] non-DCP, unquantized small-head
    verify."""
    return all_of(
        causal if f.causal else True,
        max_qo_len > 1,
        dcp_world_size <= 1,
        not_(is_quantized_kv_cache(kv_cache_dtype)),
        num_heads < 16,
        on_gfx950(s),  # _gluon_mla_decode_supported()
        ne(s.asm_padding_mode, "asm"),
        _gluon_kv_cache_in_bounds(f, kv_cache_bytes),
    )


def _asm_causal_verify_unsupported(
    mtp_decode_qlen: Term, kv_cache_dtype: Term, dcp_world_size: Term, m: Term, s: Any
) -> Term:
    """0.34.0 L485-506: CDNA3 has no correct ASM causal verify past qlen 4, except fp8 at 128 heads
    (aiter #5679)."""
    return all_of(
        dcp_world_size == 1,
        mtp_decode_qlen > 4,
        eq(s.arch, "gfx942"),
        implies(is_quantized_kv_cache(kv_cache_dtype), m != 128),
    )


def fp8_v_scale_fix(s: Any, reg: Registry, m: Term, fp8: Term, persistent: Term) -> Term:
    """0.34.0 (sources §57): the builder probes qlens ``2..min(_mtp_decode_qlen, 4)`` of an fp8 cache at
    DCP 1 (L1384-1402) with ``_aiter_fp8_mla_decode_drops_v_scale(m, qlen, kv == "fp8")``: one causal
    persistent block with an fp8 query (the normalised "fp8" dtype string makes ``q_fp8`` true for every
    fp8 cache); ``fp8_v_scale_fix`` is set for a step with persistent metadata at such a qlen (L2184-2188),
    and forward_mqa multiplies the ASM output by k_scale (L3702-3703).  The probe measures AITER; here the
    registry answers it."""
    qlen = s.max_qo_len
    return all_of(
        fp8,
        s.dcp_world_size == 1,
        persistent,  # has_persistent_metadata, which also bounds qlen by _mtp_decode_qlen
        qlen >= 2,
        qlen <= ASM_PADDED_MAX_PS_QLEN,
        probe_drops_v_scale(reg, s.arch, m, qlen),
    )


def route(f: Features, s: Any, reg: Registry) -> Route:
    heads = dcp_decode_heads(s)  # self._decode_num_heads
    qlen, dtype = s.max_qo_len, s.kv_cache_dtype
    causal = s.causal if f.causal else True
    fp8 = is_quantized_kv_cache(dtype)
    m = get_actual_mla_num_heads(heads, reg)
    mtp_decode_qlen = f.reorder_batch_threshold(s)  # self.reorder_batch_threshold or 1
    gd = use_gluon_decode(f, heads, qlen, dtype, s.kv_cache_bytes, s)
    gv = use_gluon_verify(f, heads, qlen, dtype, s.dcp_world_size, causal, s.kv_cache_bytes, s)
    use_triton_verify = (
        all_of(
            _asm_causal_verify_unsupported(mtp_decode_qlen, dtype, s.dcp_world_size, m, s),
            causal,
            not_(gv),
            qlen > 4,
        )
        if f.triton_verify
        else False
    )
    wants = all_of(  # the DCP route is PLAIN at dcp 1 (0.29.0 L1037, 0.34.0 L2044)
        not_(gd),
        not_(gv),
        not_(use_triton_verify),
        any_of(not_(causal), heads >= 16, qlen <= ASM_PADDED_MAX_PS_QLEN, fp8),
    )
    raises = (
        all_of(not_(causal), qlen == 2, fp8, not_(is_in(m, _AITER_FP8_NON_CAUSAL_QLEN2_HEADS)))
        if f.causal
        else False
    )  # 0.30.0 L1153-1170 (sources §29): "AITER has no non-causal fp8 MLA kernel"
    return compose_route(
        s,
        gd,
        gv,
        wants,
        mtp_decode_qlen,
        heads,
        m,
        head_padding=padding_of(heads, m, divides_padded(heads, m)),
        padded_q_heads=m,
        causal=causal,
        gluon_batch_is_one=s.num_reqs == 1,  # native 4-D MTP: one batch row per request
        triton_verify=use_triton_verify,
        vllm_raises=raises,
        builder_gv=gv,
        v_scale_fix=partial(fp8_v_scale_fix, s, reg, m, fp8) if f.v_scale_fix else None,
    )


def scope(f: Features, reg: Registry) -> list[Rule]:
    rules: list[Rule] = [
        ("is_valid_num_heads(_decode_num_heads)", lambda s: is_valid_num_heads(dcp_decode_heads(s))),
        ("modelled scope: dcp_world_size == 1 (DCP routes not modelled)", lambda s: s.dcp_world_size == 1),
    ]
    if not f.causal:
        return rules + causal_only(reg)
    return rules + [
        (
            "non-causal blocks only where supports_non_causal (gfx950, AITER takes causal=) "
            "for parallel drafters",
            lambda s: implies(
                not_(s.causal), all_of(eq(s.arch, "gfx950"), reg.lookup_takes_causal, parallel_drafting(s))
            ),
        )
    ]


def make_revision(id: str, title: str, source: str, f: Features) -> Revision:
    """The Revision of one family, with its gates under vLLM's names for ``mla-spec bind``."""
    return Revision(
        id=id,
        title=title,
        source=source,
        route=partial(route, f),
        reorder_batch_threshold=f.reorder_batch_threshold,
        is_valid_num_heads=is_valid_num_heads,
        scope=partial(scope, f),
        gates={
            "use_gluon_decode": partial(use_gluon_decode, f),
            "use_gluon_verify": partial(use_gluon_verify, f),
            "is_valid_num_heads": is_valid_num_heads,
            "get_actual_mla_num_heads": get_actual_mla_num_heads,
        },
    )
