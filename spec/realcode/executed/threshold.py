"""The release's reorder_batch_threshold, as its own code computes it, for the prover.

The threshold (the longest query the scheduler hands decode, and since #51011
the qlen the persistent buffers are sized for) is computed by vLLM's base
builder from the speculative config: code the gate lifter cannot reach.  The
harness runs the release's real ``AiterMLAMetadataBuilder.__init__`` for every
drafter and every ``k`` in 0..15 (dcp 1) and reads ``reorder_batch_threshold``
back.  Per drafter the values are fitted to ``max(1, a + b*k)`` from k = 1, 2
and the fit is confirmed on every executed k; a release whose threshold is not
of that form is refused by name, never approximated.  The result is written
with :mod:`mla_model.logic`, so it evaluates on one shape, on numpy and under z3.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from mla_model.logic import Term, if_then_else, is_in, maximum
from mla_model.shape import SPEC_METHODS, Shape
from spec.realcode import cache_io
from spec.realcode.executed.harness import HarnessError, ReleaseCode, execute
from spec.realcode.source import cache_dir

K_RANGE = range(0, 16)


def _cache_file(code: ReleaseCode) -> Path:
    """Keyed by the release file's bytes, the tree it runs in and the harness stubs it runs over (the
    stubs answer the builder's probes, e.g. whether AITER has segmented MLA, which moves the threshold
    under DCP): the answer depends on nothing else."""
    key = hashlib.sha256(code.file.read_bytes() + str(code.tree).encode() + _stubs_digest()).hexdigest()[:24]
    return cache_dir().parent / "thresholds" / f"{key}.json"


@cache
def _stubs_digest() -> bytes:
    stubs = Path(__file__).resolve().parent / "stubs"
    h = hashlib.sha256()
    for f in sorted(stubs.rglob("*.py")):
        h.update(str(f.relative_to(stubs)).encode() + f.read_bytes())
    return h.digest()


@cache
def executed_thresholds(code: ReleaseCode) -> dict[str, dict[str, tuple[int, int]]]:
    """Per DCP setting ("1", ">1") and drafter, ``(a, b)`` with threshold ``max(1, a + b*k)``.

    Fitted on k = 1, 2 and confirmed on every executed k (1..15 at DCP 1; 1..3
    at DCP 2, 4 and 8, which must agree).  Where the release's builder does not
    run at DCP > 1 in the harness, only "1" is returned.
    """
    cached = _cache_file(code)
    hit = cache_io.read_json(cached, _is_entry)
    if hit is not None:
        return {d: {m: (a, b) for m, (a, b) in f.items()} for d, f in hit.items()}
    cache_io.ensure_writable(cached.parent)  # before the harness runs, not after
    methods = [m for m in SPEC_METHODS if m != "none"]
    shapes = [
        Shape(num_heads=16, spec_method=m, num_spec_tokens=k) for m in methods for k in K_RANGE if k > 0
    ]
    shapes += [
        Shape(num_heads=16, spec_method=m, num_spec_tokens=k, dcp_world_size=d)
        for d in (2, 4, 8)
        for m in methods
        for k in (1, 2, 3)
    ]
    seen: dict[str, dict[str, dict[int, set[int]]]] = {"1": {}, ">1": {}}
    for row in execute(code, shapes):
        s = row["shape"]
        dcp = "1" if s["dcp_world_size"] == 1 else ">1"
        if "threshold" not in row:
            if dcp == ">1":
                seen.pop(">1", None)
                continue
            raise HarnessError(
                f"{code.label}: the builder raised for {s['spec_method']} k={s['num_spec_tokens']}: "
                f"{row.get('error')}"
            )
        if dcp in seen:
            seen[dcp].setdefault(s["spec_method"], {}).setdefault(s["num_spec_tokens"], set()).add(
                int(row["threshold"])
            )
    fitted = {dcp: _fit(code, dcp, values) for dcp, values in seen.items()}
    cache_io.write_json(cached, fitted)
    return fitted


def _is_entry(data: Any) -> bool:
    """A cached entry as written: ``{"1": {method: [a, b]}, ">1": ...}`` (anything else is rebuilt)."""
    return (
        isinstance(data, dict)
        and "1" in data
        and set(data) <= {"1", ">1"}
        and all(
            isinstance(f, dict)
            and all(isinstance(ab, list) and [type(x) for x in ab] == [int, int] for ab in f.values())
            for f in data.values()
        )
    )


def _fit(code: ReleaseCode, dcp: str, seen: dict[str, dict[int, set[int]]]) -> dict[str, tuple[int, int]]:
    fitted = {}
    for method, values in seen.items():
        if any(len(v) != 1 for v in values.values()):
            raise HarnessError(f"{code.label}: the threshold for {method} differs between DCP sizes > 1")
        at = {k: next(iter(v)) for k, v in values.items()}
        b = at[2] - at[1]
        a = at[1] - b
        wrong = [k for k, v in at.items() if max(1, a + b * k) != v]
        if wrong:
            raise HarnessError(
                f"{code.label}: the threshold for {method} at DCP {dcp} is not max(1, a + b*k) "
                f"(k={wrong[0]} gives {at[wrong[0]]})"
            )
        fitted[method] = (a, b)
    return fitted


def threshold_function(code: ReleaseCode) -> Callable[[Any], Term]:
    """``s -> reorder_batch_threshold`` of the release (1 without a drafter)."""
    fitted = executed_thresholds(code)

    def by_method(s: Any, per_method: dict[str, tuple[int, int]]) -> Term:
        groups: dict[tuple[int, int], list[str]] = {}
        for method, ab in per_method.items():
            groups.setdefault(ab, []).append(method)
        value: Term = 1  # no drafter
        for (a, b), methods in groups.items():
            value = if_then_else(
                is_in(s.spec_method, tuple(methods)), maximum(a + b * s.num_spec_tokens, 1), value
            )
        return value

    def reorder_batch_threshold(s: Any) -> Term:
        single = by_method(s, fitted["1"])
        if ">1" not in fitted:  # DCP > 1 is outside what the harness runs for this release
            return single
        return if_then_else(s.dcp_world_size > 1, by_method(s, fitted[">1"]), single)

    return reorder_batch_threshold
