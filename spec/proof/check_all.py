"""Check many (revision, registry, invariant) triples, in parallel where z3 allows: what check and audit run.

Returns data (a list of :class:`CheckResult`); the command line renders it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from typing import Any

import z3

from mla_model.registry import load_registry
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult, check_many
from spec.proof.verdict import UNKNOWN


def check_all(
    targets: list[Any],
    registries: Iterable[str],
    invariants: Iterable[str],
    max_classes: int | None,
    timeout: float,
) -> list[CheckResult]:
    """Every (target, registry, invariant), in that order.

    Model revisions (ids) are checked in forked processes, since z3 is single-threaded: one process per
    revision, its registries one after the other (the smallest counterexamples of one are the first
    guesses for the next, see :func:`spec.proof.prover.check_many`), or one per (revision, registry)
    where there are fewer revisions than cores.  Each process is forked fresh for its job, so which
    classes z3 enumerates first does not depend on what ran before it (the output is the same on every
    run).  Real-code revisions, whose lifted gates do not cross a process boundary, run here, each call of
    their code bounded by ``timeout`` like a solver call (a gate that loops is UNKNOWN, never waited for).
    """
    from spec.realcode import sandbox

    sandbox.set_call_limit(timeout)
    registries, invariants = tuple(registries), tuple(invariants)
    workers = os.cpu_count() or 1
    jobs = [(rev, registries, invariants, max_classes, timeout) for rev in targets]
    forked = [n for n, job in enumerate(jobs) if isinstance(job[0], str)]
    parts: list[tuple[int, tuple[str, ...]]]
    if len(forked) < workers:  # fewer revisions than cores: one process per (revision, registry)
        parts = [(n, (reg,)) for n in forked for reg in registries]
    else:
        parts = [(n, registries) for n in forked]
    done: dict[tuple[int, str], list[CheckResult]] = {}
    if len(parts) > 1:
        _warm(set(registries))
        work = [(jobs[n][0], regs, invariants, max_classes, timeout) for n, regs in parts]
        with multiprocessing.get_context("fork").Pool(min(len(work), workers), maxtasksperchild=1) as pool:
            for (n, regs), results in zip(parts, pool.map(check_revision, work, chunksize=1)):
                done.update({(n, reg): rows for reg, rows in zip(regs, results)})
    out: list[CheckResult] = []
    for n, job in enumerate(jobs):
        if all((n, reg) in done for reg in registries):
            out += [r for reg in registries for r in done[n, reg]]
        else:
            out += [r for rows in check_revision(job) for r in rows]
    return out


def _warm(registries: set[str]) -> None:
    """What every forked worker would otherwise build again: the registries and z3's context."""
    for reg in sorted(registries):
        load_registry(reg)
    z3.main_ctx()


def check_revision(job: tuple) -> list[list[CheckResult]]:
    """One target's invariants against each of its registries in turn, per registry; lifting that fails
    is UNKNOWN, never a pass.  The smallest counterexamples of each registry are the first guesses for
    the next."""
    rev, registries, invariants, max_classes, timeout = job
    out: list[list[CheckResult]] = []
    hints: list[Any] = []
    for reg in registries:
        results = check_pair((rev, reg, invariants, max_classes, timeout), hints)
        hints = [c.shape for r in results for c in r.counterexamples]
        out.append(results)
    return out


def check_pair(job: tuple, hints: Iterable[Any] = ()) -> list[CheckResult]:
    """One (target, registry) pair's invariants; lifting that fails is UNKNOWN, never a pass."""
    from spec.realcode.symexec import LiftingUnsupported

    rev, reg, invariants, max_classes, timeout = job
    try:
        return check_many(
            rev,
            reg,
            [INVARIANT_BY_ID[inv] for inv in invariants],
            max_classes,
            int(timeout * 1000),
            hints=hints,
        )
    except LiftingUnsupported as e:
        rid = rev if isinstance(rev, str) else rev.id
        return [
            CheckResult(
                rid,
                reg,
                inv,
                UNKNOWN,
                0.0,
                complete=False,
                reason=f"lifting unsupported ({e}); run 'mla-spec bind' for the bounded check",
            )
            for inv in invariants
        ]
