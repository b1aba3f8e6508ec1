"""What a gate revision is, and the pieces several revisions share.

A revision is data plus small pure functions: its gates (named as in vLLM),
composed into a :class:`~mla_model.route.Route` by ``route``.  Adding the next
revision is one new module that builds a :class:`Revision`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mla_model.derived import engine_rules, kernel_kv_dtype, reorder_batch_threshold
from mla_model.logic import Term, all_of, any_of, choose, eq, if_then_else, is_in, maximum
from mla_model.registry import Registry
from mla_model.route import HEAD_PADDINGS, HEAD_UNPADS, PATHS, UNPAD_OF_PADDING, KernelRequest, Route

Rule = tuple[str, Callable[[Any], Term]]  # (name, shape -> term)

# AiterMLAHelper constants (vLLM 0.27.0 on).
_AITER_MIN_MLA_HEADS = 16
# vLLM's AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN (0.28.0 on); public here, every revision from 0.28 reads it.
ASM_PADDED_MAX_PS_QLEN = 4


@dataclass(frozen=True)
class Revision:
    """One known revision of the routing code in rocm_aiter_mla.py."""

    id: str
    title: str
    source: str
    route: Callable[[Any, Registry], Route]
    reorder_batch_threshold: Callable[[Any], Term]
    is_valid_num_heads: Callable[[Term], Term]
    scope: Callable[[Registry], list[Rule]] = lambda reg: []
    # The model's gate functions under vLLM's names, for bind's bounded comparison (revisions built from a
    # shared module set these; otherwise bind finds them in the route's module).
    gates: Mapping[str, Callable[..., Term]] = field(default_factory=dict, hash=False, compare=False)
    # A release's real gates only: the environment knobs its code reads that the model does not know, taken
    # as free inputs (spec.realcode.knobs.Knob; check proves the file at each of their values).
    free_inputs: tuple[Any, ...] = field(default=(), hash=False, compare=False)

    def rules(self, reg: Registry) -> list[Rule]:
        """Engine rules, this revision's head validity and the modelled scope."""
        return [
            *engine_rules(self.reorder_batch_threshold),
            ("is_valid_num_heads(num_heads)", lambda s: self.is_valid_num_heads(s.num_heads)),
            *self.scope(reg),
        ]

    def validity(self, s: Any, reg: Registry) -> list[tuple[str, Term]]:
        """Each validity rule evaluated on ``s``, as (name, term)."""
        return [(name, rule(s)) for name, rule in self.rules(reg)]

    def is_valid(self, s: Any, reg: Registry) -> Term:
        return all_of(*[term for _, term in self.validity(s, reg)])


def causal_only(reg: Registry) -> list[Rule]:
    """Scope of revisions before vLLM 0.30: every decode block is causal (``causal`` arrives in 0.30)."""
    return [("causal decode only (non-causal blocks arrive in vLLM 0.30)", lambda s: s.causal)]


def no_dcp(reg: Registry) -> list[Rule]:
    """Before vLLM 0.29 AiterMLAImpl returns no decode LSE (no ``can_return_lse_for_decode``), and vLLM
    refuses DCP with such a backend when the engine starts (vllm/v1/worker/cp_utils.py L45-51 in 0.27.1 and
    0.28.0: "DCP requires attention implementations to return the softmax LSE during decode")."""
    return [
        (
            "dcp_world_size == 1 (vLLM refuses DCP at startup: no decode LSE from this backend before 0.29)",
            lambda s: s.dcp_world_size == 1,
        ),
        *causal_only(reg),
    ]


def divides_16(h: Term) -> Term:
    """``16 % h == 0`` for ``h >= 1``, written as membership (exact, and linear for z3)."""
    return is_in(h, (1, 2, 4, 8, 16))


def is_valid_num_heads_pre_029(num_heads: Term) -> Term:
    """``AiterMLAHelper.is_valid_num_heads`` in vLLM 0.27-0.28: ``h > 0 and (h < 16 or h % 16 == 0)``."""
    return all_of(
        num_heads > 0, any_of(num_heads < _AITER_MIN_MLA_HEADS, num_heads % _AITER_MIN_MLA_HEADS == 0)
    )


def get_actual_mla_num_heads_pre_029(num_heads: Term) -> Term:
    """``get_actual_mla_num_heads`` before vLLM 0.29: ``max(h, 16)``."""
    return maximum(num_heads, _AITER_MIN_MLA_HEADS)


def whitelist_mtp_decode_qlen(s: Any) -> Term:
    """``_mtp_decode_qlen`` before #51011: ``k + 1`` for ``mtp``/``deepseek_mtp`` drafters only, else 1."""
    return if_then_else(is_in(s.spec_method, ("mtp", "deepseek_mtp")), s.num_spec_tokens + 1, 1)


def divides_padded(h: Term, m: Term) -> Term:
    """``m % h == 0`` for a padded head count ``m = ceil16(h)`` (or 16): exact as membership for h >= 1,
    since h divides 16, or m == h (for h > 16, h < m < 2h unless m == h)."""
    return any_of(divides_16(h), m == h)


def padding_of(h: Term, m: Term, divisor: Term) -> Term:
    """Which get_mla_padded_q branch runs: none at m == h, repeat_interleave for divisors, else tile."""
    return choose(HEAD_PADDINGS, [(h == m, "none"), (divisor, "repeat_interleave")], "tile")


def unpad_cases(padding: Term) -> list[tuple[Term, str]]:
    """get_mla_unpadded_o's slice for a padding (0.28.0 L898-906, 0.34.0 L2536-2552), as ``choose`` cases:
    the stride slice after repeat_interleave, the prefix after the tile (nothing where nothing was padded)."""
    return [(eq(padding, p), UNPAD_OF_PADDING[p]) for p in ("repeat_interleave", "tile")]


def unpad_of(padding: Term) -> Term:
    """The unpad get_mla_unpadded_o applies after ``padding`` (:func:`unpad_cases`)."""
    return choose(HEAD_UNPADS, unpad_cases(padding), "none")


def asm_request(
    s: Any, m: Term, persistent: Term, causal: Term, lse: Term = False, cprr: Term = False
) -> KernelRequest:
    return KernelRequest(
        q_dtype=s.q_dtype,
        kv_dtype=kernel_kv_dtype(s),
        padded_heads=m,
        kernel_qlen=s.max_qo_len,
        persistent=persistent,
        causal=causal,
        lse=lse,
        cprr=cprr,
    )


def forward_path(
    gd: Term, gv: Term, persistent: Term, triton_verify: Term = False, dcp_route: Term = "plain"
) -> Term:
    """forward_mqa's order: Gluon decode, Gluon verify, [Triton verify], [the row-view DCP verifies:
    TRITON, SEGMENTED], else ASM (0.34.0 L3436-3600)."""
    return choose(
        PATHS,
        [
            (gd, "gluon_decode"),
            (gv, "gluon_verify"),
            (triton_verify, "triton_verify"),
            (eq(dcp_route, "triton"), "triton_dcp_verify"),
            (eq(dcp_route, "segmented"), "segmented_dcp_verify"),
            (persistent, "asm_persistent"),
        ],
        "asm_nonpersistent",
    )


def on_gfx950(s: Any) -> Term:
    """vLLM's ``on_gfx950()``, which ``_gluon_mla_decode_supported()`` is (lru-cached) from #50578 on: CDNA3's
    64 KiB LDS cannot hold Gluon's ~160 KiB tiling (sources §11)."""
    return eq(s.arch, "gfx950")


def compose_route(
    s: Any,
    gd: Term,
    gv: Term,
    wants: Term,
    mtp_decode_qlen: Term,
    decode_heads: Term,
    m: Term,
    head_padding: Term,
    padded_q_heads: Term,
    causal: Term,
    gluon_batch_is_one: Term,
    triton_verify: Term = False,
    vllm_raises: Term = False,
    builder_gv: Term = None,
    v_scale_fix: Any = None,
    dcp_route: Term = "plain",
    dcp_raises: Term = False,
    lse: Term = False,
    cprr: Term = False,
    head_unpad: Term = None,
) -> Route:
    """A revision's gates composed into its Route: the builder's persistent gate ``wants and 1 <= qlen <=
    _mtp_decode_qlen``, forward_mqa's order of tests, and Gluon handed kv_scale=1.0 (every revision).
    ``v_scale_fix``, if given, is a function of the persistent gate: where vLLM rescales the ASM output.
    ``head_unpad`` is how forward_mqa cuts the output back; by default get_mla_unpadded_o's, the one that
    undoes ``head_padding`` (:func:`unpad_of`)."""
    qlen = s.max_qo_len
    persistent = all_of(wants, qlen >= 1, qlen <= mtp_decode_qlen)
    return Route(
        path=forward_path(gd, gv, persistent, triton_verify=triton_verify, dcp_route=dcp_route),
        use_gluon_decode=gd,
        use_gluon_verify=gv,
        use_persistent_metadata=persistent,
        wants_persistent_metadata=wants,
        mtp_decode_qlen=mtp_decode_qlen,
        decode_heads=decode_heads,
        head_padding=head_padding,
        padded_q_heads=padded_q_heads,
        head_unpad=unpad_of(head_padding) if head_unpad is None else head_unpad,
        request=asm_request(s, m, persistent, causal=causal, lse=lse, cprr=cprr),
        gluon_batch_is_one=gluon_batch_is_one,
        kv_scale_passed=False,  # both Gluon calls pass kv_scale=1.0
        vllm_raises=vllm_raises,
        builder_use_gluon_verify=builder_gv,
        v_scale_fix=False if v_scale_fix is None else v_scale_fix(persistent),
        dcp_route=dcp_route,
        dcp_raises=dcp_raises,
    )


def pre_dcp_route(
    s: Any,
    gd: Term,
    gv: Term,
    wants: Term,
    mtp_decode_qlen: Term,
    builder_gv: Term = None,
    head_padding: Term = None,
    padded_q_heads: Term = None,
) -> Route:
    """The route of a revision before DCP (0.27, main before #51011, 0.28): the rank's own heads padded to
    ``max(h, 16)`` (by default repeat_interleave for divisors of 16, tile + slice otherwise), always causal,
    Gluon's batch of one only for a single one-token request (the verify flatten makes R*Q rows)."""
    heads, qlen = s.num_heads, s.max_qo_len
    m = get_actual_mla_num_heads_pre_029(heads)
    return compose_route(
        s,
        gd,
        gv,
        wants,
        mtp_decode_qlen,
        heads,
        m,
        head_padding=padding_of(heads, m, divides_16(heads)) if head_padding is None else head_padding,
        padded_q_heads=m if padded_q_heads is None else padded_q_heads,
        causal=True,
        gluon_batch_is_one=all_of(s.num_reqs == 1, qlen == 1),
        builder_gv=builder_gv,
    )


def pre_dcp_revision(id: str, title: str, source: str, route: Callable[[Any, Registry], Route]) -> Revision:
    """A revision before DCP: 0.28's threshold formula, heads valid as ``1..15 or a multiple of 16``, causal
    blocks only, and AiterMLAHelper's shared helpers under vLLM's names for bind (the revision's own gates
    are found in its module)."""
    return Revision(
        id=id,
        title=title,
        source=source,
        route=route,
        reorder_batch_threshold=reorder_batch_threshold,
        is_valid_num_heads=is_valid_num_heads_pre_029,
        scope=no_dcp,
        gates={
            "is_valid_num_heads": is_valid_num_heads_pre_029,
            "get_actual_mla_num_heads": get_actual_mla_num_heads_pre_029,
        },
    )
