"""Mutation score: our generated cases against vLLM's own shipped tests, on mutants of the release's code.

For every mutant of vLLM 0.28.0's real ``rocm_aiter_mla.py`` (:mod:`spec.analyses.mutants`:
AST operators over the routing code, made at run time from the cached release
file), written into a shadow vLLM tree in a scratch directory:

* **killed by generated**: the executing harness
  (:func:`spec.realcode.executed.differential.differential`) runs the mutant's
  real decode path on the shapes of our generated cases
  (``spec.analyses.cases.generate("vllm-0.28", "aiter-0.1.20")``, the suite committed in
  ``tests/generated/vllm_028``) and compares each with the model revision
  ``vllm-0.28``; every case with a disagreement kills it (``generated_killers``:
  the case ids);
* **killed by shipped**: vLLM 0.28.0's shipped tests
  (``tests/v1/attention/*aiter_mla*``, unmodified,
  :func:`spec.realcode.shipped_tests.run_shipped_tests`) run against the mutant
  file; every failed or errored item kills it (``shipped_killers``);
* **equivalent**: ``True`` only when the lifted gates of the mutant and of the
  release (:func:`spec.realcode.revision.real_revision`) compare EQUIVALENT on
  every field (:func:`spec.realcode.bind.symbolic_comparison`); ``False`` when a
  field is DIFFERENT or our cases kill it (a kill is a concrete difference);
  ``UNKNOWN`` when the lifting is unsupported, z3 times out, or the mutant is
  in code the lifting does not read (``get_mla_padded_q``).  Never equivalent
  otherwise.

Before any mutant runs, the unmutated release must pass both suites (no case
disagrees, no shipped item fails: :func:`baseline`); a shipped item it cannot
run is noted on a mutant only where the mutant adds it.

Mutants are independent: they run in a pool of processes (one per core by
default), each mutant's harness and pytest children inside its worker.

**DCP gate mutants** (:func:`dcp_score`, ``mla-spec mutate --dcp``): the mutants
of vLLM 0.34.0's DCP routing (:func:`spec.analyses.mutants.dcp_mutants`), asked
the same three questions: our generated suite of ``vllm-0.34``
(:func:`dcp_cases`, tests/generated/vllm_034, dcp 1, 2, 4 and 8) through the
executed differential (a DCP step runs as rank 0 of its ranks), 0.34.0's
shipped tests (the three DCP files and the rest, as ``mla-spec vllm-tests
--vllm 0.34.0`` runs them), and the lifted gates of mutant and release compared
on the same fields (``dcp_route`` among bind's route fields) over dcp 1, 2, 4 and 8.
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from mla_model.case import Case
from spec.analyses.cases import generate
from spec.analyses.mutants import (
    DCP_RELEASE,
    NOT_LIFTED,
    RELEASE,
    Mutant,
    dcp_mutants,
    release_mutants,
    shadow_tree,
)
from spec.proof.verdict import DEFAULT_TIMEOUT_MS, UNKNOWN, Verdict
from spec.realcode.bind import ROUTE_FIELDS

REVISION_ID = "vllm-0.28"
DCP_REVISION_ID = "vllm-0.34"  # the model revision of DCP_RELEASE (dcp 1, 2, 4, 8)
REGISTRY_ID = "aiter-0.1.20"
# bind's route fields (dcp_route among them) plus the padded head count (get_actual_mla_num_heads
# sizes the ASM output buffer)
EQUIVALENCE_FIELDS = (*ROUTE_FIELDS, "padded_q_heads")


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    # generated cases on which the executed mutant disagrees with the model
    generated_killers: tuple[str, ...]
    shipped_killers: tuple[str, ...]  # shipped test items that failed or errored on the mutant
    equivalent: bool | Verdict  # True (proved), False, or UNKNOWN
    symbolic: str = (
        ""  # the lifted comparison in one word: EQUIVALENT, DIFFERENT, UNKNOWN, UNSUPPORTED, NOT_LIFTED
    )
    notes: tuple[
        str, ...
    ] = ()  # a harness or test run that could not complete (counted as a kill, said here)

    @property
    def killed_by_generated(self) -> bool:
        return bool(self.generated_killers)

    @property
    def killed_by_shipped(self) -> bool:
        return bool(self.shipped_killers)

    @property
    def survives_generated(self) -> bool:
        """Not killed by our cases nor proved equivalent: a gap (or, with ``unknown``, an open question)."""
        return not self.killed_by_generated and self.equivalent is not True

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.mutant.id,
            "site": self.mutant.site,
            "operator": self.mutant.operator,
            "description": self.mutant.description,
            "killed_by_generated": self.killed_by_generated,
            "generated_killers": list(self.generated_killers),
            "killed_by_shipped": self.killed_by_shipped,
            "shipped_killers": list(self.shipped_killers),
            "equivalent": self.equivalent,
            "symbolic": self.symbolic,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class MutationReport:
    release: str
    results: tuple[MutantResult, ...]
    generated_cases: int  # cases of the model revision's generated suite, each run on every mutant
    shipped_items: int  # items of the shipped tests on the unmutated release (all must pass)
    seconds: float
    workers: int = 1
    baseline: dict[str, Any] = field(default_factory=dict)
    revision: str = REVISION_ID
    registry: str = REGISTRY_ID

    def totals(self) -> dict[str, int]:
        r = self.results
        gen, ship = (
            {x.mutant.id for x in r if x.killed_by_generated},
            {x.mutant.id for x in r if x.killed_by_shipped},
        )
        return {
            "mutants": len(r),
            "killed_by_generated": len(gen),
            "killed_by_shipped": len(ship),
            "killed_by_both": len(gen & ship),
            "killed_only_by_generated": len(gen - ship),
            "killed_only_by_shipped": len(ship - gen),
            "killed_by_neither": len(r) - len(gen | ship),
            "equivalent": sum(x.equivalent is True for x in r),
            "unknown": sum(x.equivalent == UNKNOWN for x in r),
            "survive_generated_not_equivalent": sum(
                x.survives_generated and x.equivalent is False for x in r
            ),
            "survive_generated_unknown": sum(x.survives_generated and x.equivalent == UNKNOWN for x in r),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "revision": self.revision,
            "registry": self.registry,
            "generated_cases": self.generated_cases,
            "shipped_items": self.shipped_items,
            "seconds": round(self.seconds, 1),
            "workers": self.workers,
            "baseline": self.baseline,
            "totals": self.totals(),
            "mutants": [r.to_json() for r in self.results],
        }


# --- one mutant -------------------------------------------------------------------------------


def _generated_killers(
    file: Path, tree: Path, cases: list[Case], revision_id: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from mla_model.revisions import get_revision
    from spec.realcode.executed.differential import differential
    from spec.realcode.executed.harness import HarnessError, ReleaseCode

    try:
        d = differential(
            ReleaseCode(str(file), file, tree),
            get_revision(revision_id),
            [c.shape for c in cases],
            REGISTRY_ID,
        )
    except HarnessError as e:
        return ("<harness>",), (f"harness: {e}",)
    by_shape: dict[str, str] = {_key(c.shape.to_json()): c.id for c in cases}
    killers = dict.fromkeys(by_shape.get(_key(x.shape), f"<shape {x.shape}>") for x in d.disagreements)
    return tuple(sorted(killers)), ()


def _key(shape: dict[str, Any]) -> str:
    return repr(sorted(shape.items()))


def _shipped_killers(
    file: Path, release: str, not_runnable_on_release: frozenset[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Shipped items failing on the mutant; a note per item it leaves not runnable, past the release's."""
    from spec.realcode.shipped_tests import ShippedTestsError, run_shipped_tests

    try:
        r = run_shipped_tests(release, str(file))
    except ShippedTestsError as e:
        return ("<shipped tests>",), (f"shipped tests: {e}",)
    notes = tuple(
        f"not runnable: {x['item']}" for x in r["not_runnable"] if x["item"] not in not_runnable_on_release
    )
    return tuple(x["item"] for x in r["failures"]), notes


def prove_equivalence(
    mutant: Mutant, file: Path, timeout_ms: int, release: str = RELEASE
) -> tuple[bool | Verdict, str]:
    """Mutant ``file`` against ``release``: the lifted gates compared on :data:`EQUIVALENCE_FIELDS`."""
    from spec.realcode.bind import symbolic_comparison
    from spec.realcode.revision import real_revision

    if mutant.function in NOT_LIFTED:
        return UNKNOWN, "NOT_LIFTED"
    try:
        rows = symbolic_comparison(
            real_revision(str(file)),
            real_revision(release),
            REGISTRY_ID,
            max_differences=1,
            timeout_ms=timeout_ms,
            fields=EQUIVALENCE_FIELDS,
        )
    except Exception as e:  # noqa: BLE001  (a mutant the lifting cannot read is an open question, not a proof)
        return UNKNOWN, f"UNSUPPORTED ({type(e).__name__})"
    verdicts = {r.verdict for r in rows}
    if "DIFFERENT" in verdicts:
        return False, "DIFFERENT"
    if verdicts == {"EQUIVALENT"}:
        return True, "EQUIVALENT"
    return UNKNOWN, "UNKNOWN" if "UNKNOWN" in verdicts else "UNSUPPORTED"


def run_mutant(
    mutant: Mutant,
    original: str,
    cases: list[Case],
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    equivalence: bool = True,
    release: str = RELEASE,
    revision_id: str = REVISION_ID,
    not_runnable: frozenset[str] = frozenset(),
) -> MutantResult:
    """The three verdicts for one mutant of ``release`` (its file lives in a scratch shadow tree while it
    runs), our cases judged by the model revision ``revision_id``; ``not_runnable``: the shipped items the
    unmutated release cannot run either (not noted)."""
    with tempfile.TemporaryDirectory(prefix="mla-spec-mutant-") as scratch:
        tree = Path(scratch) / "tree"
        file = shadow_tree(release, mutant.apply(original.encode()), tree)
        generated, gen_notes = _generated_killers(file, tree, cases, revision_id)
        shipped, ship_notes = _shipped_killers(file, release, not_runnable)
        equivalent: bool | Verdict
        if not equivalence:
            equivalent, symbolic = UNKNOWN, "SKIPPED"
        else:
            equivalent, symbolic = prove_equivalence(mutant, file, timeout_ms, release)
    if equivalent is True and (generated or shipped):
        # the lifting says equivalent, the executed code says otherwise: never claim it
        equivalent, symbolic = UNKNOWN, "EQUIVALENT (contradicted by a kill)"
    elif generated and equivalent == UNKNOWN and "<harness>" not in generated:
        equivalent = False  # a case on which the executed mutant differs is a concrete difference
    return MutantResult(mutant, generated, shipped, equivalent, symbolic, gen_notes + ship_notes)


def _worker(args: tuple) -> MutantResult:
    return run_mutant(*args)


def _run_all(jobs: list[tuple], workers: int | None) -> tuple[list[MutantResult], int]:
    """Every job through :func:`run_mutant`, side by side in ``workers`` processes (default: one per core)."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    if workers == 1:
        return [_worker(j) for j in jobs], workers
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_worker, jobs)), workers


def _selected(mutants: list[Mutant], select: list[str] | None) -> list[Mutant]:
    if select is None:
        return mutants
    unknown = set(select) - {m.id for m in mutants}
    if unknown:
        raise KeyError(f"no mutant {sorted(unknown)[0]}")
    return [m for m in mutants if m.id in set(select)]


# --- the score --------------------------------------------------------------------------------


def generated_cases() -> list[Case]:
    """Our generated suite of vllm-0.28: the cases ``mla-spec cases`` writes to tests/generated/vllm_028."""
    return generate(REVISION_ID, REGISTRY_ID)


def baseline(cases: list[Case], release: str = RELEASE, revision_id: str = REVISION_ID) -> dict[str, Any]:
    """The unmutated release against both suites: no case may disagree and no shipped item may fail
    (its skipped and not-runnable items stay so; they are listed)."""
    from mla_model.revisions import get_revision
    from spec.realcode.executed.differential import differential
    from spec.realcode.executed.harness import release_code
    from spec.realcode.shipped_tests import run_shipped_tests

    d = differential(release_code(release), get_revision(revision_id), [c.shape for c in cases], REGISTRY_ID)
    s = run_shipped_tests(release)
    return {
        "generated_disagreements": len(d.disagreements),
        "shipped_items": s["items"],
        "shipped_passed": s["passed"],
        "shipped_failed": s["failed"] + s["errors"],
        "shipped_skipped": s["skipped"],
        "shipped_not_runnable": len(s["not_runnable"]),
        "not_runnable_items": [x["item"] for x in s["not_runnable"]],
    }


class BaselineError(RuntimeError):
    """The unmutated release already fails a suite: no kill would mean anything."""


def _score(
    release: str,
    revision_id: str,
    made: tuple[str, list[Mutant]],
    cases: list[Case],
    select: list[str] | None,
    workers: int | None,
    timeout_ms: int,
    equivalence: bool,
) -> MutationReport:
    """``made``'s mutants (or those whose id is in ``select``) of ``release`` against ``cases`` (judged by
    the model revision ``revision_id``) and the release's shipped tests, after the baseline."""
    start = time.perf_counter()
    original, mutants = made
    mutants = _selected(mutants, select)
    base = baseline(cases, release, revision_id)
    if base["generated_disagreements"] or base["shipped_failed"]:
        raise BaselineError(f"the unmutated release {release} fails already: {base}")
    not_runnable = frozenset(base["not_runnable_items"])
    jobs = [
        (m, original, cases, timeout_ms, equivalence, release, revision_id, not_runnable) for m in mutants
    ]
    results, workers = _run_all(jobs, workers)
    return MutationReport(
        release,
        tuple(results),
        len(cases),
        base["shipped_items"],
        time.perf_counter() - start,
        workers,
        base,
        revision_id,
        REGISTRY_ID,
    )


def score(
    cases: list[Case] | None = None,
    select: list[str] | None = None,
    workers: int | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    equivalence: bool = True,
) -> MutationReport:
    """Every mutant of 0.28.0 (or those whose id is in ``select``) against our cases and the shipped tests."""
    cases = generated_cases() if cases is None else cases
    return _score(
        RELEASE, REVISION_ID, release_mutants(RELEASE), cases, select, workers, timeout_ms, equivalence
    )


# --- DCP gate mutants of 0.34.0 ---------------------------------------------------------------


@cache
def dcp_cases() -> list[Case]:
    """Our generated suite of vllm-0.34 (what ``mla-spec cases`` writes to tests/generated/vllm_034)."""
    return generate(DCP_REVISION_ID, REGISTRY_ID)


def dcp_score(
    select: list[str] | None = None, workers: int | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> MutationReport:
    """Every DCP gate mutant of 0.34.0 (or those whose id is in ``select``) against our vllm-0.34 cases
    (:func:`dcp_cases`) and 0.34.0's shipped tests."""
    made = dcp_mutants(DCP_RELEASE)
    return _score(DCP_RELEASE, DCP_REVISION_ID, made, dcp_cases(), select, workers, timeout_ms, True)
