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
from mla_model.failures import failure_kind
from mla_model.logic import Term, choose, is_in

DRAFTER_FAMILIES = ("none", "mtp", "serial", "parallel")


def drafter_family(s: Any) -> Term:
    """none, mtp (the pre-#51011 whitelist), serial drafters, parallel drafters."""
    return choose(
        DRAFTER_FAMILIES,
        [
            (is_in(s.spec_method, ("none",)), "none"),
            (is_in(s.spec_method, ("mtp", "deepseek_mtp")), "mtp"),
            (parallel_drafting(s), "parallel"),
        ],
        "serial",
    )


def view_terms(d: Decision, names: tuple[str, ...]) -> dict[str, Term]:
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
