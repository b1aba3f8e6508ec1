"""The gates vLLM 0.29.0-0.34.0 share (releases d1-d5 of sources §15, §25-§30).

From 0.29.0 on, ``rocm_aiter_mla.py`` decodes with ``_decode_num_heads =
num_heads * dcp_world_size``, pads heads to ``ceil(h/16)*16`` (native 24 where
AITER has the H24 reducer and metadata), and gates Gluon verify on DCP.  The
five release families differ in a few features, named in :class:`Features`
and set by each family's module (``vllm_029.py`` ... ``vllm_034.py``).  Each
family was checked against its releases' real decode path, executed
(``mla-spec bind --vllm X``; docs/fidelity.md).

Decode context parallelism (every dcp_world_size in 1, 2, 4, 8): each rank holds
a round-robin shard of the KV cache and decodes all DCP-gathered heads; the MLA
layer merges the ranks' outputs by their LSE (vLLM 0.34.0 rocm_aiter_mla.py
L560-589, mla_attention.py L1170-1171 ``assert lse is not None``).  A batch
takes one DCP route (:data:`mla_model.route.DCP_ROUTES`): PLAIN for one token or
a non-causal block, CPRR (AITER's round-robin ASM kernel, gfx950, by default
from 0.32.0; it cuts its output back to the first heads, which is wrong after a
repeat_interleave pad: :func:`asm_query_heads`, sources §61),
TRITON (vLLM's split-KV Triton verify, gfx942, 0.33.0 on) or SEGMENTED
(AITER's segmented Triton MLA); 0.29/0.30 have only the segmented flag and
raise for any other DCP multi-token step.  See :func:`dcp_route`.

Modelled scope, assumptions outside the Shape (docs/explanation/scope.md):
``cp_kv_cache_interleave_size`` 1 (vLLM's default; every DCP verify route needs
it), ``VLLM_ROCM_AITER_MLA_DCP_VERIFY`` at its default (``segmented`` in 0.31.0,
``auto`` in 0.32.0; vllm/envs.py 0.31.0 L148, 0.32.0 L149),
a KV block size that is not a multiple of 128 (vLLM 0.34's default 64; segmented
MLA's LDS check, 0.33.0 on), and an AITER build with segmented MLA decode (every
pinned AITER from v0.1.19 has ``aiter/ops/triton/attention/mla.py``
``mla_decode_fwd``; sources §60).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from mla_model.derived import dcp_decode_heads, is_quantized_kv_cache, parallel_drafting, spec_configured
from mla_model.logic import (
    Term,
    all_of,
    any_of,
    ceil_to_multiple,
    choose,
    eq,
    if_then_else,
    implies,
    is_in,
    ne,
    not_,
)
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
    unpad_cases,
)
from mla_model.route import DCP_ROUTES, HEAD_UNPADS, Route

_AITER_MAX_PADDED_MLA_HEADS = 128
_GLUON_MAX_KV_CACHE_BYTES = 1 << 31
# Padded head counts with a non-causal fp8 qlen-2 fold in AITER (0.30.0 L1350, 0.34.0 L2414).
_AITER_FP8_NON_CAUSAL_QLEN2_HEADS = (32, 64, 96, 128)
# The head counts AITER builds round-robin (cprr) kernels for, and the least query length the CPRR route
# takes (0.31.0 L262-263, 0.34.0 L590-591).
_NATIVE_CPRR_HEADS = (16, 32, 64, 128)
_MIN_CPRR_QLEN = 3
_SEGMENTED_FP8_MAX_HEADS_GFX942 = 64  # _segmented_mla_fits_lds's bound (0.33.0 L319)
# vLLM's KV block size default (0.34.0 vllm/config/cache.py L185 ``DEFAULT_BLOCK_SIZE = 64``, set at L489);
# the segmented LDS check's bf16 branch is modelled for block sizes that are not multiples of 128 (the module
# docstring), and the lifted real code runs with this one.
DEFAULT_BLOCK_SIZE = 64
# Every AITER the releases pin (v0.1.19 on) exposes the segmented MLA decode the DCP verify loads
# (aiter/ops/triton/attention/mla.py ``mla_decode_fwd``; vLLM 0.29.0 L176-186
# ``_segmented_mla_decode_supported``).
AITER_HAS_SEGMENTED_MLA = True


@dataclass(frozen=True)
class Features:
    """What a release family adds to the 0.29.0 gates."""

    causal: (
        bool  # 0.30.0+: non-causal draft blocks (use_gluon_verify's ``causal``, the gate's ``not causal or``)
    )
    kv_bound: bool  # 0.31.0+: Gluon refused above _GLUON_MAX_KV_CACHE_BYTES per layer
    triton_verify: bool  # 0.34.0: CDNA3 causal verify past qlen 4 on vLLM's Triton kernel
    v_scale_fix: bool  # 0.34.0: the ASM output rescaled by k_scale where a probe finds V left unscaled
    reorder_batch_threshold: Callable[..., Term]  # (shape, supports_dcp_with_varlen) -> threshold
    dcp_route_enum: bool = False  # 0.31.0+: _select_dcp_decode_route (PLAIN/SEGMENTED/CPRR[/TRITON])
    cprr_default: bool = False  # 0.32.0+: the round-robin ASM verify (CPRR) configured by default
    dcp_row_view: bool = False  # 0.33.0+: TRITON route on gfx942, _segmented_mla_fits_lds
    non_causal_dcp: bool = False  # 0.31.0+: supports_non_causal_multi_token_dcp (non-causal drafts, DCP)


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


def _asm_dcp_verify_heads(decode_num_heads: Term) -> Term:
    """0.31.0 L270-278: the least native cprr head count >= the gathered heads, 0 past 128."""
    return _least_at_least(decode_num_heads, _NATIVE_CPRR_HEADS)


def _least_at_least(h: Term, natives: tuple[int, ...]) -> Term:
    """The least of ``natives`` that is >= ``h``, else 0."""
    value: Term = 0
    for n in reversed(natives):
        value = if_then_else(h <= n, n, value)
    return value


def _segmented_mla_fits_lds(s: Any, decode_heads: Term) -> Term:
    """0.33.0 L307-321, 0.34.0 L436-449: ``not on_gfx942() or (num_heads <= 64 if fp8_kv else
    _segmented_mla_page_size(block_size) < 128)``; the block size is in scope below 128 (module docstring)."""
    return any_of(
        ne(s.arch, "gfx942"),
        not_(is_quantized_kv_cache(s.kv_cache_dtype)),
        decode_heads <= _SEGMENTED_FP8_MAX_HEADS_GFX942,
    )


@dataclass(frozen=True)
class DCPConfig:
    """What the builder's ``__init__`` decides about DCP for one deployment (0.29.0 L396-402, 0.31.0
    L600-640, 0.34.0 L1035-1106)."""

    supports_segmented: Term  # _segmented_dcp_verify_supported (and, 0.33.0+, it fits LDS)
    supports_triton: Term  # 0.33.0+: self._use_triton_dcp_verify (gfx942, segmented does not fit)
    asm_selected: Term  # self._asm_dcp_verify: cprr configured and a native head count serves
    cprr_heads: Term  # self._asm_dcp_verify_heads
    supports_dcp_with_varlen: Term  # what the common builder reads to keep the threshold above 1
    init_raises: Term  # ValueError in __init__ (no cprr heads and no segmented MLA; DSpark unsupported)


def dcp_config(f: Features, s: Any, heads: Term) -> DCPConfig:
    dcp = s.dcp_world_size > 1
    segmented_cfg = all_of(dcp, AITER_HAS_SEGMENTED_MLA)
    if not f.dcp_route_enum:  # 0.29, 0.30: segmented MLA or nothing
        supports_segmented, supports_triton, asm_cfg = segmented_cfg, False, False
    else:
        # 0.31.0 reaches cprr only with VLLM_ROCM_AITER_MLA_DCP_VERIFY=asm (its default is segmented); 0.32.0
        # unless it is segmented (default auto, 0.32.0 L617-625); 0.33.0 on always
        asm_cfg = all_of(dcp, spec_configured(s), eq(s.arch, "gfx950")) if f.cprr_default else False
        supports_segmented = (
            all_of(segmented_cfg, _segmented_mla_fits_lds(s, heads)) if f.dcp_row_view else segmented_cfg
        )
        supports_triton = (
            all_of(dcp, eq(s.arch, "gfx942"), not_(supports_segmented)) if f.dcp_row_view else False
        )
    cprr_heads = _asm_dcp_verify_heads(heads)
    asm_selected = all_of(asm_cfg, cprr_heads != 0)
    triton_cfg = all_of(dcp, eq(s.arch, "gfx942")) if f.dcp_row_view else False
    varlen = any_of(segmented_cfg, asm_cfg, triton_cfg)
    # mla_attention.py _validate_dspark_dcp_support (0.29.0 L2132-2155): a causal DSpark target under DCP
    # needs supports_dcp_with_varlen (the non-causal draft is scoped out where it is unsupported).
    dspark_unsupported = all_of(dcp, eq(s.spec_method, "dspark"), s.causal, not_(varlen))
    no_cprr_kernel = all_of(asm_cfg, cprr_heads == 0, not_(segmented_cfg))  # 0.32.0 L644-656, 0.34.0 L1070
    return DCPConfig(
        supports_segmented=supports_segmented,
        supports_triton=supports_triton,
        asm_selected=asm_selected,
        cprr_heads=cprr_heads,
        supports_dcp_with_varlen=varlen,
        init_raises=any_of(dspark_unsupported, no_cprr_kernel),
    )


def dcp_route(f: Features, s: Any, c: DCPConfig, causal: Term) -> tuple[Term, Term]:
    """The step's DCP route and whether choosing it raises (``_select_dcp_decode_route``, 0.31.0 L282-298,
    0.34.0 L616-636; 0.29/0.30: ``use_segmented_dcp_verify = supports and qlen > 1`` L968, whatever the
    block's causality, and forward_mqa's RuntimeError for any other DCP multi-token step, 0.29.0
    L1886-1890)."""
    qlen = s.max_qo_len
    dcp = s.dcp_world_size > 1
    if not f.dcp_route_enum:
        segmented = all_of(c.supports_segmented, qlen > 1)
        route = choose(DCP_ROUTES, [(segmented, "segmented")], "plain")
        return route, all_of(dcp, qlen > 1, not_(segmented))
    multi = all_of(dcp, causal, qlen > 1)
    route = choose(
        DCP_ROUTES,
        [
            (all_of(multi, c.asm_selected, qlen >= _MIN_CPRR_QLEN), "cprr"),
            (all_of(multi, c.supports_triton), "triton"),
            (all_of(multi, c.supports_segmented), "segmented"),
        ],
        "plain",
    )
    return route, all_of(multi, eq(route, "plain"))  # no route serves it: RuntimeError


def _divides_cprr_heads(h: Term, m: Term) -> Term:
    """``m % h == 0`` for a native cprr head count ``m`` (get_mla_padded_q with target_heads, 0.34.0
    L2510-2530), as membership: exact and linear."""
    return any_of(
        *[all_of(m == n, is_in(h, [d for d in range(1, n + 1) if n % d == 0])) for n in _NATIVE_CPRR_HEADS]
    )


def asm_query_heads(dcp_route: Term, cprr_heads: Term, heads: Term, m: Term) -> tuple[Term, Term, Term]:
    """The heads forward_mqa hands the ASM kernel, how get_mla_padded_q makes them, and how forward_mqa cuts
    the output back: ``m`` (get_actual_mla_num_heads of the gathered ``heads``) and get_mla_unpadded_o,
    except on the CPRR route where its native cprr head count is more (sources §61).  There the query is
    padded to that count (0.31.0 L2315-2319, 0.34.0 L3611-3618; repeat_interleave where the gathered heads
    divide it, tile otherwise) and the output and LSE are cut to their first ``heads`` heads
    (``o[:, :heads]``, 0.31.0 L2404-2408, 0.32.0 L2482-2486, 0.33.0 L3034-3038, 0.34.0 L3705-3709): the
    inverse of the tile, not of repeat_interleave."""
    pad_to_cprr = all_of(eq(dcp_route, "cprr"), cprr_heads > heads)
    divisor = any_of(
        all_of(pad_to_cprr, _divides_cprr_heads(heads, cprr_heads)),
        all_of(not_(pad_to_cprr), divides_padded(heads, m)),
    )
    padded = if_then_else(pad_to_cprr, cprr_heads, m)
    padding = padding_of(heads, padded, divisor)
    unpad = choose(HEAD_UNPADS, [(pad_to_cprr, "prefix"), *unpad_cases(padding)], "none")
    return padded, padding, unpad


def route(f: Features, s: Any, reg: Registry) -> Route:
    heads = dcp_decode_heads(s)  # self._decode_num_heads
    qlen, dtype = s.max_qo_len, s.kv_cache_dtype
    causal = s.causal if f.causal else True
    fp8 = is_quantized_kv_cache(dtype)
    dcp = s.dcp_world_size > 1
    m_plain = get_actual_mla_num_heads(heads, reg)
    c = dcp_config(f, s, heads)
    # self.reorder_batch_threshold or 1 (:func:`threshold`)
    mtp_decode_qlen = f.reorder_batch_threshold(s, c.supports_dcp_with_varlen)
    gd = use_gluon_decode(f, heads, qlen, dtype, s.kv_cache_bytes, s)
    gv = use_gluon_verify(f, heads, qlen, dtype, s.dcp_world_size, causal, s.kv_cache_bytes, s)
    droute, no_route = dcp_route(f, s, c, causal)
    row_view = is_in(droute, ("segmented", "triton"))
    cprr = eq(droute, "cprr")
    use_triton_verify = (
        all_of(
            _asm_causal_verify_unsupported(mtp_decode_qlen, dtype, s.dcp_world_size, m_plain, s),
            causal,
            not_(gv),
            qlen > 4,
        )
        if f.triton_verify
        else False
    )
    wants = all_of(  # the persistent gate (0.29.0 L1037, 0.31.0 L1360, 0.34.0 L2044)
        not_(gd),
        not_(gv),
        not_(row_view),
        not_(use_triton_verify),
        any_of(not_(causal), heads >= 16, qlen <= ASM_PADDED_MAX_PS_QLEN, fp8),
    )
    m, head_padding, head_unpad = asm_query_heads(droute, c.cprr_heads, heads, m_plain)
    raises = (
        all_of(not_(causal), qlen == 2, fp8, not_(is_in(m_plain, _AITER_FP8_NON_CAUSAL_QLEN2_HEADS)))
        if f.causal
        else False
    )  # 0.30.0 L1153-1170 (sources §29): "AITER has no non-causal fp8 MLA kernel"
    # 0.29/0.30 raise in forward_mqa after both Gluon branches and the segmented one
    forward_raises = all_of(no_route, not_(gd), not_(gv)) if not f.dcp_route_enum else no_route
    dcp_raises = any_of(c.init_raises, forward_raises)
    return compose_route(
        s,
        gd,
        gv,
        wants,
        mtp_decode_qlen,
        heads,
        m,
        head_padding=head_padding,
        padded_q_heads=m,
        head_unpad=head_unpad,
        causal=causal,
        gluon_batch_is_one=s.num_reqs == 1,  # native 4-D MTP: one batch row per request
        triton_verify=use_triton_verify,
        vllm_raises=any_of(raises, dcp_raises),
        builder_gv=gv,
        v_scale_fix=partial(fp8_v_scale_fix, s, reg, m, fp8) if f.v_scale_fix else None,
        dcp_route=droute,
        dcp_raises=dcp_raises,
        lse=dcp,
        cprr=cprr,
    )


def threshold(f: Features, s: Any) -> Term:
    """The builder's reorder_batch_threshold: the family's formula, forced to 1 under DCP unless the builder
    supports DCP with varlen queries (vllm/v1/attention/backend.py L652-683)."""
    heads = dcp_decode_heads(s)
    return f.reorder_batch_threshold(s, dcp_config(f, s, heads).supports_dcp_with_varlen)


def scope(f: Features, reg: Registry) -> list[Rule]:
    rules: list[Rule] = [
        ("is_valid_num_heads(_decode_num_heads)", lambda s: is_valid_num_heads(dcp_decode_heads(s))),
    ]
    if not f.causal:
        return rules + causal_only(reg)
    # vllm/v1/attention/backend.py validate_configuration (0.30.0 L333-341, 0.34.0 L339-341): a non-causal
    # draft needs supports_non_causal, and under DCP supports_non_causal_dcp; where this backend lacks
    # them vLLM picks another backend (TRITON_MLA) for the draft layers, so the step is not routed here.
    non_causal_dcp = "" if f.non_causal_dcp else ", at dcp 1 (no supports_non_causal_multi_token_dcp)"
    return rules + [
        (
            "non-causal blocks only where supports_non_causal (gfx950, AITER takes causal=) "
            f"for parallel drafters{non_causal_dcp}; elsewhere vLLM routes the draft to another backend",
            lambda s: implies(
                not_(s.causal),
                all_of(
                    eq(s.arch, "gfx950"),
                    reg.lookup_takes_causal,
                    parallel_drafting(s),
                    True if f.non_causal_dcp else s.dcp_world_size == 1,
                ),
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
        reorder_batch_threshold=partial(threshold, f),
        is_valid_num_heads=is_valid_num_heads,
        scope=partial(scope, f),
        gates={
            "use_gluon_decode": partial(use_gluon_decode, f),
            "use_gluon_verify": partial(use_gluon_verify, f),
            "is_valid_num_heads": is_valid_num_heads,
            "get_actual_mla_num_heads": get_actual_mla_num_heads,
        },
    )
