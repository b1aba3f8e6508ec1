"""Views: what tells two counterexamples of an invariant apart (Apalache's --view).

A counterexample class is the set of violating shapes that agree on an
invariant's view, e.g. ``(arch, q_dtype, path)`` for fp8-never-reaches-gluon.
Head counts, query lengths and speculative-token counts are never in a view:
within a class the prover reports the smallest of them.  The view terms are
written with :mod:`mla_model.logic`, so the brute-force cross-check computes
the same classes from the numpy interpretation.
"""

from __future__ import annotations

from typing import Any

from mla_model.decision import Decision
from mla_model.derived import kernel_kv_dtype, parallel_drafting
from mla_model.logic import all_of, choose, is_in, not_

DRAFTER_FAMILIES = ("none", "mtp", "serial", "parallel")
FAILURES = (
    "none",
    "vllm_raises",
    "gluon_unbuilt",
    "gluon_arch",
    "gluon_dtype",
    "gluon_batch",
    "key_error",
    "fold_assert",
    "aiter_check",
    "no_kernel",
    "head_padding",
)


def drafter_family(s: Any) -> Any:
    """none, mtp (the pre-#51011 whitelist), serial drafters, parallel drafters."""
    return choose(
        DRAFTER_FAMILIES,
        [(is_in(s.spec_method, ("none",)), "none"), (is_in(s.spec_method, ("mtp", "deepseek_mtp")), "mtp"),
         (parallel_drafting(s), "parallel")],
        "serial",
    )


def failure_kind(d: Decision) -> Any:
    """The first thing that fails on the step's path, in the order the code meets it."""
    g, a, r = d.gluon, d.asm, d.route
    return choose(
        FAILURES,
        [
            (r.vllm_raises, "vllm_raises"),
            (all_of(d.on_gluon, not_(g.built)), "gluon_unbuilt"),
            (all_of(d.on_gluon, not_(g.arch_ok)), "gluon_arch"),
            (all_of(d.on_gluon, not_(all_of(g.dtype_ok, g.heads_ok))), "gluon_dtype"),
            (all_of(d.on_gluon, not_(g.batch_ok)), "gluon_batch"),
            (all_of(d.on_asm, r.padded_q_heads != r.request.padded_heads), "head_padding"),
            (all_of(d.on_asm, a.block_n_lookup, not_(a.block_n_key_ok)), "key_error"),
            (all_of(d.on_asm, a.fold_error), "fold_assert"),
            (all_of(d.on_asm, a.check_error), "aiter_check"),
            (all_of(d.on_asm, not_(a.row_found)), "no_kernel"),
        ],
        "none",
    )


def view_terms(d: Decision, names: tuple[str, ...]) -> dict[str, Any]:
    s = d.shape
    makers = {
        "arch": lambda: s.arch,
        "q_dtype": lambda: s.q_dtype,
        "kv": lambda: kernel_kv_dtype(s),
        "drafter": lambda: drafter_family(s),
        "mode": lambda: s.asm_padding_mode,
        "gluon_build": lambda: s.gluon_build,
        "causal": lambda: s.causal,
        "path": lambda: d.route.path,
        "failure": lambda: failure_kind(d),
    }
    return {name: makers[name]() for name in names}
