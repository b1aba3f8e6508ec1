"""The AITER side: what a given AITER release ships and how it resolves a call.

A :class:`Registry` is read from one of our own TOML files under
``mla_model/registry_data/`` (facts encoded from AITER's ``mla_asm.csv`` tables,
``aiter/mla.py`` and ``csrc/py_itfs_cu/asm_mla.cu`` at a tag; each file names
its source).  The resolution logic below follows AITER's, step by step
(sources §31-§43), and is written with :mod:`mla_model.logic` so that it runs
on one request, on numpy arrays and under z3.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from mla_model.derived import KERNEL_KV_DTYPES
from mla_model.logic import (
    Term,
    all_of,
    any_of,
    choose,
    eq,
    if_then_else,
    is_in,
    ne,
    not_,
    product,
    product_in,
    tabulated,
    tuple_in,
)
from mla_model.route import KernelRequest
from mla_model.shape import ARCHS, Q_DTYPES

REGISTRY_IDS = ("aiter-0.1.19", "aiter-0.1.20")
NO_KERNEL = "no kernel"  # what a request resolves to where AITER has no kernel for it

# Head counts AITER's persistent path may see (padded to multiples of 16 by vLLM).
_PADDED_HEAD_HINT = tuple(range(16, 129, 16))


@dataclass(frozen=True)
class KernelRow:
    """One decode row of an ``mla_asm.csv`` table (key -> code object)."""

    arch: str
    q: str
    kv: str
    gqa: int
    ps: int
    qseqlen: int
    causal: int
    lse: int
    cprr: int
    name: str


@dataclass(frozen=True)
class NativeRule:
    """One clause of the persistent branch's "natively supported heads" test."""

    heads: tuple[int, ...] = ()
    arch: tuple[str, ...] = ()
    q: str | None = None
    kv: str | None = None
    qlen: tuple[int, ...] = ()
    qlen_min: int | None = None


@dataclass(frozen=True)
class KnownWrong:
    """An ASM kernel or path that runs but returns wrong output (sources §48): it matches a request when
    every field it names matches; ``status`` says whether the fault is reported or verified."""

    what: str
    effect: str  # what the wrong output looks like, as measured by the report
    status: str  # "reported" (a report, not reproduced here) or "verified"
    source: str
    arch: tuple[str, ...] = ()
    q: str | None = None
    kv: str | None = None
    persistent: bool | None = None  # after AITER's own persistent-mode decision
    kernel: str | None = None  # the code object the request resolves to
    qlen: tuple[int, ...] = ()  # the kernel_qlen vLLM passes


@dataclass(frozen=True)
class Registry:
    id: str
    aiter_version: str
    source: str
    lookup_takes_causal: bool
    fp8_ps_fold_16x4: bool
    gfx950_fp8_gqa32_ps_min_qlen: int
    persistent_max_batch: int
    native_h24: bool
    block_n_fp8: tuple[tuple[int, int], ...]
    native: tuple[NativeRule, ...]
    fold_heads: tuple[int, ...]
    gluon_arch: str
    gluon_max_heads: int
    gluon_fp8_batched: bool
    gluon_max_kv_cache_bytes: int  # past this, one layer's KV is read out of range (sources §47)
    kernels: tuple[KernelRow, ...]
    known_wrong: tuple[KnownWrong, ...] = ()
    # Kernels that apply kv_scale to the scores but not to V: the output is short by kv_scale unless vLLM
    # multiplies it back (vLLM 0.34.0's fp8_v_scale_fix).  Same fields as known_wrong (sources §57).
    v_scale_dropped: tuple[KnownWrong, ...] = ()

    @property
    def block_n_keys(self) -> tuple[int, ...]:
        return tuple(k for k, _ in self.block_n_fp8)


@cache
def load_registry(registry_id: str) -> Registry:
    """The bundled registry with this id (``aiter-0.1.19`` or ``aiter-0.1.20``)."""
    if registry_id not in REGISTRY_IDS:
        raise KeyError(f"unknown registry {registry_id!r}; known: {', '.join(REGISTRY_IDS)}")
    text = resources.files("mla_model.registry_data").joinpath(f"{registry_id}.toml").read_text()
    return parse_registry(tomllib.loads(text))


def parse_registry(data: dict[str, Any]) -> Registry:
    gluon = data["gluon"]
    return Registry(
        id=data["id"],
        aiter_version=data["aiter_version"],
        source=data["source"],
        lookup_takes_causal=bool(data["lookup_takes_causal"]),
        fp8_ps_fold_16x4=bool(data["fp8_ps_fold_16x4"]),
        gfx950_fp8_gqa32_ps_min_qlen=int(data["gfx950_fp8_gqa32_ps_min_qlen"]),
        persistent_max_batch=int(data["persistent_max_batch"]),
        native_h24=bool(data["native_h24"]),
        block_n_fp8=tuple(sorted((int(k), int(v)) for k, v in data["block_n_fp8"].items())),
        native=tuple(
            NativeRule(
                heads=tuple(r["heads"]),
                arch=tuple(r.get("arch", ())),
                q=r.get("q"),
                kv=r.get("kv"),
                qlen=tuple(r.get("qlen", ())),
                qlen_min=r.get("qlen_min"),
            )
            for r in data["native"]
        ),
        fold_heads=tuple(data["fold_heads"]),
        gluon_arch=gluon["arch"],
        gluon_max_heads=int(gluon["max_heads"]),
        gluon_fp8_batched=bool(gluon["fp8_batched"]),
        gluon_max_kv_cache_bytes=int(gluon["max_kv_cache_bytes"]),
        kernels=tuple(KernelRow(**{**row, "cprr": row.get("cprr", 0)}) for row in data["kernel"]),
        known_wrong=_kernel_faults(data.get("known_wrong", ())),
        v_scale_dropped=_kernel_faults(data.get("v_scale_dropped", ())),
    )


def _kernel_faults(tables: Any) -> tuple[KnownWrong, ...]:
    return tuple(
        KnownWrong(**{**w, "arch": tuple(w.get("arch", ())), "qlen": tuple(w.get("qlen", ()))})
        for w in tables
    )


# --- the ASM path -----------------------------------------------------------------------


@dataclass(frozen=True)
class AsmLookup:
    """How AITER resolves an ASM request (sources §31-§37)."""

    persistent: Term  # after AITER's own batch gate
    block_n_lookup: Term  # AITER indexes get_block_n_fp8[m * Q'] (non-persistent fp8)
    block_n_key_ok: Term  # ... and the key exists
    fold_error: Term  # persistent head fold: assert "nhead=... not supported"
    check_error: Term  # an AITER_CHECK in asm_mla.cu's normalisation
    gqa: Term  # gqa' looked up in the table
    qseqlen: Term  # qseqlen' looked up in the table
    ps: Term  # ps' looked up in the table
    causal: Term  # causal' looked up in the table
    row_found: Term  # some row of the arch's table has that key
    lse: Term = False  # lse' looked up: vLLM asked for the LSE and the call is persistent
    cprr: Term = False  # cprr' looked up: vLLM passed g_kv_indptr

    @property
    def kernel_ok(self) -> Term:
        """The request reaches a kernel: no assert, no AITER_CHECK, a row exists."""
        return all_of(not_(self.fold_error), not_(self.check_error), self.row_found)


def _native(reg: Registry, arch: Term, q: Term, kv: Term, m: Term, qlen: Term) -> Term:
    clauses = []
    for rule in reg.native:
        terms = [is_in(m, rule.heads)] if rule.heads else []  # no heads listed: any head count
        if rule.arch:
            terms.append(is_in(arch, rule.arch))
        if rule.q:
            terms.append(eq(q, rule.q))
        if rule.kv:
            terms.append(eq(kv, rule.kv))
        if rule.qlen:
            terms.append(is_in(qlen, rule.qlen))
        if rule.qlen_min is not None:
            terms.append(qlen >= rule.qlen_min)
        clauses.append(all_of(*terms))
    return any_of(*clauses)


def asm_lookup(reg: Registry, arch: Term, req: KernelRequest, num_reqs: Term) -> AsmLookup:
    """Follow ``aiter.mla.mla_decode_fwd`` and ``asm_mla.cu`` for one request."""
    q, kv, m, Q = req.q_dtype, req.kv_dtype, req.padded_heads, req.kernel_qlen
    gfx950 = eq(arch, "gfx950")
    bf16 = all_of(eq(q, "bf16"), eq(kv, "bf16"))
    fp8 = all_of(eq(q, "fp8"), eq(kv, "fp8"))
    bf16_q_fp8_kv = all_of(eq(q, "bf16"), eq(kv, "fp8"))

    # sources §31: _use_persistent_mla_decode drops vLLM's metadata for big bf16 batches on gfx950; not when
    # the caller passes num_kv_splits, as vLLM's CPRR route does (aiter/mla.py v0.1.20 L585-588; sources §60).
    dropped = all_of(
        req.persistent, not_(req.cprr), gfx950, bf16, m == 16, Q == 1, num_reqs >= reg.persistent_max_batch
    )
    ps = all_of(req.persistent, not_(dropped))

    # sources §32: non-persistent fp8 indexes get_block_n_fp8[m * Q'].
    block_n_lookup = all_of(not_(ps), eq(q, "fp8"))
    block_n_key_ok = product_in(m, Q, reg.block_n_keys)

    # sources §33: persistent heads that are not native are folded onto 16 heads.
    fold = all_of(ps, not_(_native(reg, arch, q, kv, m, Q)))
    fold_error = all_of(fold, not_(is_in(m, reg.fold_heads)))
    g = if_then_else(fold, 16, m)

    # sources §34: asm_mla.cu normalises (gqa, qseqlen) before the table lookup.
    # gqa 8 never occurs: vLLM pads every rank to 16 heads or more.
    g16, g32, g64, g128 = (g == 16), (g == 32), (g == 64), (g == 128)
    qs = Q
    qs = if_then_else(g128, 0, qs)
    qs = if_then_else(all_of(bf16, g16, ps), if_then_else(Q <= 4, 4, Q), qs)
    qs = if_then_else(all_of(bf16, g16, not_(ps)), if_then_else(Q == 1, 1, if_then_else(Q <= 4, 4, 8)), qs)
    qs = if_then_else(all_of(bf16, g32, not_(ps)), 0, qs)
    qs = if_then_else(all_of(bf16, g64, not_(ps)), if_then_else(Q == 1, 1, 0), qs)
    qs = if_then_else(all_of(bf16_q_fp8_kv, g16, ps, Q <= 4), 4, qs)
    fp8_g16_fold = all_of(fp8, g16, Q > 4, ps, gfx950)  # aiter #4258 q-row fold onto (32, 4)
    qs = if_then_else(all_of(fp8, g16), if_then_else(Q <= 2, Q, 4), qs)
    gqa_norm = if_then_else(fp8_g16_fold, 32, g)
    qs = if_then_else(all_of(fp8, g32, ps, gfx950, Q >= reg.gfx950_fp8_gqa32_ps_min_qlen), 4, qs)
    qs = if_then_else(all_of(fp8, g64, ps), if_then_else(Q == 1, 1, 4), qs)
    check_error = any_of(
        all_of(fp8, g16, Q > 4, not_(fp8_g16_fold)),
        all_of(
            fp8,
            g32,
            not_(
                any_of(
                    all_of(not_(ps), Q == 1),
                    all_of(ps, any_of(Q <= 2, all_of(gfx950, Q >= reg.gfx950_fp8_gqa32_ps_min_qlen))),
                )
            ),
        ),
        all_of(fp8, g64, not_(ps)),
    )
    ps_norm = if_then_else(all_of(bf16, g128, eq(arch, "gfx942")), False, ps)

    # sources §35: gfx950 overrides, first match, on the request's own (gqa, Q).
    gq = product(g, Q, a_hint=_PADDED_HEAD_HINT)
    overrides = [
        (all_of(gfx950, bf16, ps, any_of(gq >= 128, g > 64), g != 48), 32, 4),
        (all_of(gfx950, bf16, ps, any_of(gq >= 64, g >= 16)), 64, 1),
        (all_of(gfx950, fp8, ps, any_of(all_of(g32, Q >= 4), all_of(g64, Q >= 2), g128)), 32, 4),
    ]
    if reg.fp8_ps_fold_16x4:  # aiter #4521
        overrides.append(
            (
                all_of(
                    gfx950,
                    fp8,
                    ps,
                    any_of(all_of(g16, is_in(Q, (3, 4))), all_of(g32, is_in(Q, (2, 3))), all_of(g64, Q == 1)),
                ),
                16,
                4,
            )
        )
    gqa_key, qs_key = gqa_norm, qs
    for cond, og, oq in reversed(overrides):
        gqa_key = if_then_else(cond, og, gqa_key)
        qs_key = if_then_else(cond, oq, qs_key)

    # sources §36: causal' is hard-coded 0 before 0.1.20; later the caller's, forced 1 at qlen 1.
    causal_key = any_of(req.causal, Q == 1) if reg.lookup_takes_causal else False
    # sources §60: asm_mla.cu's lse' is "an LSE buffer and persistent" (the non-persistent path reduces the
    # LSE in Python); cprr' is "g_kv_indptr passed".  vLLM asks for both only under DCP.
    lse_key = all_of(req.lse, ps)
    row_found = tuple_in(
        (arch, q, kv, gqa_key, ps_norm, qs_key, causal_key, lse_key, req.cprr),
        [
            (r.arch, r.q, r.kv, r.gqa, bool(r.ps), r.qseqlen, bool(r.causal), bool(r.lse), bool(r.cprr))
            for r in reg.kernels
        ],
    )
    return AsmLookup(
        persistent=ps,
        block_n_lookup=block_n_lookup,
        block_n_key_ok=block_n_key_ok,
        fold_error=fold_error,
        check_error=check_error,
        gqa=gqa_key,
        qseqlen=qs_key,
        ps=ps_norm,
        causal=causal_key,
        row_found=row_found,
        lse=lse_key,
        cprr=req.cprr,
    )


def _reachable_rows(reg: Registry) -> list[KernelRow]:
    """Kernel-table rows vLLM can ask for: dtypes a request carries (not byte KV), with or without the LSE
    and the round-robin kernels that DCP asks for."""
    return [r for r in reg.kernels if r.arch in ARCHS and r.q in Q_DTYPES and r.kv in KERNEL_KV_DTYPES]


def kernel_names(reg: Registry) -> tuple[str, ...]:
    """The decode code objects vLLM can reach, then NO_KERNEL."""
    return (*dict.fromkeys(r.name for r in _reachable_rows(reg)), NO_KERNEL)


def _row_matches(r: KernelRow, arch: Term, req: KernelRequest, lookup: AsmLookup) -> Term:
    return all_of(
        lookup.kernel_ok,
        eq(arch, r.arch),
        eq(req.q_dtype, r.q),
        eq(req.kv_dtype, r.kv),
        lookup.gqa == r.gqa,
        lookup.ps == bool(r.ps),
        lookup.qseqlen == r.qseqlen,
        lookup.causal == bool(r.causal),
        lookup.lse == bool(r.lse),
        lookup.cprr == bool(r.cprr),
    )


def resolved_kernel(reg: Registry, arch: Term, req: KernelRequest, lookup: AsmLookup) -> Term:
    """The code object a request resolves to: the first reachable row the lookup matches, else NO_KERNEL.

    Written once, in the logic vocabulary: explain, the cases, the graph, the diff (numpy and z3) and the
    executing harness's AITER stand-in all resolve kernels here."""
    cases = [(_row_matches(r, arch, req, lookup), r.name) for r in _reachable_rows(reg)]
    return choose(kernel_names(reg), cases, NO_KERNEL)


def _first_rows_named(reg: Registry, name: str) -> list[KernelRow]:
    """The reachable rows named ``name`` that no earlier reachable row shadows (same lookup key)."""
    seen, out = set(), []
    for r in _reachable_rows(reg):
        key = (r.arch, r.q, r.kv, r.gqa, bool(r.ps), r.qseqlen, bool(r.causal), bool(r.lse), bool(r.cprr))
        if key not in seen and r.name == name:
            out.append(r)
        seen.add(key)
    return out


def resolves_to(reg: Registry, arch: Term, req: KernelRequest, lookup: AsmLookup, name: str) -> Term:
    """``resolved_kernel(...) == name``, from the rows of that name alone: resolution takes the first row
    whose key matches, and a row's key match is its own condition, so the request resolves to ``name``
    exactly when one of its rows that no earlier row shadows matches.  A few rows instead of the whole
    table: known-wrong and V-dropping kernels are matched this way."""
    return any_of(*[_row_matches(r, arch, req, lookup) for r in _first_rows_named(reg, name)])


# --- the segmented MLA path (DCP verify) ---------------------------------------------


# AITER's segmented MLA decode (the DCP verify kernel) on gfx942's 64 KiB LDS: its query block widens to 128
# heads past 64 fp8 heads, and bf16 at a 128-token tile needs 128 KiB (vLLM 0.33.0 rocm_aiter_mla.py L307-321,
# _segmented_mla_fits_lds, from vLLM's own measurement; sources §60).  bf16 tiles below 128 are the modelled
# scope (mla_model.revisions.dcp_era).
SEGMENTED_MLA_GFX942_FP8_MAX_HEADS = 64


def segmented_mla_fits(arch: Term, fp8_kv: Term, heads: Term) -> Term:
    """AITER's segmented MLA compiles for these DCP-gathered heads on this arch (``fp8_kv``: an fp8 cache)."""
    return any_of(ne(arch, "gfx942"), not_(fp8_kv), heads <= SEGMENTED_MLA_GFX942_FP8_MAX_HEADS)


# --- the Gluon path ---------------------------------------------------------------------


@dataclass(frozen=True)
class GluonCheck:
    """What ``mla_gluon`` accepts (sources §41-§42)."""

    built: Term  # the wrapper imports and compiles (shape.gluon_build)
    arch_ok: Term  # asserts gfx950
    heads_ok: Term  # asserts nhead <= bound
    dtype_ok: Term  # bf16 KV (bh16bn64) or fp8 e4m3fn KV (bh16bn128) with a bf16 query
    batch_ok: Term  # bh16bn128 asserts batch_size == 1 before aiter #4480
    serves_fp8: Term  # fp8 KV is read correctly at this batch (dtype and batch both ok)
    kv_in_bounds: Term  # the layer's KV cache is within the addressing bound (else read out of range)

    @property
    def runs(self) -> Term:
        return all_of(self.built, self.arch_ok, self.heads_ok, self.dtype_ok, self.batch_ok)


def gluon_check(
    reg: Registry,
    arch: Term,
    gluon_build: Term,
    q: Term,
    kv: Term,
    heads: Term,
    batch_is_one: Term,
    kv_cache_bytes: Term = 0,  # one layer's KV cache; 0: unknown (vLLM lets Gluon run while profiling)
) -> GluonCheck:
    fp8_kv = eq(kv, "fp8")
    dtype_ok = all_of(eq(q, "bf16"), is_in(kv, ("bf16", "fp8")))
    batch_ok = any_of(not_(fp8_kv), bool(reg.gluon_fp8_batched), batch_is_one)
    return GluonCheck(
        built=gluon_build,
        arch_ok=eq(arch, reg.gluon_arch),
        heads_ok=all_of(heads >= 1, heads <= reg.gluon_max_heads),
        dtype_ok=dtype_ok,
        batch_ok=batch_ok,
        serves_fp8=all_of(eq(q, "bf16"), batch_ok),
        kv_in_bounds=kv_cache_bytes <= reg.gluon_max_kv_cache_bytes,
    )


# --- kernels that run but return wrong output -------------------------------------------------------


def known_wrong_matches(reg: Registry, arch: Term, req: KernelRequest, lookup: AsmLookup) -> list[Term]:
    """Per entry of ``reg.known_wrong``: the request runs (a kernel takes it) and lands on that entry."""
    return kernel_fault_matches(reg, reg.known_wrong, arch, req, lookup)


def v_scale_dropped(reg: Registry, arch: Term, req: KernelRequest, lookup: AsmLookup) -> Term:
    """The request runs on a kernel that applies kv_scale to the scores but not to V (sources §57)."""
    return any_of(*kernel_fault_matches(reg, reg.v_scale_dropped, arch, req, lookup))


def probe_drops_v_scale(reg: Registry, arch: Term, heads: Term, qlen: Term, q_dtype: Term = "fp8") -> Term:
    """What vLLM 0.34.0's V-scale probe finds (sources §57): one request's causal block of ``qlen`` tokens
    on ``heads`` heads over an fp8 cache, persistent, lands on a kernel that leaves V unscaled."""

    def drops(arch: Term, heads: Term, qlen: Term, q_dtype: Term) -> Term:
        probe = KernelRequest(q_dtype, "fp8", heads, qlen, persistent=True, causal=True)
        return v_scale_dropped(reg, arch, probe, asm_lookup(reg, arch, probe, 1))

    return tabulated(drops, arch, heads, qlen, q_dtype)


def kernel_fault_matches(
    reg: Registry, entries: tuple[KnownWrong, ...], arch: Term, req: KernelRequest, lookup: AsmLookup
) -> list[Term]:
    """Per entry: the request runs (a kernel takes it) and every field the entry names matches."""
    out = []
    for w in entries:
        terms = [lookup.kernel_ok]
        if w.arch:
            terms.append(is_in(arch, w.arch))
        if w.q is not None:
            terms.append(eq(req.q_dtype, w.q))
        if w.kv is not None:
            terms.append(eq(req.kv_dtype, w.kv))
        if w.persistent is not None:
            terms.append(lookup.persistent if w.persistent else not_(lookup.persistent))
        if w.qlen:
            terms.append(is_in(req.kernel_qlen, w.qlen))
        if w.kernel is not None:
            terms.append(resolves_to(reg, arch, req, lookup, w.kernel))
        out.append(all_of(*terms))
    return out
