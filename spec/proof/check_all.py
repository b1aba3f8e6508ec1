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

    Model revisions (ids) are checked in forked processes, since z3 is single-threaded.  Each process
    runs a chain of (revision, registries) jobs in turn, and the smallest counterexamples of each
    (revision, registry) are the first guesses for the next (see :func:`spec.proof.prover.check_many`):

    * fewer revisions than cores: one chain per (revision, registry);
    * every class enumerated (``max_classes`` None, the default check): one chain per core, each a run of
      neighbouring revisions, which share most of their smallest counterexamples (a revision's first
      registry then starts from its neighbour's, not from nothing).  Each class's least shape is unique
      and z3 proves it least whatever the guesses, so the output is what a process per revision gives;
    * classes cut short: one chain per revision, its registries in turn, so which classes a capped run
      shows of a revision does not depend on the revisions checked beside it (with fewer revisions than
      cores, the first case, each registry starts from nothing and may show other classes).

    Each process is forked fresh for its chain.  Real-code revisions, whose lifted gates do not cross a
    process boundary, run here, each call of their code bounded by ``timeout`` like a solver call (a gate
    that loops is UNKNOWN, never waited for).
    """
    from spec.realcode import sandbox

    sandbox.set_call_limit(timeout)
    registries, invariants = tuple(registries), tuple(invariants)
    workers = os.cpu_count() or 1
    forked = [n for n, rev in enumerate(targets) if isinstance(rev, str)]
    chains: list[list[tuple[int, tuple[str, ...]]]]
    if len(forked) < workers:
        chains = [[(n, (reg,))] for n in forked for reg in registries]
    elif max_classes is None:
        size, extra = divmod(len(forked), workers)
        bounds = [k * size + min(k, extra) for k in range(workers + 1)]
        chains = [[(n, registries) for n in forked[lo:hi]] for lo, hi in zip(bounds, bounds[1:])]
    else:
        chains = [[(n, registries)] for n in forked]
    done: dict[tuple[int, str], list[CheckResult]] = {}
    if len(chains) > 1:
        _warm(set(registries))
        work = [
            ([(targets[n], regs) for n, regs in chain], invariants, max_classes, timeout) for chain in chains
        ]
        pool = multiprocessing.get_context("fork").Pool(min(len(work), workers), maxtasksperchild=1)
        try:
            mapped = pool.map(check_chain, work, chunksize=1)
        except BaseException:
            pool.terminate()
            raise
        # close and join, not the context manager's terminate: with maxtasksperchild=1 the pool forks a
        # replacement worker as each one ends, and terminate() racing such a fork joins a worker blocked on
        # the task queue's lock forever (seen in tests/test_docs.py on 2 cores: check hung in Pool.__exit__)
        pool.close()
        pool.join()
        for chain, results in zip(chains, mapped):
            for (n, regs), rows in zip(chain, results):
                done.update({(n, reg): r for reg, r in zip(regs, rows)})
    out: list[CheckResult] = []
    for n, rev in enumerate(targets):
        if all((n, reg) in done for reg in registries):
            out += [r for reg in registries for r in done[n, reg]]
        else:
            (per_registry,) = check_chain(([(rev, registries)], invariants, max_classes, timeout))
            out += [r for rows in per_registry for r in rows]
    return out


def _warm(registries: set[str]) -> None:
    """What every forked worker would otherwise build again: the registries and z3's context."""
    for reg in sorted(registries):
        load_registry(reg)
    z3.main_ctx()


def check_chain(job: tuple) -> list[list[list[CheckResult]]]:
    """Each (target, registries) of a chain in turn, each target's invariants against each of its
    registries in turn: per target, per registry, the results.  The smallest counterexamples of each
    (target, registry) are the first guesses for the next."""
    chain, invariants, max_classes, timeout = job
    out: list[list[list[CheckResult]]] = []
    hints: list[Any] = []
    for rev, registries in chain:
        per_registry = []
        for reg in registries:
            results = check_pair((rev, reg, invariants, max_classes, timeout), hints)
            hints = [c.shape for r in results for c in r.counterexamples]
            per_registry.append(results)
        out.append(per_registry)
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
        from spec.realcode.extract import RefusedCode

        rid = rev if isinstance(rev, str) else rev.id
        reason = (
            str(e)  # a construct outside the interpreted subset: bind cannot run it either
            if isinstance(e, RefusedCode)
            else f"lifting unsupported ({e}); run 'mla-spec bind' for the bounded check"
        )
        return [CheckResult(rid, reg, inv, UNKNOWN, 0.0, complete=False, reason=reason) for inv in invariants]
