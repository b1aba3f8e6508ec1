"""Counterexample classes by identity, and a check compared with a baseline class by class.

Every release violates some invariants on purpose, so for an edited ``rocm_aiter_mla.py`` the question is
what the edit adds or removes, not whether a verdict is VIOLATED.  A class's identity is its class-view
values (:mod:`spec.proof.views`) and the route of its smallest counterexample (the parts its path reads),
as canonical JSON: the prover enumerates classes in z3's model order but proves each class's smallest shape
least (:mod:`spec.proof.prover`), so the identity does not depend on that order, and the same class in two
files (or in a file and its release) is the same class.

Compared with a baseline's classes for the same (registry, invariant), each class of the check is NEW
(not in the baseline) or UNCHANGED, and each class of the baseline not found is GONE (fixed).  A NEW class
is a surprise even where the baseline's verdict was VIOLATED already; GONE is claimed only where the check
enumerated every class.  The states are SARIF 2.1.0's ``baselineState`` values: new, unchanged, absent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mla_model.route import ASM_PATHS
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult, Counterexample
from spec.proof.verdict import UNKNOWN

NEW, UNCHANGED, ABSENT = "new", "unchanged", "absent"  # SARIF 2.1.0 §3.27.24 baselineState


# What forward_mqa hands the ASM kernel (mla_model.route: the KernelRequest and get_mla_padded_q's padding and
# its undoing): part of a route only where the path is an ASM one.  The model computes them for every step,
# so on a Gluon or Triton path they are values no kernel reads, and an edit that moves them there (the
# padding target, say) does not change what that class runs.
ASM_ONLY = ("request", "padded_q_heads", "head_padding", "head_unpad")


# Route facts that are not routing: the qlen the buffers are sized for (read from a file only), so a file
# that sizes them otherwise keeps every class whose route it does not change.
NOT_ROUTING = frozenset({"metadata_qlen"})


def class_id(c: Counterexample) -> str:
    """The class's identity: 16 hex digits of the SHA-256 of its view values and route (without
    :data:`NOT_ROUTING`, nor :data:`ASM_ONLY` off an ASM path), as sorted JSON."""
    route = {
        k: v
        for k, v in c.route.items()
        if k not in NOT_ROUTING and (c.route["path"] in ASM_PATHS or k not in ASM_ONLY)
    }
    canonical = json.dumps({"view": c.view, "route": route}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def class_json(c: Counterexample) -> dict[str, Any]:
    """A class as the JSON outputs and the baseline cache carry it: its identity, view values and smallest
    counterexample."""
    return {"class_id": class_id(c), "class_view": c.view, **c.to_json()}


@dataclass(frozen=True)
class BaselineResult:
    """What a baseline gave for one (registry, invariant): its verdict and its classes by identity."""

    verdict: str
    complete: bool  # every class enumerated
    classes: dict[str, dict[str, Any]]  # class_id -> class_json

    @classmethod
    def of(cls, r: CheckResult) -> BaselineResult:
        return cls(r.verdict, r.complete, {j["class_id"]: j for j in map(class_json, r.counterexamples)})


@dataclass(frozen=True)
class Baseline:
    """The classes of the revision a check is compared with, per (registry, invariant)."""

    label: str  # "vllm==0.34.0" or a path
    how: str  # why it is the baseline, for the output
    results: dict[tuple[str, str], BaselineResult]

    def to_json(self) -> dict[str, Any]:
        """Its classes, as the cache keeps them (the label and the reason are the caller's)."""
        return {
            "results": [
                {"registry": reg, "invariant": inv, "verdict": b.verdict, "complete": b.complete}
                | {"classes": list(b.classes.values())}
                for (reg, inv), b in self.results.items()
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], label: str, how: str) -> Baseline:
        return cls(
            label,
            how,
            {
                (r["registry"], r["invariant"]): BaselineResult(
                    r["verdict"], r["complete"], {c["class_id"]: c for c in r["classes"]}
                )
                for r in data["results"]
            },
        )


@dataclass(frozen=True)
class BaselineOutcome:
    """A check result next to its baseline's classes: which are NEW, UNCHANGED and GONE."""

    result: CheckResult
    baseline: Baseline
    new: tuple[Counterexample, ...]
    unchanged: tuple[Counterexample, ...]
    gone: tuple[dict[str, Any], ...]  # the baseline's class_json of each class not found
    # shapes violated here that the baseline holds or refuses, inside classes it already has
    # (spec.proof.growth: set by check where no class is NEW)
    grown: Any = None

    @property
    def counts(self) -> bool:
        """Whether a surprise here changes the exit status: a warning-level invariant's does not, unless
        it is UNKNOWN (a timeout is never a pass)."""
        return self.result.verdict == UNKNOWN or INVARIANT_BY_ID[self.result.invariant].level == "error"

    @property
    def surprise(self) -> bool:
        return self.result.verdict == UNKNOWN or bool(self.new) or self.grown is not None

    def state(self, c: Counterexample) -> str:
        return NEW if any(c is n for n in self.new) else UNCHANGED

    def replaces(self, c: Counterexample) -> dict[str, Any] | None:
        """The GONE class a NEW one stands in place of: the baseline's class with the same view values
        (what differs is the route of its smallest counterexample: :func:`route_changes`), if there is one."""
        return (
            next((g for g in self.gone if g["class_view"] == c.view), None) if self.state(c) == NEW else None
        )

    def to_json(self) -> dict[str, Any]:
        """What a result's JSON adds: its baseline, the counts per state, the GONE classes; and whether it
        is a surprise."""
        return {
            "baseline": {
                "label": self.baseline.label,
                "new": len(self.new),
                "unchanged": len(self.unchanged),
                "absent": [{**g, "baseline_state": ABSENT} for g in self.gone],
                **({"grown": self.grown.to_json()} if self.grown is not None else {}),
            },
            "surprise": self.surprise,
        }


def route_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """The route fields two classes' smallest counterexamples differ in, ``request.`` fields spelled out:
    ``{"mtp_decode_qlen": [2, 3]}``; not :data:`NOT_ROUTING` (no part of a class's identity)."""

    def flat(route: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in route.items() if not isinstance(v, dict) and k not in NOT_ROUTING}
        out |= {f"{k}.{f}": x for k, v in route.items() if isinstance(v, dict) for f, x in v.items()}
        return out

    a, b = flat(old), flat(new)
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def compare_classes(results: Iterable[CheckResult], baseline: Baseline) -> list[BaselineOutcome]:
    """Each result with its classes sorted by the baseline's, in the results' order.  A class the
    baseline lacks is NEW (also where the baseline timed out: nothing is known of it); a baseline class
    the result lacks is GONE only where the result enumerated every class (``--max-classes`` and timeouts
    leave some unseen)."""
    out = []
    for r in results:
        b = baseline.results.get((r.registry, r.invariant))
        known = {} if b is None else b.classes
        ids = [class_id(c) for c in r.counterexamples]
        new = tuple(c for c, i in zip(r.counterexamples, ids) if i not in known)
        unchanged = tuple(c for c, i in zip(r.counterexamples, ids) if i in known)
        enumerated = r.complete and r.verdict != UNKNOWN
        gone = tuple(j for i, j in known.items() if i not in ids) if enumerated else ()
        out.append(BaselineOutcome(r, baseline, new, unchanged, gone))
    return out
