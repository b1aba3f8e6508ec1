"""What the generated test modules in tests/generated/ call: load the cases, compare a route with its pin.

A generated module stays a few lines (its cases live in ``cases.jsonl`` beside
it); the comparison lives here so a failure reads the same in every module:
which route fields moved, from what to what, for which shape.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from mla_model.case import Case, expected_route
from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.revisions.base import Revision

# What get_mla_padded_q does to the query tensor is the model's in the real-code harness (it takes tensors;
# docs/fidelity.md), so a real-code comparison leaves these two fields out.
NOT_FROM_REAL_CODE = ("head_padding", "padded_q_heads")


def route_differences(pinned: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """'field: pinned X, now Y' for each field that moved."""
    return [
        f"{k}: pinned {pinned.get(k)!r}, now {actual.get(k)!r}"
        for k in sorted(set(pinned) | set(actual))
        if pinned.get(k) != actual.get(k)
    ]


def _assert_route(case: Case, revision: Revision, who: str, skip: tuple[str, ...] = ()) -> None:
    registry = load_registry(case.registry)
    if not revision.is_valid(case.shape, registry):
        broken = [name for name, ok in revision.validity(case.shape, registry) if not ok]
        raise AssertionError(f"{case.id}: {who} no longer accepts this shape ({'; '.join(broken)})")
    actual = expected_route(revision, registry, case.shape)
    moved = route_differences(
        {k: v for k, v in case.expected_route.items() if k not in skip},
        {k: v for k, v in actual.items() if k not in skip},
    )
    if moved:
        raise AssertionError(
            f"{case.id} ({case.origin}): {who} routes it differently:\n  " + "\n  ".join(moved)
        )


def assert_model_route(case: Case) -> None:
    """The model revision still gives the case its pinned route."""
    _assert_route(case, get_revision(case.revision), f"the model revision {case.revision}")


@cache
def _real(release: str) -> Revision:
    from spec.realcode.revision import real_revision

    return real_revision(release, lifting=False)


def real_scope_rejects(case: Case, release: str) -> list[str]:
    """Real-code harness scope rules the case breaks (e.g. DCP shapes on 0.29+): not comparable there."""
    revision, registry = _real(release), load_registry(case.registry)
    return [name for name, ok in revision.validity(case.shape, registry) if not ok]


def assert_real_route(case: Case, release: str) -> None:
    """The release's real gate functions (run by the real-code loader) give the case its pinned route."""
    _assert_route(case, _real(release), f"vLLM {release}'s real gates", skip=NOT_FROM_REAL_CODE)
