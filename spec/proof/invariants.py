"""The routing and buffer-sizing invariants, each a formula over (shape, route, registry).

Every invariant is written with :mod:`mla_model.logic`, so the prover (z3), the
brute-force cross-check (numpy) and the re-execution of counterexamples
(plain Python) evaluate the same formula.  Each carries the sentence a
maintainer reads when it breaks, and the source of the fact behind it.
``pr_51011`` marks the properties vLLM PR #51011 set out to establish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mla_model.decision import Decision
from mla_model.derived import is_quantized_kv_cache
from mla_model.logic import all_of, iff, implies, is_in, not_
from mla_model.route import ASM_PATHS


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    why: str
    symptom: str
    source: str
    holds: Callable[[Decision], Any]
    view: tuple[str, ...] = ("arch", "q_dtype", "kv", "path")  # what tells counterexample classes apart
    pr_51011: bool = False


def _fp8_never_reaches_gluon(d: Decision) -> Any:
    fp8 = is_quantized_kv_cache(d.shape.kv_cache_dtype)
    return implies(all_of(d.on_gluon, fp8), all_of(d.gluon.serves_fp8, d.route.kv_scale_passed))


def _gluon_only_where_built(d: Decision) -> Any:
    return implies(d.on_gluon, all_of(d.gluon.built, d.gluon.arch_ok))


def _kernel_exists(d: Decision) -> Any:
    return implies(d.on_asm, d.asm.kernel_ok)


def _block_n_key_exists(d: Decision) -> Any:
    return implies(all_of(d.on_asm, d.asm.block_n_lookup), d.asm.block_n_key_ok)


def _metadata_covers_qlen(d: Decision) -> Any:
    return implies(d.route.wants_persistent_metadata, d.shape.max_qo_len <= d.route.mtp_decode_qlen)


def _builder_impl_agree(d: Decision) -> Any:
    r = d.route
    metadata_used = implies(r.use_persistent_metadata, is_in(r.path, ASM_PATHS))
    if r.builder_use_gluon_verify is None:  # the builder of this revision never asks
        return metadata_used
    return all_of(metadata_used, iff(r.builder_use_gluon_verify, r.use_gluon_verify))


def _gluon_fp8_batch_one(d: Decision) -> Any:
    fp8 = is_quantized_kv_cache(d.shape.kv_cache_dtype)
    return implies(all_of(d.on_gluon, fp8), d.gluon.batch_ok)


def _decode_verify_disjoint(d: Decision) -> Any:
    return not_(all_of(d.route.use_gluon_decode, d.route.use_gluon_verify))


def _head_padding_round_trips(d: Decision) -> Any:
    return implies(d.on_asm, d.route.padded_q_heads == d.route.request.padded_heads)


def _total(d: Decision) -> Any:
    return all_of(
        not_(d.route.vllm_raises),
        implies(d.on_gluon, d.gluon.runs),
        _kernel_exists(d),
        _block_n_key_exists(d),
        _head_padding_round_trips(d),
    )


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        id="fp8-never-reaches-gluon",
        statement="An fp8 KV cache reaches a Gluon kernel only where the registry's Gluon serves fp8 at that "
        "batch with a bf16 query and vLLM hands it the cache's KV scale.",
        why="Gluon's bh16 regimes read fp8 KV only with a bf16 query, batch 1 before aiter #4480, and every "
        "shipped vLLM passes kv_scale=1.0 to Gluon, so an fp8 cache there is read unscaled.",
        symptom="silent NaN / degenerate tokens: Kimi-K3 fp8 KV GSM8K fell from 97.19% to 74.00% "
        "(285/1319 answers one repeated token) before #51011",
        source="vLLM #51011 (T-51011 test_fp8_never_routes_to_gluon); aiter mla_gluon.py bh16bn128 (facts §3.7)",
        holds=_fp8_never_reaches_gluon,
        view=("arch", "q_dtype", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="gluon-only-where-built",
        statement="A step reaches a Gluon kernel only on gfx950 with a Gluon build that runs there.",
        why="mla_gluon asserts gfx950 (CDNA3 has 64 KiB LDS, Gluon tiles ~160 KiB); without a usable build "
        "(wrapper missing, Triton that cannot compile it) vLLM's selection of Gluon fails at the first call.",
        symptom="AssertionError 'mla_gluon requires gfx950 (CDNA4)' on gfx942, or RuntimeError / TypeError "
        "loading the Gluon wrapper on the first decode step",
        source="vLLM #50578 (gfx950 gate); aiter mla_gluon.py arch assert; T-LATER1 Triton probe (facts §1.1)",
        holds=_gluon_only_where_built,
        view=("arch", "gluon_build", "path"),
    ),
    Invariant(
        id="kernel-exists",
        statement="Every ASM request, after AITER's head fold, normalisation and gfx950 overrides, has a "
        "row in the arch's kernel table and passes asm_mla.cu's checks.",
        why="AITER resolves (q, kv, gqa', ps', qseqlen', causal') against mla_asm.csv; a missing key aborts.",
        symptom="RuntimeError/SIGABRT 'cannot get heuristic kernel!', an AITER_CHECK such as 'only support "
        "gqa_ratio=16 fp8 mla decoding with qo_len <= 4', or AssertionError 'nhead=... not supported'",
        source="aiter asm_mla.cu get_heuristic_kernel_mla and normalisation; aiter/mla.py head fold (facts §3.2-3.5)",
        holds=_kernel_exists,
        view=("arch", "q_dtype", "kv", "path", "failure"),
    ),
    Invariant(
        id="block-n-key-exists",
        statement="Wherever AITER indexes get_block_n_fp8[m * Q'] (non-persistent fp8 decode), the key exists.",
        why="The non-persistent fp8 branch of get_meta_param looks the product up in a fixed dict.",
        symptom="KeyError in aiter get_meta_param: get_block_n_fp8[nhead * max_seqlen_q], raised mid-run",
        source="aiter/mla.py get_meta_param (facts §3.2.3, §3.6); vLLM #51011 description",
        holds=_block_n_key_exists,
        view=("arch", "drafter", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="metadata-covers-qlen",
        statement="Where the route wants persistent metadata, every qlen the scheduler may hand decode "
        "(1..reorder_batch_threshold) is within _mtp_decode_qlen, the qlen the buffers are sized for.",
        why="When qlen exceeds _mtp_decode_qlen the persistent gate closes and AITER falls back to its own "
        "non-persistent metadata, a path never meant for that shape.",
        symptom="persistent schedule silently dropped; AITER's fallback then raises KeyError in "
        "get_block_n_fp8 or 'cannot get heuristic kernel' mid-run (DSpark/Eagle drafters before #51011)",
        source="vLLM #51011 (_mtp_decode_qlen = reorder_batch_threshold); facts §1.5",
        holds=_metadata_covers_qlen,
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
        source="vLLM #51011 use_gluon_verify hoist; #51171 comment on per-layer head counts (facts §6.2)",
        holds=_builder_impl_agree,
        view=("path",),
        pr_51011=True,
    ),
    Invariant(
        id="gluon-fp8-batch-one",
        statement="An fp8 KV cache reaches Gluon only at batch size 1, unless the registry's Gluon takes "
        "batched fp8 (aiter #4480, 0.1.20).",
        why="bh16bn128 asserts batch_size == 1 before aiter #4480; the verify flatten makes R*Q rows.",
        symptom="AssertionError batch_size == 1 in mla_gluon (bh16bn128) on the first batched fp8 step",
        source="aiter mla_gluon.py v0.1.19 L932-935; aiter #4480 (facts §3.7)",
        holds=_gluon_fp8_batch_one,
        view=("q_dtype", "path"),
        pr_51011=True,
    ),
    Invariant(
        id="decode-verify-disjoint",
        statement="use_gluon_decode and use_gluon_verify never both hold.",
        why="forward_mqa tests them in order; both true would mean the builder and the impl can disagree "
        "about which Gluon entry a step takes.",
        symptom="a verify step run through the single-token Gluon decode: wrong outputs for all but one token",
        source="facts §6.1; T-51011 test_decode_and_verify_are_disjoint",
        holds=_decode_verify_disjoint,
        view=("arch",),
        pr_51011=True,
    ),
    Invariant(
        id="head-padding-round-trips",
        statement="On an ASM path the padded query has exactly the kernel's head count (so the unpad "
        "recovers the rank's heads in order).",
        why="repeat_interleave(16 // h) under-pads non-divisor head counts (3 -> 15); tile + slice is exact.",
        symptom="shape mismatch in the ASM call, or heads read from the wrong rows (garbage attention)",
        source="vLLM #50578 tile padding; facts §2(e)",
        holds=_head_padding_round_trips,
        view=("arch", "path"),
    ),
    Invariant(
        id="total",
        statement="Every valid shape gets a route that runs: vLLM does not raise, the Gluon kernel accepts "
        "its inputs, the ASM request has a kernel and a block-n key, and head padding is exact.",
        why="A decode step that cannot run takes the server down mid-run, however rare the shape.",
        symptom="an exception on the decode path (AssertionError, KeyError, 'cannot get heuristic kernel', "
        "ValueError) for a configuration the engine accepted",
        source="facts §6.5 error classes",
        holds=_total,
        view=("arch", "kv", "path", "failure"),
    ),
)

INVARIANT_BY_ID = {inv.id: inv for inv in INVARIANTS}


def get_invariant(invariant_id: str) -> Invariant:
    try:
        return INVARIANT_BY_ID[invariant_id]
    except KeyError:
        raise KeyError(f"unknown invariant {invariant_id!r}; known: {', '.join(INVARIANT_BY_ID)}") from None
