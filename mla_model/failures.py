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
request is NO_KERNEL, anything else a CRASH).  Sources: aiter/mla.py
``get_meta_param`` and head fold, asm_mla.cu (sources §32-§34, §37), mla_gluon.py's
asserts (sources §41-§42), vLLM 0.30.0's non-causal fp8 qlen-2 raise (sources §29).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mla_model.logic import Term, all_of, choose, not_
from mla_model.registry import AsmLookup, GluonCheck
from mla_model.route import KernelRequest

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
        return (
            f"q_type:{r.q_dtype} kv_type:{r.kv_dtype} gqa:{int(a.gqa)} ps:{int(bool(a.ps))} "
            f"qseqlen:{int(a.qseqlen)} causal:{int(bool(a.causal))} on {self.arch}"
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


def _refusal(where: str) -> Callable[..., Failure]:
    """A maker of ``where``'s refusals (mla_gluon's asserts, AITER's ASM dispatch): conform's NO_KERNEL."""

    def make(
        kind: str,
        label: str,
        exception: type[BaseException],
        fails: Callable[[Any], Term],
        message: Callable[[Any], str],
    ) -> Failure:
        return Failure(kind, label, where, exception, True, fails, message)

    return make


_gluon, _asm = _refusal("gluon"), _refusal("asm")


VLLM_RAISES = Failure(
    "vllm_raises",
    "vLLM raises before any kernel",
    "vllm",
    ValueError,
    False,
    lambda d: d.route.vllm_raises,
    lambda d: "vLLM raises ValueError: no non-causal fp8 qlen-2 kernel for these heads",
)

GLUON_UNBUILT = Failure(  # vLLM's loader raises before mla_gluon exists to assert anything
    "gluon_unbuilt",
    "no usable Gluon build",
    "vllm",
    RuntimeError,
    False,
    lambda c: not_(c.check.built),
    lambda c: "no usable Gluon build: loading mla_gluon fails on the first call",
)

GLUON_ASSERTS: tuple[Failure, ...] = (
    _gluon(
        "gluon_arch",
        "Gluon asserts gfx950",
        AssertionError,
        lambda c: not_(c.check.arch_ok),
        lambda c: f"AssertionError: mla_gluon requires gfx950 (CDNA4), running on {c.arch}",
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
    ),
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
    ),
    _asm(
        "no_kernel",
        "no ASM kernel (cannot get heuristic kernel)",
        RuntimeError,
        lambda c: not_(c.lookup.row_found),
        lambda c: f"cannot get heuristic kernel! {c.key()}",
    ),
)

GLUON_FAILURES: tuple[Failure, ...] = (GLUON_UNBUILT, *GLUON_ASSERTS)  # what stops a step on a Gluon path
FAILURES: tuple[Failure, ...] = (VLLM_RAISES, *GLUON_FAILURES, HEAD_PADDING, *ASM_FAILURES)
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
        *[(f, gluon, all_of(d.on_gluon, f.fails(gluon))) for f in GLUON_FAILURES],
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
