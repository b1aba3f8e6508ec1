"""A gate revision's route together with what the AITER registry makes of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mla_model.derived import kernel_kv_dtype
from mla_model.logic import is_in
from mla_model.registry import AsmLookup, GluonCheck, Registry, asm_lookup, gluon_check
from mla_model.revisions.base import Revision
from mla_model.route import ASM_PATHS, GLUON_PATHS, Route


@dataclass(frozen=True)
class Decision:
    """Everything the invariants read about one decode step."""

    shape: Any
    route: Route
    asm: AsmLookup
    gluon: GluonCheck

    @property
    def on_gluon(self) -> Any:
        return is_in(self.route.path, GLUON_PATHS)

    @property
    def on_asm(self) -> Any:
        return is_in(self.route.path, ASM_PATHS)


def decide(revision: Revision, registry: Registry, s: Any) -> Decision:
    route = revision.route(s, registry)
    return Decision(
        shape=s,
        route=route,
        asm=asm_lookup(registry, s.arch, route.request, s.num_reqs),
        gluon=gluon_check(
            registry, s.arch, s.gluon_build, s.q_dtype, kernel_kv_dtype(s), route.decode_heads,
            route.gluon_batch_is_one,
        ),
    )


def asm_key(d: Decision) -> str:
    """AITER's lookup key for the request, as asm_mla.cu prints it."""
    a, r = d.asm, d.route.request
    return (
        f"q_type:{r.q_dtype} kv_type:{r.kv_dtype} gqa:{int(a.gqa)} ps:{int(bool(a.ps))} "
        f"qseqlen:{int(a.qseqlen)} causal:{int(bool(a.causal))} on {d.shape.arch}"
    )


def asm_failure(d: Decision) -> str:
    """What AITER raises for the ASM request, in its own words; empty when a kernel runs it."""
    a, r = d.asm, d.route.request
    if a.fold_error:
        return f"AssertionError: nhead={r.padded_heads} and max_seqlen_q={r.kernel_qlen} not supported (persistent head fold)"
    if a.check_error:
        return f"AITER_CHECK failed in asm_mla.cu normalisation for gqa {r.padded_heads}, qlen {r.kernel_qlen} ({asm_key(d)})"
    if not a.row_found:
        return f"cannot get heuristic kernel! {asm_key(d)}"
    return ""
