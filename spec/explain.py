"""Explain one shape: validity, route, AITER's lookup, each invariant, and why not persistent.

"Why not persistent" comes from the unsat core of the gate: every field of the
shape is asserted as a tracked literal next to ``use_persistent_metadata``;
the core names the field values that, together, keep the schedule off.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import z3

from mla_model.decision import decide
from mla_model.registry import kernel_name
from mla_model.revisions.base import Revision
from mla_model.registry import Registry
from mla_model.shape import FIELDS, Shape
from spec.invariants import INVARIANTS
from spec.prover import _z3, problem
from spec.symptoms import describe_violation


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, type(None))) else (bool(value) if isinstance(value, bool) else int(value))


def why_not_persistent(revision: Revision, registry: Registry, shape: Shape) -> list[str]:
    """The field values that keep the persistent schedule off (an unsat core), as 'name=value'."""
    p = problem(revision, registry)
    s = z3.Solver()
    s.add(*p.symbolic.domain, _z3(p.decision.route.use_persistent_metadata))
    for spec in FIELDS:
        var, value = p.symbolic.variables[spec.name], getattr(shape, spec.name)
        literal = var == spec.values.index(value) if spec.kind == "enum" else (
            var == z3.BoolVal(value) if spec.kind == "bool" else var == value)
        s.assert_and_track(literal, f"{spec.name}={value}")
    if s.check() != z3.unsat:
        return []
    return sorted(str(c) for c in s.unsat_core())


def explain(revision: Revision, registry: Registry, shape: Shape) -> dict[str, Any]:
    d = decide(revision, registry, shape)
    validity = {name: bool(ok) for name, ok in revision.validity(shape, registry)}
    r, a = d.route, d.asm
    kernel = {
        "persistent_after_aiter": bool(a.persistent),
        "block_n_lookup": bool(a.block_n_lookup),
        "block_n_key": int(r.request.padded_heads) * int(r.request.kernel_qlen),
        "block_n_key_ok": bool(a.block_n_key_ok),
        "head_fold_assert": bool(a.fold_error),
        "aiter_check_fails": bool(a.check_error),
        "key": {"q_type": r.request.q_dtype, "kv_type": r.request.kv_dtype, "gqa": int(a.gqa),
                "ps": int(bool(a.ps)), "qseqlen": int(a.qseqlen), "causal": int(bool(a.causal))},
        "kernel": kernel_name(registry, shape.arch, r.request, a),
        "gluon": {f.name: bool(getattr(d.gluon, f.name)) for f in fields(d.gluon)},
    }
    invariants = {}
    for inv in INVARIANTS:
        holds = bool(inv.holds(d))
        invariants[inv.id] = {"holds": holds, **({} if holds else {"symptom": describe_violation(inv, d, registry)})}
    out = {
        "revision": revision.id,
        "registry": registry.id,
        "shape": shape.to_json(),
        "valid": all(validity.values()),
        "validity": validity,
        "route": r.to_json(),
        "kernel": kernel,
        "invariants": invariants,
    }
    if out["valid"] and not r.use_persistent_metadata:
        out["why_not_persistent"] = why_not_persistent(revision, registry, shape)
    return out
