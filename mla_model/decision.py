"""A gate revision's route together with what the AITER registry makes of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mla_model.derived import kernel_kv_dtype
from mla_model.failures import AsmCall, GluonCall
from mla_model.logic import Term, all_of, if_then_else, is_in, not_
from mla_model.registry import (
    AsmLookup,
    GluonCheck,
    Registry,
    asm_lookup,
    gluon_check,
    known_wrong_matches,
    v_scale_dropped,
)
from mla_model.revisions.base import Revision
from mla_model.route import ASM_PATHS, GLUON_PATHS, Route


@dataclass(frozen=True)
class Decision:
    """Everything the invariants read about one decode step."""

    shape: Any
    route: Route
    asm: AsmLookup
    gluon: GluonCheck
    known_wrong: tuple[
        Term, ...
    ] = ()  # per registry entry of known-wrong kernels: the ASM request lands on it
    v_scale_dropped: Term = False  # the ASM kernel applies kv_scale to the scores but not to V

    @property
    def on_gluon(self) -> Term:
        return is_in(self.route.path, GLUON_PATHS)

    @property
    def on_asm(self) -> Term:
        return is_in(self.route.path, ASM_PATHS)

    @property
    def scales(self) -> dict[str, Term]:
        """The scales the step's kernel is handed and what it applies (sources §16, §27, §57): an ASM or
        Triton kernel gets the layer's q and k scales; mla_gluon gets no query scale and, over an fp8
        cache, the kv_scale=1.0 vLLM passes; the passed kv scale multiplies the scores; V gets it from the
        kernel unless the kernel drops it, and once more where vLLM rescales the output."""
        on_gluon = self.on_gluon
        kv_passed = if_then_else(on_gluon, self.route.kv_scale_passed, True)
        kernel_v = if_then_else(all_of(kv_passed, not_(all_of(self.on_asm, self.v_scale_dropped))), 1, 0)
        return {
            "q_scale_passed": not_(on_gluon),
            "kv_scale_passed": kv_passed,
            "kv_scale_on_scores": kv_passed,
            "kv_scale_on_v_times": kernel_v + if_then_else(all_of(self.on_asm, self.route.v_scale_fix), 1, 0),
        }

    @property
    def gluon_call(self) -> GluonCall:
        """What mla_gluon would be handed on this step."""
        s = self.shape
        return GluonCall(
            self.gluon,
            s.arch,
            s.q_dtype,
            kernel_kv_dtype(s),
            self.route.decode_heads,
            s.num_reqs,
            s.max_qo_len,
        )

    @property
    def asm_call(self) -> AsmCall:
        """What mla_decode_fwd would be handed on this step, and how AITER resolves it."""
        return AsmCall(self.route.request, self.asm, self.shape.arch)


def decide(revision: Revision, registry: Registry, s: Any) -> Decision:
    route = revision.route(s, registry)
    asm = asm_lookup(registry, s.arch, route.request, s.num_reqs)
    return Decision(
        shape=s,
        route=route,
        asm=asm,
        gluon=gluon_check(
            registry,
            s.arch,
            s.gluon_build,
            s.q_dtype,
            kernel_kv_dtype(s),
            route.decode_heads,
            route.gluon_batch_is_one,
            s.kv_cache_bytes,
        ),
        known_wrong=tuple(known_wrong_matches(registry, s.arch, route.request, asm)),
        v_scale_dropped=v_scale_dropped(registry, s.arch, route.request, asm),
    )
