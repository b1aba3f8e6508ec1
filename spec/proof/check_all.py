"""Check many (revision, registry, invariant) triples, in parallel where z3 allows: what check and audit run.

Returns data (a list of :class:`CheckResult`); the command line renders it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from typing import Any

from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult, check
from spec.proof.verdict import UNKNOWN


def check_all(
    targets: list[Any], registries: Iterable[str], invariants: Iterable[str], max_classes: int, timeout: float
) -> list[CheckResult]:
    """Every (target, registry, invariant), in that order.  Model revisions (ids) are checked one
    (revision, registry) pair per process, since z3 is single-threaded; each process is forked fresh
    for its one pair, so which classes z3 enumerates first does not depend on what ran before it
    (the output is the same on every run).  Real-code revisions, whose lifted gates do not cross a
    process boundary, run here."""
    jobs = [(rev, reg, tuple(invariants), max_classes, timeout) for rev in targets for reg in registries]
    parallel = [j for j in jobs if isinstance(j[0], str)]
    done: dict[int, list[CheckResult]] = {}
    if len(parallel) > 1:
        workers = min(len(parallel), os.cpu_count() or 1)
        with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=1) as pool:
            for job, results in zip(parallel, pool.map(check_pair, parallel, chunksize=1)):
                done[id(job)] = results
    return [r for job in jobs for r in done.get(id(job)) or check_pair(job)]


def check_pair(job: tuple) -> list[CheckResult]:
    """One (target, registry) pair's invariants; lifting that fails is UNKNOWN, never a pass."""
    from spec.realcode.symexec import LiftingUnsupported

    rev, reg, invariants, max_classes, timeout = job
    results = []
    for inv in invariants:
        try:
            results.append(
                check(rev, reg, INVARIANT_BY_ID[inv], max_classes=max_classes, timeout_ms=int(timeout * 1000))
            )
        except LiftingUnsupported as e:
            rid = rev if isinstance(rev, str) else rev.id
            results.append(
                CheckResult(
                    rid,
                    reg,
                    inv,
                    UNKNOWN,
                    0.0,
                    complete=False,
                    reason=f"lifting unsupported ({e}); run 'mla-spec bind' for the bounded check",
                )
            )
    return results
