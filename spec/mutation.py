"""Mutation score of the generated suite against the ``vllm-0.28`` gates.

For every mutant of :data:`spec.mutants.CATALOGUE`:

* **killed by generated**: some generated case (``spec.cases.generate``) fails
  on the mutant as the generated test module would fail it
  (``conformance.generated._assert_route``): the mutant rejects the shape, or
  gives it an ``expected_route`` (mla_model/case.py) other than the pinned one;
* **killed by the PR grid**: some case of vLLM #51011's own tests, rebuilt as
  data in :mod:`spec.pr_grid`, fails on the mutant module;
* **equivalent**: for mutants the generated cases do not kill, z3 decides
  whether some shape valid under ``vllm-0.28`` gets a different pinned route
  (every field of ``expected_route``: path, the three gates,
  ``_mtp_decode_qlen``, head padding, padded heads, the kernel request, AITER's
  persistent flag, the kernel's name, ``vllm_raises``) or is rejected by the
  mutant.  unsat: proved equivalent; sat: not equivalent, and the shape
  (minimised, then re-run in Python) is the witness the generator missed;
  unknown (timeout): ``"unknown"``, never equivalent.  A mutant the generated
  cases kill is not equivalent, so its proof is skipped.  A PR-grid kill does
  not decide equivalence: the PR's tests call the predicates at shapes the
  engine never produces (qlen 8 without a drafter, 17 heads).

The symbolic shape, validity rules and registry are the prover's
(:func:`spec.prover.problem`); the registry is ``aiter-0.1.20``, the one the
committed ``tests/generated/vllm_028`` suite pins.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import z3

from mla_model.case import Case, expected_route
from mla_model.decision import Decision, decide
from mla_model.derived import KERNEL_KV_DTYPES
from mla_model.logic import EnumTerm, all_of, choose, if_then_else, not_, tuple_in
from mla_model.registry import Registry, load_registry
from mla_model.revisions import get_revision
from mla_model.revisions.base import Revision
from mla_model.route import HEAD_PADDINGS, PATHS
from mla_model.shape import FIELD_BY_NAME, Q_DTYPES, Shape
from spec import pr_grid
from spec.cases import generate
from spec.mutants import CATALOGUE, Mutant, load
from spec.prover import SMALLEST_FIRST, ProverDisagreement, canonical_model, minimise_in_order, problem

REVISION_ID = "vllm-0.28"
REGISTRY_ID = "aiter-0.1.20"
DEFAULT_TIMEOUT_MS = 20_000
UNKNOWN = "unknown"
NO_KERNEL = "<none>"


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    killed_by_generated: bool
    generated_case: str | None  # the first generated case that kills it
    killed_by_pr_grid: bool
    pr_case: str | None  # the first PR grid case that kills it, with its failing assertion
    equivalent: bool | str  # True (proved), False, or UNKNOWN
    witness: Shape | None  # a valid shape the mutant routes differently, where the generated cases miss it

    @property
    def survives_generated(self) -> bool:
        """Not killed by the generated cases and not proved equivalent: a gap in the generator."""
        return not self.killed_by_generated and self.equivalent is not True

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.mutant.id,
            "description": self.mutant.description,
            "site": self.mutant.site,
            "equivalent": self.equivalent,
            "killed_by_generated": self.killed_by_generated,
            "killed_by_pr_grid": self.killed_by_pr_grid,
            "generated_case": self.generated_case,
            "pr_case": self.pr_case,
            "witness": None if self.witness is None else self.witness.to_json(),
        }


@dataclass(frozen=True)
class MutationReport:
    results: tuple[MutantResult, ...]
    generated_cases: int
    pr_grid_cases: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"mutants": [r.to_json() for r in self.results], "generated_cases": self.generated_cases,
                "pr_grid_cases": self.pr_grid_cases}


# --- killed by the generated cases ----------------------------------------------------------


def kills(revision: Revision, registry: Registry, case: Case) -> bool:
    """Whether ``case``'s generated test fails on ``revision``: the shape is rejected or routed otherwise."""
    if not revision.is_valid(case.shape, registry):
        return True
    return expected_route(revision, registry, case.shape) != case.expected_route


# --- equivalence by z3 ----------------------------------------------------------------------


def _kernel_names(registry: Registry) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.name for r in registry.kernels)) + (NO_KERNEL,)


def pinned_terms(d: Decision, registry: Registry) -> dict[str, tuple[Any, tuple[str, ...] | None]]:
    """``expected_route``'s fields as terms: name -> (term, enumeration values or None).

    ``aiter_persistent`` is None off the ASM paths, so it is coded -1/0/1; ``kernel`` is the name of the
    first row ``kernel_name`` would pick (:data:`NO_KERNEL` off the ASM paths or with no kernel).
    """
    r, a, req = d.route, d.asm, d.route.request
    key = (d.shape.arch, req.q_dtype, req.kv_dtype, a.gqa, a.ps, a.qseqlen, a.causal)
    rows = [row for row in registry.kernels if row.lse == 0 and row.cprr == 0]
    kernel = choose(_kernel_names(registry), [
        (all_of(d.on_asm, a.kernel_ok, tuple_in(key, [(row.arch, row.q, row.kv, row.gqa, bool(row.ps), row.qseqlen,
                                                         bool(row.causal))])), row.name)
        for row in rows], NO_KERNEL)
    return {
        "path": (r.path, PATHS),
        "use_gluon_decode": (r.use_gluon_decode, None),
        "use_gluon_verify": (r.use_gluon_verify, None),
        "use_persistent_metadata": (r.use_persistent_metadata, None),
        "mtp_decode_qlen": (r.mtp_decode_qlen, None),
        "head_padding": (r.head_padding, HEAD_PADDINGS),
        "padded_q_heads": (r.padded_q_heads, None),
        "kernel_qlen": (req.kernel_qlen, None),
        "q_dtype": (req.q_dtype, Q_DTYPES),
        "kv_dtype": (req.kv_dtype, KERNEL_KV_DTYPES),
        "causal": (req.causal, None),
        "aiter_persistent": (if_then_else(d.on_asm, if_then_else(a.persistent, 1, 0), -1), None),
        "kernel": (kernel, _kernel_names(registry)),
        "vllm_raises": (r.vllm_raises, None),
    }


def z3_value(x: Any, values: tuple[str, ...] | None) -> Any:
    """A field's term as a z3 expression (enumerations as their codes in ``values``)."""
    if isinstance(x, EnumTerm):
        if x.values != values:
            raise ValueError(f"enumeration {x.values} where {values} was expected")
        return x.term
    if isinstance(x, str):
        return z3.IntVal(values.index(x))
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    return x


def route_differs(a: Decision, b: Decision, registry: Registry) -> Any:
    """z3: some pinned route field differs between two decisions over the same symbolic shape."""
    ta, tb = pinned_terms(a, registry), pinned_terms(b, registry)
    return z3.Or(*[z3_value(ta[k][0], ta[k][1]) != z3_value(tb[k][0], tb[k][1]) for k in ta])


def equivalence(mutant: Revision, original: Revision, registry: Registry,
                timeout_ms: int = DEFAULT_TIMEOUT_MS) -> tuple[bool | str, Shape | None]:
    """(True, None) if proved equivalent on valid shapes; (False, witness); (UNKNOWN, None) on timeout.

    The witness is minimised (heads, then qlen, k, batch, DCP; the rest at their defaults where the
    difference allows) and re-run in Python, where it must be valid and routed differently.
    """
    p = problem(original, registry)
    d = decide(mutant, registry, p.symbolic.view)
    differs = z3.Or(z3_value(not_(mutant.is_valid(p.symbolic.view, registry)), None),
                    route_differs(p.decision, d, registry))
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*p.constraints, differs)
    answer = s.check()
    if answer == z3.unsat:
        return True, None
    if answer == z3.unknown:
        return UNKNOWN, None
    v = p.symbolic.variables
    first = s.model()
    minimised = minimise_in_order(s, [(v[n], FIELD_BY_NAME[n].minimum) for n in SMALLEST_FIRST]) is not None
    model = canonical_model(s, v) if minimised else None
    witness = p.symbolic.to_shape(first if model is None else model)  # a timed-out minimisation keeps the first
    if not original.is_valid(witness, registry) or (
        mutant.is_valid(witness, registry)
        and expected_route(mutant, registry, witness) == expected_route(original, registry, witness)
    ):
        raise ProverDisagreement(f"{mutant.id}: z3 witness {witness} is invalid or routed alike in Python")
    return False, witness


# --- the score ------------------------------------------------------------------------------


def generated_cases() -> list[Case]:
    """The generated suite of vllm-0.28: the cases ``mla-spec cases`` writes to tests/generated/vllm_028."""
    return generate(REVISION_ID, REGISTRY_ID)


def score(cases: list[Case] | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> MutationReport:
    """Run every mutant against the generated cases and the PR grid; prove the survivors equivalent or not."""
    start = time.perf_counter()
    registry = load_registry(REGISTRY_ID)
    cases = generated_cases() if cases is None else cases  # the tests pass the cases they already generated
    original = get_revision(REVISION_ID)
    results = []
    for mutant in CATALOGUE:
        module = load(mutant)
        rev = module.REVISION
        killer = next((c for c in cases if kills(rev, registry, c)), None)
        pr_case = pr_grid.first_failure(module)
        equivalent, witness = (False, None) if killer else equivalence(rev, original, registry, timeout_ms)
        results.append(MutantResult(
            mutant, killer is not None, killer.id if killer else None, pr_case is not None,
            None if pr_case is None else f"{pr_case.id}: {pr_grid.fails(module, pr_case)}", equivalent, witness))
    return MutationReport(tuple(results), len(cases), len(pr_grid.PR_GRID), time.perf_counter() - start)
