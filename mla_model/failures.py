"""What fails first on a decode step's path, in the order the code meets it: written once, here.

A step can fail in vLLM (it raises before any kernel runs), in ``mla_gluon``'s
asserts, in vLLM's head padding (the padded query is not the kernel's head
count), or in AITER's ASM dispatch (``get_meta_param``'s KeyError first, then
the persistent head fold, the ``asm_mla.cu`` normalisation checks, the kernel
table).  Each :class:`Failure` is one entry: its condition (in the
:mod:`mla_model.logic` vocabulary, so numpy and z3 read it too), the exception
the code raises, and that exception's message with the step's values.

Every consumer reads this table and nothing else: the ``failure`` field of the
counterexample views (:mod:`spec.proof.views`), the sentences ``check`` and
``explain`` print (:mod:`spec.proof.invariants`), the route emulators
(:mod:`mla_model.emulation`), the executing harness's AITER stand-in (which
raises the exception itself), and conform's classification (a refusal of the
request is NO_KERNEL, anything else a CRASH).  A step that runs can still go wrong:
:data:`WRONG_OUTPUTS` (a known-wrong kernel, Gluon's ``kv_scale=1.0`` or its 2 GiB bound, vLLM cutting the
wrong heads off the padded output) and
:data:`PERFORMANCE_LOSSES` (a persistent schedule planned and lost); :func:`symptom_of` names the first
of all these on one step, the symptom kind check's JSON carries per counterexample (crash, which
exception raised where; silent wrong output; performance only).  Sources: aiter/mla.py
``get_meta_param`` and head fold, asm_mla.cu (sources §32-§34, §37), mla_gluon.py's
asserts (sources §41-§42), vLLM 0.30.0's non-causal fp8 qlen-2 raise (sources §29).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mla_model.derived import is_quantized_kv_cache
from mla_model.logic import Term, all_of, any_of, choose, eq, iff, is_in, not_
from mla_model.registry import AsmLookup, GluonCheck, Registry, resolved_kernel, segmented_mla_fits
from mla_model.route import LSE_PATHS, KernelRequest

if TYPE_CHECKING:
    from mla_model.decision import Decision

NONE = "none"  # no failure: the step runs


@dataclass(frozen=True)
class GluonCall:
    """What ``mla_gluon`` is handed, and what it makes of it."""

    check: GluonCheck
    arch: Term
    q_dtype: Term
    kv_dtype: Term
    heads: Term
    num_reqs: Term
    qlen: Term


@dataclass(frozen=True)
class AsmCall:
    """What ``aiter.mla.mla_decode_fwd`` is handed, and how AITER resolves it."""

    request: KernelRequest
    lookup: AsmLookup
    arch: Term

    def key(self) -> str:
        """AITER's lookup key for the request, as asm_mla.cu prints it."""
        a, r = self.lookup, self.request
        dcp = "".join(f" {name}:1" for name, on in (("lse", a.lse), ("cprr", a.cprr)) if on)
        return (
            f"q_type:{r.q_dtype} kv_type:{r.kv_dtype} gqa:{int(a.gqa)} ps:{int(bool(a.ps))} "
            f"qseqlen:{int(a.qseqlen)} causal:{int(bool(a.causal))}{dcp} on {self.arch}"
        )


@dataclass(frozen=True)
class Failure:
    """One way a step fails: where, under which condition, and what the code raises."""

    kind: str  # the name views, cases and conform records use
    label: str  # a few words, as the routing graph's leaf reads
    where: str  # "vllm", "gluon", "padding" or "asm"
    exception: type[BaseException]
    refusal: bool  # the stack refuses the request (conform: NO_KERNEL); False: a crash
    fails: Callable[[Any], Term]  # over the call of ``where`` (a Decision for vllm/padding)
    message: Callable[[Any], str]  # the exception's text, with the call's values
    raised_in: str = ""  # the code that raises it, as a symptom names it


def _refusal(where: str) -> Callable[..., Failure]:
    """A maker of ``where``'s refusals (mla_gluon's asserts, AITER's ASM dispatch): conform's NO_KERNEL."""

    def make(
        kind: str,
        label: str,
        exception: type[BaseException],
        fails: Callable[[Any], Term],
        message: Callable[[Any], str],
        raised_in: str,
    ) -> Failure:
        return Failure(kind, label, where, exception, True, fails, message, raised_in)

    return make


_gluon, _asm = _refusal("gluon"), _refusal("asm")


VLLM_RAISES = Failure(
    "vllm_raises",
    "vLLM raises before any kernel",
    "vllm",
    ValueError,
    False,
    lambda d: all_of(d.route.vllm_raises, not_(d.route.dcp_raises)),
    lambda d: "vLLM raises ValueError: no non-causal fp8 qlen-2 kernel for these heads",
    "vLLM rocm_aiter_mla.py AiterMLAMetadataBuilder._build_decode",
)

# 0.31.0 L296-298 / 0.34.0 L633-636 (_select_dcp_decode_route); 0.29.0 L1886-1890 (forward_mqa)
DCP_NO_ROUTE = Failure(
    "dcp_no_route",
    "no DCP route for a multi-token step",
    "vllm",
    RuntimeError,
    False,
    lambda d: d.route.dcp_raises,
    lambda d: (
        f"RuntimeError: ROCM_AITER_MLA DCP multi-token verify (qlen {d.shape.max_qo_len}, dcp "
        f"{d.shape.dcp_world_size}) has no route: segmented MLA, the round-robin asm decode or the gfx942 "
        "Triton verify is required"
    ),
    "vLLM rocm_aiter_mla.py (_select_dcp_decode_route, or forward_mqa before 0.31)",
)

DCP_NO_LSE = Failure(  # mla_attention.py L1170-1171 (0.34.0): the DCP merge asserts forward_mqa's LSE
    "dcp_no_lse",
    "DCP step on a path without LSE",
    "vllm",
    AssertionError,
    False,
    lambda d: all_of(d.shape.dcp_world_size > 1, not_(is_in(d.route.path, LSE_PATHS))),
    lambda d: (
        f"AssertionError: forward_mqa on {d.route.path} returns no LSE, which the DCP merge of "
        f"{d.shape.dcp_world_size} ranks asserts (assert lse is not None)"
    ),
    "vLLM mla_attention.py MLAAttention forward, after forward_mqa (the DCP LSE merge)",
)

GLUON_UNBUILT = Failure(  # vLLM's loader raises before mla_gluon exists to assert anything
    "gluon_unbuilt",
    "no usable Gluon build",
    "vllm",
    RuntimeError,
    False,
    lambda c: not_(c.check.built),
    lambda c: "no usable Gluon build: loading mla_gluon fails on the first call",
    "vLLM rocm_aiter_mla.py _get_mla_gluon, at the first Gluon call of forward_mqa",
)

GLUON_ASSERTS: tuple[Failure, ...] = (
    _gluon(
        "gluon_arch",
        "Gluon asserts gfx950",
        AssertionError,
        lambda c: not_(c.check.arch_ok),
        lambda c: f"AssertionError: mla_gluon requires gfx950 (CDNA4), running on {c.arch}",
        "AITER mla_gluon (aiter/ops/triton/gluon/mla_gluon.py)",
    ),
    _gluon(
        "gluon_dtype",
        "Gluon rejects the dtype or heads",
        AssertionError,
        lambda c: not_(all_of(c.check.dtype_ok, c.check.heads_ok)),
        lambda c: (
            (
                f"AssertionError in mla_gluon: q {c.q_dtype} with KV {c.kv_dtype} not served "
                "(bf16 query required)"
            )
            if not c.check.dtype_ok
            else f"AssertionError in mla_gluon: nhead {c.heads} above the bound"
        ),
        "AITER mla_gluon (aiter/ops/triton/gluon/mla_gluon.py)",
    ),
    _gluon(
        "gluon_batch",
        "Gluon fp8 asserts batch size 1",
        AssertionError,
        lambda c: not_(c.check.batch_ok),
        lambda c: (
            f"AssertionError in mla_gluon bh16bn128: batch_size == 1 "
            f"(fp8 KV, {c.num_reqs} request(s) x qlen {c.qlen})"
        ),
        "AITER mla_gluon (aiter/ops/triton/gluon/mla_gluon.py)",
    ),
)


def segmented_fits(d: Decision) -> Term:
    """AITER's segmented MLA fits the arch's LDS for the step's gathered heads and cache (sources §60)."""
    return segmented_mla_fits(
        d.shape.arch, is_quantized_kv_cache(d.shape.kv_cache_dtype), d.route.decode_heads
    )


SEGMENTED_LDS = Failure(  # vLLM 0.33.0 L307-321 explains why it added _segmented_mla_fits_lds (sources §60)
    "segmented_lds",
    "segmented MLA exceeds gfx942 LDS",
    "segmented",
    RuntimeError,
    False,
    lambda d: not_(segmented_fits(d)),
    lambda d: (
        f"Triton OutOfResources compiling AITER's segmented MLA for {d.route.decode_heads} fp8 heads on "
        f"{d.shape.arch}: it needs 128 KiB of LDS, 64 KiB exist"
    ),
    "AITER aiter/ops/triton/attention/mla.py mla_decode_fwd (segmented MLA, compiled at its first call)",
)

HEAD_PADDING = Failure(
    "head_padding",
    "padded heads != kernel heads",
    "padding",
    RuntimeError,
    False,
    lambda d: d.route.padded_q_heads != d.route.request.padded_heads,
    lambda d: (
        f"{d.route.head_padding} pads {d.route.decode_heads} heads to {d.route.padded_q_heads}, "
        f"the kernel expects {d.route.request.padded_heads}"
    ),
    "AITER mla_decode_fwd, handed the query vLLM's get_mla_padded_q made",
)

ASM_FAILURES: tuple[Failure, ...] = (
    _asm(
        "key_error",
        "get_block_n_fp8 KeyError",
        KeyError,
        lambda c: all_of(c.lookup.block_n_lookup, not_(c.lookup.block_n_key_ok)),
        lambda c: (
            f"KeyError: get_block_n_fp8[{c.request.padded_heads}*{c.request.kernel_qlen}="
            f"{c.request.padded_heads * c.request.kernel_qlen}]"
        ),
        "AITER aiter/mla.py get_meta_param (non-persistent fp8 split metadata)",
    ),
    _asm(
        "fold_assert",
        "head-fold assert (nhead not supported)",
        AssertionError,
        lambda c: c.lookup.fold_error,
        lambda c: (
            f"AssertionError: nhead={c.request.padded_heads} and max_seqlen_q={c.request.kernel_qlen} "
            "not supported (persistent head fold)"
        ),
        "AITER aiter/mla.py mla_decode_fwd (persistent head fold)",
    ),
    _asm(
        "aiter_check",
        "AITER_CHECK fails in asm_mla.cu",
        RuntimeError,
        lambda c: c.lookup.check_error,
        lambda c: (
            f"AITER_CHECK failed in asm_mla.cu normalisation for gqa {c.request.padded_heads}, "
            f"qlen {c.request.kernel_qlen} ({c.key()})"
        ),
        "AITER asm_mla.cu (entry checks and normalisation)",
    ),
    _asm(
        "no_kernel",
        "no ASM kernel (cannot get heuristic kernel)",
        RuntimeError,
        lambda c: not_(c.lookup.row_found),
        lambda c: f"cannot get heuristic kernel! {c.key()}",
        "AITER asm_mla.cu get_heuristic_kernel_mla",
    ),
)

GLUON_FAILURES: tuple[Failure, ...] = (GLUON_UNBUILT, *GLUON_ASSERTS)  # what stops a step on a Gluon path
FAILURES: tuple[Failure, ...] = (
    VLLM_RAISES,
    DCP_NO_ROUTE,
    *GLUON_FAILURES,
    DCP_NO_LSE,
    SEGMENTED_LDS,
    HEAD_PADDING,
    *ASM_FAILURES,
)
FAILURE_BY_KIND = {f.kind: f for f in FAILURES}
KINDS: tuple[str, ...] = (NONE, *FAILURE_BY_KIND)
# conform reads a refusal as NO_KERNEL: AITER turns the request down.  vLLM raising (or its loader failing, or
# its padding handing the kernel the wrong head count) on a shape the engine accepted is a CRASH.
REFUSALS: tuple[str, ...] = tuple(f.kind for f in FAILURES if f.refusal)


def _conditions(d: Decision) -> list[tuple[Failure, Any, Term]]:
    """(failure, its call, its condition on this step), in the order the code meets them."""
    gluon, asm = d.gluon_call, d.asm_call
    return [
        (VLLM_RAISES, d, VLLM_RAISES.fails(d)),
        (DCP_NO_ROUTE, d, DCP_NO_ROUTE.fails(d)),
        *[(f, gluon, all_of(d.on_gluon, f.fails(gluon))) for f in GLUON_FAILURES],
        (DCP_NO_LSE, d, DCP_NO_LSE.fails(d)),
        (SEGMENTED_LDS, d, all_of(eq(d.route.path, "segmented_dcp_verify"), SEGMENTED_LDS.fails(d))),
        (HEAD_PADDING, d, all_of(d.on_asm, HEAD_PADDING.fails(d))),
        *[(f, asm, all_of(d.on_asm, f.fails(asm))) for f in ASM_FAILURES],
    ]


def failure_kind(d: Decision) -> Term:
    """The kind of the first failure on the step's path (``"none"`` where it runs), in any interpretation."""
    return choose(KINDS, [(cond, f.kind) for f, _, cond in _conditions(d)], NONE)


def first_failure(d: Decision) -> tuple[Failure, str] | None:
    """The first failure of one concrete step and its message; None where the step runs."""
    return next(((f, f.message(call)) for f, call, cond in _conditions(d) if cond), None)


def first_of(failures: tuple[Failure, ...], call: Any) -> tuple[Failure, str] | None:
    """The first of a list of failures (GLUON_FAILURES, GLUON_ASSERTS, ASM_FAILURES) for a concrete call."""
    return next(((f, f.message(call)) for f in failures if f.fails(call)), None)


# --- the symptom: what really happens on a step's route -----------------------------------------------
#
# A step that fails raises (above).  A step that runs can still be wrong (its output is not the attention
# of its inputs, and nothing says so) or right but not on the schedule vLLM planned (performance only).
# :func:`symptom_of` names the first of these on a step's route, in that order of severity: what check's
# JSON carries per counterexample and what tests/test_symptoms_executed.py holds against the executed
# release.

CRASH = "crash"  # the step raises (which exception, raised where): the engine dies mid-run
STARTUP_ABORT = "startup-abort"  # vLLM refuses the deployment while the engine starts (builder/impl init)
SILENT_WRONG_OUTPUT = "silent-wrong-output"  # the step runs and returns wrong numbers, no error
PERFORMANCE = "performance"  # the step runs and is right, but not as vLLM planned it
SYMPTOM_KINDS: tuple[str, ...] = (CRASH, STARTUP_ABORT, SILENT_WRONG_OUTPUT, PERFORMANCE)
# No Failure above is raised at engine start: the start-time refusals (is_valid_num_heads, the reorder
# threshold) are the revisions' validity rules, so no counterexample has one.  The kind is kept for the
# executed side, which would show one (tests/test_symptoms_executed.py maps it).


@dataclass(frozen=True)
class Effect:
    """A way a step runs but not as it should: wrong output (``SILENT_WRONG_OUTPUT``) or a lost schedule
    (``PERFORMANCE``)."""

    kind: str  # the cause a symptom names
    symptom: str  # SILENT_WRONG_OUTPUT or PERFORMANCE
    applies: Callable[[Decision], Term]
    message: Callable[[Decision, Registry], str]


def _gluon_reads_fp8(d: Decision) -> Term:
    return all_of(d.on_gluon, eq(d.gluon_call.kv_dtype, "fp8"))


def v_scaled_once(d: Decision) -> Term:
    """An ASM kernel's V gets the cache's scale exactly once: vLLM rescales exactly where the kernel left it
    unscaled (sources §57)."""
    return iff(d.v_scale_dropped, d.route.v_scale_fix)


def v_scale_miscounted(d: Decision) -> Term:
    """An ASM step over an fp8 cache whose V does not get the cache's scale exactly once: the kernel leaves
    it unscaled and vLLM does not rescale, or vLLM rescales what the kernel already scaled."""
    return all_of(d.on_asm, eq(d.route.request.kv_dtype, "fp8"), not_(v_scaled_once(d)))


def v_scale_text(d: Decision, reg: Registry) -> str:
    """What a step's V scaling comes to, with its kernel, for a concrete step."""
    kernel = resolved_kernel(reg, d.shape.arch, d.route.request, d.asm)
    if d.v_scale_dropped and not d.route.v_scale_fix:
        return (
            f"{kernel} applies kv_scale to the scores but not to V, and vLLM does not rescale: the output is "
            f"short by the cache's scale (aiter {reg.aiter_version}, reported)"
        )
    if d.route.v_scale_fix and not d.v_scale_dropped:
        return (
            "vLLM multiplies the output by k_scale (its probe asked about the fp8-query kernel), but "
            f"{kernel} already applied it: V scaled twice"
        )
    return f"{kernel} scales V by the cache's scale once"


def known_wrong_text(d: Decision, reg: Registry) -> str:
    """The registry's known-wrong entries a step lands on: what each is, what it does, how it is known."""
    hit = [w for w, matched in zip(reg.known_wrong, d.known_wrong, strict=True) if matched]
    return f"{d.route.path} runs " + "; ".join(
        f"{w.what}: {w.effect} (aiter {reg.aiter_version}, {w.status})" for w in hit
    )


def unpad_recovers_heads(d: Decision) -> Term:
    """forward_mqa's cut of the ASM output (and LSE) undoes get_mla_padded_q: head ``i`` of what comes back
    is the kernel's output for query head ``i``.  True where nothing was padded; else the stride slice after
    repeat_interleave, the prefix after the tile (the CPRR route's ``o[:, :heads]`` after repeat_interleave
    is neither; sources §61)."""
    r = d.route
    return any_of(
        eq(r.head_padding, "none"),
        all_of(eq(r.head_padding, "repeat_interleave"), eq(r.head_unpad, "stride")),
        all_of(eq(r.head_padding, "tile"), eq(r.head_unpad, "prefix")),
    )


def unpad_text(d: Decision, reg: Registry) -> str:
    """Which heads come back on a step whose unpad does not undo its padding, for a concrete step."""
    r = d.route
    h, m = int(r.decode_heads), int(r.padded_q_heads)
    kept = {"stride": f"o[:, ::{m // h if h else 0}]", "prefix": f"o[:, :{h}]", "none": "o"}[r.head_unpad]
    text = f"{r.head_padding} pads {h} heads to {m} and forward_mqa keeps {kept} of the output and the LSE"
    if r.head_padding == "repeat_interleave" and r.head_unpad == "prefix" and h:
        rep = m // h
        wrong = sum(1 for i in range(h) if i // rep != i)
        text += (
            f": head i comes back as query head i // {rep}'s attention, wrong for {wrong} of the {h} heads"
        )
    return text


WRONG_OUTPUTS: tuple[Effect, ...] = (
    Effect(
        "gluon_kv_scale",
        SILENT_WRONG_OUTPUT,
        lambda d: all_of(_gluon_reads_fp8(d), not_(d.route.kv_scale_passed)),
        lambda d, reg: (
            "mla_gluon reads the fp8 KV cache with the kv_scale=1.0 vLLM passes, not the cache's "
            "scale: attention off by that scale"
        ),
    ),
    Effect(
        "gluon_kv_bound",
        SILENT_WRONG_OUTPUT,
        lambda d: all_of(d.on_gluon, not_(d.gluon.kv_in_bounds)),
        lambda d, reg: (
            f"mla_gluon reads a {d.shape.kv_cache_bytes:,}-byte layer KV cache past the "
            f"{reg.gluon_max_kv_cache_bytes:,} bytes it addresses correctly (aiter {reg.aiter_version})"
        ),
    ),
    Effect(
        "decode_verify_overlap",
        SILENT_WRONG_OUTPUT,
        lambda d: all_of(d.route.use_gluon_decode, d.route.use_gluon_verify, d.shape.max_qo_len > 1),
        lambda d, reg: (
            f"a {d.shape.max_qo_len}-token verify step run through the single-token Gluon "
            "decode: every token but one attends wrongly"
        ),
    ),
    Effect("asm_v_scale", SILENT_WRONG_OUTPUT, v_scale_miscounted, v_scale_text),
    Effect(
        "known_wrong",
        SILENT_WRONG_OUTPUT,
        lambda d: all_of(d.on_asm, any_of(*d.known_wrong)),
        known_wrong_text,
    ),
    Effect(  # the last thing forward_mqa does on an ASM path: cut the padded heads off (sources §61)
        "head_unpad",
        SILENT_WRONG_OUTPUT,
        lambda d: all_of(d.on_asm, not_(unpad_recovers_heads(d))),
        unpad_text,
    ),
    Effect(  # only a file whose __init__ sizes the buffers short of its gate (spec.realcode.buffer_sizing)
        "metadata_overrun",
        SILENT_WRONG_OUTPUT,
        lambda d: (
            False
            if d.route.metadata_qlen is None
            else all_of(d.route.use_persistent_metadata, d.shape.max_qo_len > d.route.metadata_qlen)
        ),
        lambda d, reg: (
            f"get_mla_metadata_v1 writes the schedule of a {d.shape.max_qo_len}-token step into buffers "
            f"__init__ sized for qlen <= {d.route.metadata_qlen}: memory past them is overwritten"
        ),
    ),
)

PERFORMANCE_LOSSES: tuple[Effect, ...] = (
    Effect(
        "persistent_dropped",
        PERFORMANCE,
        lambda d: all_of(d.on_asm, d.route.use_persistent_metadata, not_(d.asm.persistent)),
        lambda d, reg: (
            f"aiter {reg.aiter_version} drops vLLM's persistent work metadata at batch >= "
            f"{reg.persistent_max_batch} and runs the step non-persistent: the buffers were built for nothing"
        ),
    ),
    Effect(
        "persistent_gate_closed",
        PERFORMANCE,
        lambda d: all_of(d.on_asm, d.route.wants_persistent_metadata, not_(d.route.use_persistent_metadata)),
        lambda d, reg: (
            f"qlen {d.shape.max_qo_len} exceeds _mtp_decode_qlen {d.route.mtp_decode_qlen}: vLLM "
            "skips its persistent schedule and AITER runs the step on its own split metadata"
        ),
    ),
    Effect(
        "metadata_unused",
        PERFORMANCE,
        lambda d: all_of(d.route.use_persistent_metadata, not_(d.on_asm)),
        lambda d, reg: (
            f"persistent metadata built for a step that runs on {d.route.path}: the buffers "
            "and their build are wasted"
        ),
    ),
)


@dataclass(frozen=True)
class Symptom:
    """What one concrete step really does, for a counterexample: its kind and cause, and for a crash the
    exception and the code that raises it."""

    kind: str  # one of SYMPTOM_KINDS, or NONE where the step shows none of them
    cause: str  # the Failure's or the Effect's kind
    summary: str  # the kind in words ("crash: KeyError raised in ...", "silent wrong output, no error")
    message: str = ""  # what happens, with the step's values: the exception's text, or the effect's
    exception: str | None = None  # its type's name (a crash)
    raised_in: str | None = None  # the code that raises it (a crash)

    @property
    def headline(self) -> str:
        """The summary, then the message."""
        return f"{self.summary}: {self.message}" if self.message else self.summary

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"symptom_kind": self.kind, "symptom_cause": self.cause}
        if self.exception is not None:
            out.update(exception=self.exception, raised_in=self.raised_in)
        return out


def symptom_of(d: Decision, registry: Registry) -> Symptom:
    """The first thing that goes wrong on one concrete step's route: a crash (the failure order above),
    else wrong output, else a lost schedule; ``NONE`` where none of them happens."""
    found = first_failure(d)
    if found:
        f, message = found
        name = f.exception.__name__
        return Symptom(CRASH, f.kind, f"crash: {name} raised in {f.raised_in}", message, name, f.raised_in)
    for e in (*WRONG_OUTPUTS, *PERFORMANCE_LOSSES):
        if e.applies(d):
            what = "silent wrong output, no error" if e.symptom == SILENT_WRONG_OUTPUT else "performance only"
            return Symptom(e.symptom, e.kind, what, e.message(d, registry))
    return Symptom(NONE, NONE, "no crash, wrong output or lost schedule on this step")
