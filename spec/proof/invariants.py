"""The catalogue: the routing and buffer-sizing invariants, each one entry, each written once.

An entry holds everything any consumer needs: the formula over (shape, route,
registry), written with :mod:`mla_model.logic` so the prover (z3), the
brute-force cross-check (numpy) and the re-execution of counterexamples (plain
Python) evaluate the same formula; the sentences a maintainer reads (statement,
why, symptom) and the one-line detail of a concrete violation; what tells its
counterexample classes apart (the view); where in ``rocm_aiter_mla.py`` SARIF
points; whether its counterexamples become test cases; and the source of the
fact (a ``sources §N`` entry of docs/sources.md).  check's text, explain,
SARIF, case generation and docs/reference/invariants.md all read it from here.

Adding an invariant is one new entry in :data:`INVARIANTS` plus a known-bad gate
in tests/test_known_bad_gates.py that must violate it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mla_model.decision import Decision
from mla_model.derived import is_quantized_kv_cache
from mla_model.failures import (
    ASM_FAILURES,
    GLUON_FAILURES,
    NONE,
    first_failure,
    first_of,
    known_wrong_text,
    segmented_fits,
    symptom_of,
    unpad_recovers_heads,
    unpad_text,
    v_scale_text,
    v_scaled_once,
)
from mla_model.logic import Term, all_of, any_of, eq, iff, implies, is_in, ne, not_
from mla_model.registry import Registry
from mla_model.route import ASM_PATHS, LSE_PATHS

# Paths whose kernel is causal only: Gluon verify (asserted, 0.34.0 L3510), the Triton verifies and AITER's
# segmented MLA (aiter v0.1.20 aiter/ops/triton/attention/mla.py L283 ``assert causal``).
CAUSAL_ONLY_PATHS = ("gluon_verify", "triton_verify", "triton_dcp_verify", "segmented_dcp_verify")


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    why: str
    symptom: str
    source: str
    holds: Callable[[Decision], Term]
    detail: Callable[[Decision, Registry], str]  # what breaks on one concrete violating step, with values
    anchor: str  # where in rocm_aiter_mla.py SARIF points: the first line holding this text
    view: tuple[str, ...] = ("arch", "q_dtype", "kv", "path")  # what tells counterexample classes apart
    pr_51011: bool = False
    makes_cases: bool = True  # its counterexamples become test cases (False: its classes are others')
    # "error": a violation is a fault (check exits 1); "warning": it costs performance, not correctness
    # (reported in text, SARIF and JUnit, the exit status unchanged)
    level: str = "error"

    def describe(self, d: Decision, registry: Registry) -> str:
        """The sentence check and explain print for one concrete violation: the detail, then what really
        happens on that step (:func:`mla_model.failures.symptom_of`; this invariant's general symptom where
        the step shows none of the failure order's outcomes)."""
        detail = self.detail(d, registry)
        found = symptom_of(d, registry)
        if found.kind == NONE:
            what = self.symptom
        else:
            what = found.summary + (f": {found.message}" if found.message not in detail else "")
        return f"{detail} -> {what}" if detail else what


def _fp8_never_reaches_gluon(d: Decision) -> Term:
    fp8 = is_quantized_kv_cache(d.shape.kv_cache_dtype)
    return implies(all_of(d.on_gluon, fp8), all_of(d.gluon.serves_fp8, d.route.kv_scale_passed))


def _gluon_only_where_built(d: Decision) -> Term:
    return implies(d.on_gluon, all_of(d.gluon.built, d.gluon.arch_ok))


def _kernel_exists(d: Decision) -> Term:
    return implies(d.on_asm, d.asm.kernel_ok)


def _block_n_key_exists(d: Decision) -> Term:
    return implies(all_of(d.on_asm, d.asm.block_n_lookup), d.asm.block_n_key_ok)


def _metadata_covers_qlen(d: Decision) -> Term:
    r = d.route
    admitted = implies(r.wants_persistent_metadata, d.shape.max_qo_len <= r.mtp_decode_qlen)
    if r.metadata_qlen is None:  # the buffers cover _mtp_decode_qlen (every model revision)
        return admitted
    return all_of(admitted, implies(r.use_persistent_metadata, d.shape.max_qo_len <= r.metadata_qlen))


def _builder_impl_agree(d: Decision) -> Term:
    r = d.route
    metadata_used = implies(r.use_persistent_metadata, is_in(r.path, ASM_PATHS))
    if r.builder_use_gluon_verify is None:  # the builder of this revision never asks
        return metadata_used
    return all_of(metadata_used, iff(r.builder_use_gluon_verify, r.use_gluon_verify))


def _gluon_fp8_batch_one(d: Decision) -> Term:
    fp8 = is_quantized_kv_cache(d.shape.kv_cache_dtype)
    return implies(all_of(d.on_gluon, fp8), d.gluon.batch_ok)


def _decode_verify_disjoint(d: Decision) -> Term:
    return not_(all_of(d.route.use_gluon_decode, d.route.use_gluon_verify))


def _padded_to_kernel_heads(d: Decision) -> Term:
    return implies(d.on_asm, d.route.padded_q_heads == d.route.request.padded_heads)


def _head_padding_round_trips(d: Decision) -> Term:
    """The padded query has the kernel's head count, and the cut of the output undoes the padding
    (:func:`mla_model.failures.unpad_recovers_heads`; sources §61)."""
    return all_of(_padded_to_kernel_heads(d), implies(d.on_asm, unpad_recovers_heads(d)))


def _gluon_kv_in_bounds(d: Decision) -> Term:
    return implies(d.on_gluon, d.gluon.kv_in_bounds)


def _no_known_wrong_kernel(d: Decision) -> Term:
    return implies(d.on_asm, not_(any_of(*d.known_wrong)))


def _kv_scale_applied(d: Decision) -> Term:
    """On a step that runs (vLLM does not raise, the kernel takes the call): Gluon gets the cache's scale,
    and an ASM kernel's V gets it exactly once (the kernel's own scaling plus any vLLM rescale)."""
    fp8 = is_quantized_kv_cache(d.shape.kv_cache_dtype)
    runs_on_gluon = all_of(d.on_gluon, d.gluon.runs)
    runs_on_asm = all_of(d.on_asm, d.asm.kernel_ok, eq(d.route.request.kv_dtype, "fp8"))
    return implies(
        all_of(fp8, not_(d.route.vllm_raises)),
        all_of(
            implies(runs_on_gluon, d.route.kv_scale_passed),
            implies(runs_on_asm, v_scaled_once(d)),
        ),
    )


def _scale_off(d: Decision, reg: Registry) -> str:
    if d.on_gluon:
        return (
            f"{d.route.path} hands mla_gluon kv_scale=1.0 over an fp8 cache: scores and V miss the cache's "
            "scale"
        )
    return v_scale_text(d, reg)


def _persistent_metadata_used(d: Decision) -> Term:
    return implies(all_of(d.on_asm, d.route.use_persistent_metadata), d.asm.persistent)


def _dcp(d: Decision) -> Term:
    return d.shape.dcp_world_size > 1


def _dcp_lse_kernel(d: Decision) -> Term:
    """Under DCP every ASM call asks for the LSE (and, on the CPRR route, the round-robin kernel)."""
    return implies(all_of(_dcp(d), d.on_asm), d.asm.kernel_ok)


def _dcp_returns_lse(d: Decision) -> Term:
    return implies(all_of(_dcp(d), not_(d.route.vllm_raises)), is_in(d.route.path, LSE_PATHS))


def _dcp_verify_routed(d: Decision) -> Term:
    return implies(all_of(_dcp(d), d.shape.max_qo_len > 1), not_(d.route.dcp_raises))


def _dcp_causal_window(d: Decision) -> Term:
    """A causal DCP multi-token step never takes the plain route: the plain kernel applies causality on
    the rank's local KV indices, which is wrong over a round-robin shard (0.34.0 L586-587)."""
    s = d.shape
    return implies(
        all_of(_dcp(d), s.causal, s.max_qo_len > 1, not_(d.route.vllm_raises)),
        ne(d.route.dcp_route, "plain"),
    )


def _dcp_verify_supported(d: Decision) -> Term:
    s, r = d.shape, d.route
    return all_of(
        implies(
            eq(r.path, "segmented_dcp_verify"),
            all_of(s.causal, segmented_fits(d)),
        ),
        implies(eq(r.path, "triton_dcp_verify"), all_of(s.causal, eq(s.arch, "gfx942"))),
    )


def _non_causal_kernel(d: Decision) -> Term:
    """A non-causal block runs on no causal-only kernel: not the verify kernels (each is causal only) and,
    on ASM, a row looked up with causal 0 (AITER forces causal at one token, where nothing is masked)."""
    s = d.shape
    return implies(
        all_of(not_(s.causal), s.max_qo_len > 1, not_(d.route.vllm_raises)),
        all_of(
            not_(is_in(d.route.path, CAUSAL_ONLY_PATHS)),
            implies(d.on_asm, not_(d.asm.causal)),
        ),
    )


def _total(d: Decision) -> Term:
    return all_of(
        not_(d.route.vllm_raises),
        implies(d.on_gluon, d.gluon.runs),
        _kernel_exists(d),
        _block_n_key_exists(d),
        _padded_to_kernel_heads(d),  # a wrong unpad runs (silently wrong), so only the count is here
        _dcp_returns_lse(d),  # the DCP merge asserts an LSE after the kernel ran
        implies(eq(d.route.path, "segmented_dcp_verify"), segmented_fits(d)),
    )


# --- the detail of a concrete violation ------------------------------------------------------------


def _failure_at(failures, call) -> str:
    found = first_of(failures, call)
    return found[1] if found else ""


def _fp8_on_gluon(d: Decision, reg: Registry) -> str:
    s = d.shape
    return (
        f"{s.kv_cache_dtype} KV cache routed to {d.route.path} with kv_scale=1.0 "
        f"(q {s.q_dtype}, {s.num_reqs} request(s))"
    )


def _gluon_selected(d: Decision, reg: Registry) -> str:
    return f"{d.route.path} selected: " + _failure_at(GLUON_FAILURES, d.gluon_call)


def _asm_refused(d: Decision, reg: Registry) -> str:
    return _failure_at(ASM_FAILURES, d.asm_call)


def _block_n_missing(d: Decision, reg: Registry) -> str:
    m, q = d.route.request.padded_heads, d.route.request.kernel_qlen
    return (
        f"KeyError: get_block_n_fp8[{m}*{q}={m * q}] "
        f"(aiter {reg.aiter_version} keys {list(reg.block_n_keys)})"
    )


def _metadata_short(d: Decision, reg: Registry) -> str:
    s, r = d.shape, d.route
    if r.use_persistent_metadata and s.max_qo_len > r.sized_qlen:
        return (
            f"the persistent schedule is built for qlen {s.max_qo_len}, but __init__ sized its buffers for "
            f"qlen <= {r.sized_qlen} (get_mla_metadata_info_v1): get_mla_metadata_v1 writes past them"
        )
    fallback = (
        "its fp8 non-persistent path"
        if is_quantized_kv_cache(s.kv_cache_dtype)
        else "non-persistent split-KV"
    )
    return (
        f"{s.spec_method} k={s.num_spec_tokens} lets the scheduler hand decode qlen {s.max_qo_len}, "
        f"but _mtp_decode_qlen={r.mtp_decode_qlen}: persistent metadata dropped, "
        f"AITER falls back to {fallback}"
    )


def _builder_impl(d: Decision, reg: Registry) -> str:
    r = d.route
    return (
        f"builder verify={r.builder_use_gluon_verify}, impl verify={r.use_gluon_verify}, "
        f"metadata={r.use_persistent_metadata}, path {r.path}"
    )


def _gluon_batch(d: Decision, reg: Registry) -> str:
    return _failure_at(GLUON_FAILURES, d.gluon_call)


def _both_gluon(d: Decision, reg: Registry) -> str:
    return "use_gluon_decode and use_gluon_verify both true"


def _kv_past_bound(d: Decision, reg: Registry) -> str:
    return (
        f"{d.route.path} reads a {d.shape.kv_cache_bytes:,}-byte layer KV cache; aiter {reg.aiter_version}'s "
        f"mla_gluon addresses {reg.gluon_max_kv_cache_bytes:,} bytes correctly"
    )


def _metadata_dropped(d: Decision, reg: Registry) -> str:
    s = d.shape
    return (
        f"vLLM builds persistent metadata for {s.num_reqs} request(s); aiter {reg.aiter_version} drops "
        f"persistent mode at batch >= {reg.persistent_max_batch} for this request and runs non-persistent"
    )


def _padding_wrong(d: Decision, reg: Registry) -> str:
    r = d.route
    if r.padded_q_heads == r.request.padded_heads:
        return unpad_text(d, reg)
    return (
        f"{r.head_padding} pads {r.decode_heads} heads to {r.padded_q_heads}, "
        f"kernel expects {r.request.padded_heads}"
    )


def _first_failure(d: Decision, reg: Registry) -> str:
    found = first_failure(d)
    return found[1] if found else ""


def _dcp_step(d: Decision) -> str:
    s, r = d.shape, d.route
    return (
        f"dcp {s.dcp_world_size}, {r.decode_heads} gathered heads, qlen {s.max_qo_len}, "
        f"{'causal' if s.causal else 'non-causal'}: DCP route {r.dcp_route}, path {r.path}"
    )


def _dcp_asm_refused(d: Decision, reg: Registry) -> str:
    a = d.asm
    wants = " and ".join(w for w, asked in (("an LSE", a.lse), ("a round-robin (cprr)", a.cprr)) if asked)
    return f"{_dcp_step(d)}; AITER needs {wants or 'a'} kernel: " + _failure_at(ASM_FAILURES, d.asm_call)


def _dcp_described(d: Decision, reg: Registry) -> str:
    return _dcp_step(d)


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        id="fp8-never-reaches-gluon",
        statement="An fp8 KV cache reaches a Gluon kernel only where the registry's Gluon serves fp8 at that "
        "batch with a bf16 query and vLLM hands it the cache's KV scale.",
        why="Gluon's bh16 regimes read fp8 KV only with a bf16 query, batch 1 before aiter #4480, and every "
        "shipped vLLM passes kv_scale=1.0 to Gluon, so an fp8 cache there is read unscaled.",
        symptom="where Gluon runs, silently wrong attention: the fp8 cache read with the kv_scale=1.0 vLLM "
        "passes (off by the cache's scale); where it cannot, a crash: mla_gluon's AssertionError (an fp8 "
        "query, or a batched fp8 step before aiter #4480), or vLLM's RuntimeError without a usable "
        "Gluon build",
        source="vLLM #51011 (sources §45 test_fp8_never_routes_to_gluon); "
        "aiter mla_gluon.py bh16bn128 (sources §41-§42)",
        holds=_fp8_never_reaches_gluon,
        detail=_fp8_on_gluon,
        anchor="def use_gluon_decode",
        view=("arch", "q_dtype", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="gluon-only-where-built",
        statement="A step reaches a Gluon kernel only on gfx950 with a Gluon build that runs there.",
        why="mla_gluon asserts gfx950 (CDNA3 has 64 KiB LDS, Gluon tiles ~160 KiB); without a usable build "
        "(wrapper missing, Triton that cannot compile it) vLLM's selection of Gluon fails at the first call.",
        symptom="a crash at the first step routed to Gluon: vLLM's _get_mla_gluon raises RuntimeError "
        "('requires an AITER build with the small-head Gluon MLA kernel') where no usable build exists, "
        "as on every gfx942; mla_gluon itself asserts gfx950 (CDNA4)",
        source="vLLM #50578 (gfx950 gate); aiter mla_gluon.py arch assert; "
        "unreleased Triton probe (sources §11)",
        holds=_gluon_only_where_built,
        detail=_gluon_selected,
        anchor="def _gluon_mla_decode_supported",
        view=("arch", "gluon_build", "path"),
    ),
    Invariant(
        id="kernel-exists",
        statement="Every ASM request, after AITER's head fold, normalisation and gfx950 overrides, has a "
        "row in the arch's kernel table and passes asm_mla.cu's checks.",
        why="AITER resolves (q, kv, gqa', ps', qseqlen', causal') against mla_asm.csv; a missing key aborts.",
        symptom="a crash mid-run: AITER's RuntimeError 'cannot get heuristic kernel!' (or SIGABRT), an "
        "AITER_CHECK such as 'only support gqa_ratio=16 fp8 mla decoding with qo_len <= 4', AssertionError "
        "'nhead=... not supported' or the get_block_n_fp8 KeyError; or vLLM's own ValueError first where it "
        "knows AITER has no kernel (non-causal fp8 two-token blocks, 0.30 on)",
        source="aiter asm_mla.cu get_heuristic_kernel_mla and normalisation; "
        "aiter/mla.py head fold (sources §31-§39)",
        holds=_kernel_exists,
        detail=_asm_refused,
        anchor="def _build_decode",
        view=("arch", "q_dtype", "kv", "path", "failure"),
    ),
    Invariant(
        id="block-n-key-exists",
        statement="Wherever AITER indexes get_block_n_fp8[m * Q'] (non-persistent fp8 decode), "
        "the key exists.",
        why="The non-persistent fp8 branch of get_meta_param looks the product up in a fixed dict.",
        symptom="KeyError in aiter get_meta_param: get_block_n_fp8[nhead * max_seqlen_q], raised mid-run",
        source="aiter/mla.py get_meta_param (sources §32); vLLM #51011 description",
        holds=_block_n_key_exists,
        detail=_block_n_missing,
        anchor="self._mtp_decode_qlen =",
        view=("arch", "drafter", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="metadata-covers-qlen",
        statement="Where the route wants persistent metadata, every qlen the scheduler may hand decode "
        "(1..reorder_batch_threshold) is within _mtp_decode_qlen, and every persistent step's qlen is "
        "within the qlens __init__ sized the buffers for.",
        why="When qlen exceeds _mtp_decode_qlen the persistent gate closes and AITER falls back to its own "
        "non-persistent metadata, a path never meant for that shape.",
        symptom="persistent schedule silently dropped and AITER's non-persistent fallback runs: with an fp8 "
        "cache that is the known-wrong non-persistent fp8 path (silently wrong output), with bf16 a "
        "performance loss only, and where the fallback has no kernel or block-n key a crash mid-run "
        "(KeyError in get_block_n_fp8, 'cannot get heuristic kernel!'); DSpark/Eagle drafters before #51011",
        source="vLLM #51011 (_mtp_decode_qlen = reorder_batch_threshold); sources §9, §22",
        holds=_metadata_covers_qlen,
        detail=_metadata_short,
        anchor="self._mtp_decode_qlen =",
        view=("kv", "drafter", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="builder-impl-agree",
        statement="The metadata builder and forward_mqa take the same Gluon-verify decision, and persistent "
        "metadata is built only for a step the impl runs on an ASM kernel.",
        why="The builder sizes and attaches metadata from its own view of the route; the impl routes again "
        "with its own inputs (#51011 hoisted use_gluon_verify so both ask the same question).",
        symptom="metadata built for one kernel while another runs: wasted persistent buffers, or an ASM "
        "launch without the schedule it expects",
        source="vLLM #51011 use_gluon_verify hoist; #51171 comment on per-layer head counts (sources §21)",
        holds=_builder_impl_agree,
        detail=_builder_impl,
        anchor="def _build_decode",
        view=("path",),
        pr_51011=True,
    ),
    Invariant(
        id="gluon-fp8-batch-one",
        statement="An fp8 KV cache reaches Gluon only at batch size 1, unless the registry's Gluon takes "
        "batched fp8 (aiter #4480, 0.1.20).",
        why="bh16bn128 asserts batch_size == 1 before aiter #4480; the verify flatten makes R*Q rows.",
        symptom="a crash on the first batched fp8 step: AssertionError batch_size == 1 in mla_gluon "
        "(bh16bn128), or its bf16-query assert first where the query is fp8",
        source="aiter mla_gluon.py v0.1.19 L932-935; aiter #4480 (sources §41-§42)",
        holds=_gluon_fp8_batch_one,
        detail=_gluon_batch,
        anchor="def use_gluon_decode",
        view=("q_dtype", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="decode-verify-disjoint",
        statement="use_gluon_decode and use_gluon_verify never both hold.",
        why="forward_mqa tests them in order; both true would mean the builder and the impl can disagree "
        "about which Gluon entry a step takes.",
        symptom="a verify step run through the single-token Gluon decode: "
        "wrong outputs for all but one token",
        source="sources §16, §19-§21, §26; sources §45 test_decode_and_verify_are_disjoint",
        holds=_decode_verify_disjoint,
        detail=_both_gluon,
        anchor="def use_gluon_verify",
        view=("arch",),
        pr_51011=True,
    ),
    Invariant(
        id="head-padding-round-trips",
        statement="On an ASM path the padded query has exactly the kernel's head count, and the cut of the "
        "output (and LSE) undoes the padding, so the rank's heads come back in order.",
        why="repeat_interleave(16 // h) under-pads non-divisor head counts (3 -> 15); tile + slice is exact. "
        "A repeat_interleave pad is undone by the stride slice, a tile by the prefix: the CPRR route "
        "(0.31.0-0.34.0) pads by repeat_interleave where the gathered heads divide 16 but keeps the prefix "
        "o[:, :heads].",
        symptom="shape mismatch in the ASM call, or heads read from the wrong rows: silently wrong "
        "attention (on the CPRR route, heads that are copies of other heads' output, with their LSE)",
        source="vLLM #50578 tile padding; vLLM 0.34.0 L3611-3618, L3705-3709 (sources §18, §24-§25, §61)",
        holds=_head_padding_round_trips,
        detail=_padding_wrong,
        anchor="def get_mla_padded_q",
        view=("arch", "path"),
    ),
    Invariant(
        id="gluon-kv-in-bounds",
        statement="A step reaches a Gluon kernel only when one layer's KV cache fits the kernel's addressing "
        "bound (2 GiB in every modelled AITER).",
        why="Past 2 GiB mla_gluon's KV loads overflow 32-bit offsets (aiter 0.1.19) or run unmasked past the "
        "split's end (0.1.20); vLLM checks the size only from 0.31.0 on.",
        symptom="silently wrong attention on Gluon for a large per-layer KV cache (long contexts, many "
        "blocks): no error, garbage tokens; where no usable Gluon build exists (gfx942 on 0.27), vLLM's "
        "RuntimeError at the first Gluon call instead",
        source="ROCm/aiter #4474; aiter mla_gluon.py WITHIN_2GB; vLLM 0.31.0 _gluon_kv_cache_in_bounds "
        "(sources §12, §47)",
        holds=_gluon_kv_in_bounds,
        detail=_kv_past_bound,
        anchor="def use_gluon_decode",
        view=("arch", "path"),
    ),
    Invariant(
        id="no-known-wrong-kernel",
        statement="No ASM route lands on a kernel or path the registry lists as running but returning wrong "
        "output.",
        why="Some AITER kernels run without an error and return wrong numbers; the registry lists each with "
        "its source and whether the fault is reported or verified.",
        symptom="silently wrong output, no error: each registry entry carries what its report measured "
        "(for the non-persistent fp8 path, #51011's GSM8K fall to 74.00% from 97.19%)",
        source="vLLM #51011; ROCm/aiter #5679 (sources §48)",
        holds=_no_known_wrong_kernel,
        detail=known_wrong_text,
        anchor="def _build_decode",
        view=("arch", "q_dtype", "kv", "path"),
    ),
    Invariant(
        id="kv-scale-applied",
        statement="A step over an fp8 KV cache that runs applies the cache's scale exactly once, to the "
        "scores and to V.",
        why="An fp8 cache stores values divided by its scale; the kernel must multiply them back. vLLM hands "
        "Gluon kv_scale=1.0, gfx942's gqa-16 qseqlen-4 fp8 kernel scales the scores but not V (aiter #6732), "
        "and vLLM 0.34.0 rescales the output where a probe of the fp8-query kernel finds the drop.",
        symptom="silently wrong attention, no error: the output off by the cache's scale (too small where V "
        "misses it, too large where vLLM rescales what the kernel already scaled)",
        source="vLLM 0.34.0 _aiter_fp8_mla_decode_drops_v_scale, fp8_v_scale_fix; ROCm/aiter #6732 "
        "(sources §27, §57)",
        holds=_kv_scale_applied,
        detail=_scale_off,
        anchor="def _build_decode",
        view=("arch", "q_dtype", "kv", "path"),
    ),
    Invariant(
        id="persistent-metadata-used",
        statement="Where vLLM builds persistent metadata for an ASM step, AITER runs the step persistent.",
        why="aiter/mla.py's _use_persistent_mla_decode silently drops vLLM's work metadata for big bf16 "
        "batches on gfx950 (aiter #4144): the buffers were built for nothing.",
        symptom="wasted persistent-metadata buffers and a schedule vLLM did not plan: performance, not "
        "correctness (bf16 tolerates AITER's own split metadata)",
        source="aiter/mla.py _use_persistent_mla_decode, AITER_MLA_DECODE_PERSISTENT_MAX_BATCH (sources §31)",
        holds=_persistent_metadata_used,
        detail=_metadata_dropped,
        anchor="def _build_decode",
        view=("arch", "q_dtype", "kv", "path"),
        level="warning",
    ),
    Invariant(
        id="dcp-lse-kernel",
        statement="Under decode context parallelism every ASM step has an AITER kernel for what vLLM asks: "
        "the LSE for the cross-rank merge, and on the CPRR route the round-robin kernel.",
        why="Each DCP rank attends over its shard of the KV; the MLA layer merges the ranks by their LSE, so "
        "vLLM calls mla_decode_fwd(return_lse=True), and asm_mla.cu looks the kernel up with lse and cprr in "
        "its key.",
        symptom="a crash at the first DCP decode step: AITER's 'cannot get heuristic kernel!' (or a check "
        "in asm_mla.cu) for the LSE or round-robin variant",
        source="vLLM 0.29.0 L1940-1960, 0.34.0 L3656-3690; aiter v0.1.20 asm_mla.cu L149-195, L998-1001 "
        "(sources §60)",
        holds=_dcp_lse_kernel,
        detail=_dcp_asm_refused,
        anchor="return_lse=True",
        view=("arch", "q_dtype", "kv", "path"),
    ),
    Invariant(
        id="dcp-returns-lse",
        statement="Under decode context parallelism every step runs on a path that returns the LSE the "
        "cross-rank merge needs.",
        why="forward_mqa's Gluon paths return (o, None); the MLA layer asserts the LSE before merging the "
        "ranks (mla_attention.py 'assert lse is not None').",
        symptom="a crash at the first DCP decode step on that path: AssertionError in the MLA layer",
        source="vLLM 0.34.0 rocm_aiter_mla.py L3481, L3543; mla_attention.py L1170-1171 (sources §60)",
        holds=_dcp_returns_lse,
        detail=_dcp_described,
        anchor="def use_gluon_decode",
        view=("arch", "kv", "path"),
    ),
    Invariant(
        id="dcp-verify-routed",
        statement="No DCP multi-token step reaches the code that raises for want of a DCP verify route.",
        why="A causal DCP verify block needs segmented MLA, the round-robin ASM decode or the gfx942 "
        "Triton verify; without one vLLM raises RuntimeError (0.29/0.30 in forward_mqa, 0.31+ in "
        "_select_dcp_decode_route).",
        symptom="a crash at the first speculative DCP decode step: RuntimeError",
        source="vLLM 0.29.0 L1886-1890; 0.31.0 L282-298; 0.34.0 L616-636 (sources §60)",
        holds=_dcp_verify_routed,
        detail=_dcp_described,
        anchor="def _build_decode",
        view=("arch", "kv", "causal"),
    ),
    Invariant(
        id="dcp-causal-window",
        statement="A causal DCP multi-token step never runs on the plain route.",
        why="The plain kernel applies the causal mask on the rank's local KV indices, which is wrong over a "
        "round-robin shard; CPRR, segmented and the Triton row view apply it on global positions.",
        symptom="silently wrong attention for every verify token but the last, no error",
        source="vLLM 0.31.0 L243-261, 0.34.0 L560-589 (the DCP decode routing comment) (sources §60)",
        holds=_dcp_causal_window,
        detail=_dcp_described,
        anchor="def _build_decode",
        view=("arch", "kv", "path"),
    ),
    Invariant(
        id="dcp-verify-supported",
        statement="Segmented and Triton DCP verify run only where they are supported: causal blocks, "
        "segmented MLA only where it fits gfx942's LDS, the Triton DCP verify only on gfx942.",
        why="AITER's segmented MLA needs 128 KiB of LDS on gfx942 for fp8 past 64 gathered heads (vLLM "
        "0.33.0 added _segmented_mla_fits_lds); both row-view verifies build causal windows.",
        symptom="a crash compiling the segmented kernel (Triton OutOfResources), or wrong attention on a "
        "route that does not fit the block",
        source="vLLM 0.33.0 L295-330, 0.34.0 L424-470 (sources §60)",
        holds=_dcp_verify_supported,
        detail=_dcp_described,
        anchor="def _segmented_dcp_verify_supported",
        view=("arch", "kv", "path"),
    ),
    Invariant(
        id="non-causal-not-causal-only",
        statement="No non-causal multi-token block reaches a causal-only kernel.",
        why="Gluon verify, the Triton verifies and segmented MLA are causal only; an ASM row looked up as "
        "causal masks a non-causal draft block.",
        symptom="silently wrong draft attention (each draft token blind to the later ones), or a kernel "
        "assert",
        source="vLLM 0.30.0 L1134, 0.34.0 L616-636; aiter v0.1.20 aiter/ops/triton/attention/mla.py L283 "
        "(sources §29, §60)",
        holds=_non_causal_kernel,
        detail=_dcp_described,
        anchor="def _build_decode",
        view=("arch", "kv", "path"),
    ),
    Invariant(
        id="total",
        statement="Every valid shape gets a route that runs: vLLM does not raise, the Gluon kernel accepts "
        "its inputs, the ASM request has a kernel and a block-n key, head padding is exact, and under DCP "
        "the path returns the LSE the merge asserts and segmented MLA fits the LDS.",
        why="A decode step that cannot run takes the server down mid-run, however rare the shape.",
        symptom="a crash on the decode path for a configuration the engine accepted: vLLM's ValueError or "
        "RuntimeError (no Gluon build), mla_gluon's AssertionError, or AITER's KeyError, head-fold "
        "AssertionError, AITER_CHECK or 'cannot get heuristic kernel!'",
        source="sources §11, §24, §29, §32-§34, §37, §41-§42",
        holds=_total,
        detail=_first_failure,
        anchor="def forward_mqa",
        makes_cases=False,
        view=("arch", "kv", "path", "failure"),
    ),
)

INVARIANT_BY_ID = {inv.id: inv for inv in INVARIANTS}
