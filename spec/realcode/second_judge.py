"""check's second judge: a gate file executed, against the gates lifted from the same file.

``check --vllm FILE`` proves its invariants on the gates lifted from FILE (:mod:`spec.realcode.revision`).
Where lifting takes a part from the model instead of the file (the V-scale probe, a builder's keyword),
or lifts it wrongly, the proof is about another program.  So FILE is also run, confined, through the
harness (:mod:`spec.realcode.executed`, as ``bind`` runs it) and every routing fact the run records is
compared with the lifted gates' answer for the same shape (:func:`~spec.realcode.executed.differential.
compare`, the lifted revision standing where ``bind`` puts a model revision).  A disagreement is a
surprise: the proof's verdicts do not describe FILE.

Only a file inside a vLLM tree is executed (``check`` already executes it there, for its
reorder_batch_threshold); a lone file is never executed (docs/explanation/architecture.md, the trust
boundary).  Every shape runs under :data:`REGISTRY` (the file's code is the same under any; both sides
read the same registry).  Two runs:

* **started before the proof**, so that the child's start (torch, the release, the stubs: about 2 s)
  overlaps the proof: every counterexample class's smallest shape of the baseline (known before the
  proof), then seeded random shapes over the whole box (drawn valid under the model revision ``bind``
  pairs with the baseline, a fifth of them invalid) up to :data:`SHAPES`;
* **after the proof, only when there is something to run**: where FILE's lifted gates and the baseline's
  route differently.  Both sides' answers on the first run's shapes are compared (the baseline's are
  computed once and cached, :func:`spec.realcode.baseline.baseline_expected`): the shapes where they
  differ are witnesses, and for each differing field the route states as a z3 term, z3 looks for a few
  more (:func:`witnesses`: shapes the random draw missed); :data:`SHAPES` shapes are drawn around the
  witnesses (:func:`near`).  Then FILE's own classes' smallest shapes the first run did not hold.  An
  edit that changes no answer on the first run's shapes and adds no class costs no second child.

Routes are compared by their values, not by their z3 terms: the lifted terms are simplified by z3, whose
normal form depends on what the process built before, so two equal files' terms differ in form from one
process to the next, and proving them equal costs z3 seconds per field.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import z3

from mla_model.registry import load_registry
from mla_model.revisions import REVISIONS
from mla_model.revisions.base import Revision
from mla_model.shape import FIELD_BY_NAME, Shape
from spec.proof.classes import Baseline
from spec.proof.prover import CheckResult, problem
from spec.proof.terms import as_z3
from spec.realcode.bind import default_model, route_field
from spec.realcode.executed.differential import (
    Differential,
    Disagreement,
    compare,
    differential,
    expected,
    random_shapes,
)
from spec.realcode.executed.harness import ReleaseCode, execute

REGISTRY = "aiter-0.1.20"  # the registry every shape runs under (the newest AITER the model knows)
SHAPES = 500  # shapes of the first run, and shapes drawn around the witnesses of a route difference
WITNESSES_PER_FIELD = 2
WITNESS_TIMEOUT_MS = 500  # z3's limit per witness query: a query past it finds no witness, nothing more
WITNESS_BUDGET_S = 2.0  # no field is asked about once the witness search has taken this long
NEAR_PROBABILITY = 0.3  # each field of a shape drawn near a witness is redrawn with this probability
VALIDITY = "validity"  # the pseudo-field of the shapes each side deems valid
# The route field (a z3 term) behind each executed fact, where there is one: z3 looks for witnesses of it.
TERM_OF_FACT = {
    VALIDITY: VALIDITY,
    "path": "path",
    "mtp_decode_qlen": "mtp_decode_qlen",
    "metadata_qlen": "sized_qlen",
    "persistent_metadata": "use_persistent_metadata",
    "padded_heads": "padded_q_heads",
    "v_scale_fix": "v_scale_fix",
    "outcome": "vllm_raises",
}


@dataclass
class Judgement:
    """What the second judge ran and found for one file."""

    label: str  # the file, as given
    class_shapes: int  # counterexample classes' smallest shapes run (the baseline's and FILE's own)
    differing: list[str]  # facts where FILE's lifted gates answer otherwise than the baseline's
    witnesses: int  # shapes where they do (on the first run's shapes, and found by z3)
    near_witnesses: int  # shapes drawn around them
    runs: list[Differential] = field(default_factory=list)

    @property
    def shapes(self) -> int:
        return sum(r.shapes for r in self.runs)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)

    @property
    def disagreements(self) -> list[Disagreement]:
        return [d for r in self.runs for d in r.disagreements]

    def by_field(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.disagreements:
            counts[d.field] = counts.get(d.field, 0) + 1
        return counts

    def to_json(self, limit: int = 20) -> dict[str, Any]:
        return {
            "file": self.label,
            "ran": True,
            "registry": REGISTRY,
            "shapes": self.shapes,
            "class_shapes": self.class_shapes,
            "differing_fields": self.differing,
            "witnesses": self.witnesses,
            "near_witnesses": self.near_witnesses,
            "children": len(self.runs),
            "seconds": round(self.seconds, 2),
            "disagreements_by_field": self.by_field(),
            "disagreements": [d.to_json() for d in self.disagreements[:limit]],
        }


@dataclass
class Started:
    """The first run, under way in a thread while the proof runs."""

    code: ReleaseCode
    shapes: list[Shape]
    class_shapes: int
    rows: Future
    began: float


def start(code: ReleaseCode, baseline: Baseline | None, seed: int = 0) -> Started:
    """Start the first run: the baseline's class shapes and seeded random shapes (see the module)."""
    classes = class_shapes(baseline) if baseline is not None else []
    sampler = REVISIONS[(default_model(baseline.label) if baseline else None) or list(REVISIONS)[-1]]
    reg = load_registry(REGISTRY)
    drawn = [s for s in dict.fromkeys(random_shapes(sampler, reg, SHAPES, seed)) if s not in set(classes)]
    valid = [s for s in drawn if sampler.is_valid(s, reg)]
    invalid = [s for s in drawn if s not in set(valid)]
    want = max(0, SHAPES - len(classes))
    some = min(len(invalid), want // 5)  # a fifth invalid at most: validity is compared too
    shapes = [*classes, *invalid[:some], *valid[: want - some]]
    pool = ThreadPoolExecutor(1, thread_name_prefix="second-judge")
    rows = pool.submit(execute, code, shapes, REGISTRY, {})
    pool.shutdown(wait=False)
    return Started(code, shapes, len(classes), rows, time.perf_counter())


def finish(
    started: Started,
    lifted: Revision,
    results: Iterable[CheckResult],
    base: Callable[[], Revision] | None,
    base_wants: list[dict[str, Any]] | None,
    seed: int = 0,
) -> Judgement:
    """Compare the first run with FILE's lifted gates, then run and compare the second (see the module).
    ``base``/``base_wants``: what gives the baseline's lifted revision (called only where an answer
    differs) and the baseline's answers on the first run's shapes; None without a baseline."""
    reg = load_registry(REGISTRY)
    first = Differential(started.code.label, lifted.id, REGISTRY)
    wants = [expected(lifted, reg, s, {}) for s in started.shapes]  # while the child runs
    compare(started.rows.result(), wants, first)
    first.seconds = time.perf_counter() - started.began
    differing, found = route_changes(started.shapes, wants, base_wants)
    terms = list(dict.fromkeys(TERM_OF_FACT[f] for f in differing if f in TERM_OF_FACT))
    if terms and base is not None:
        found += witnesses(lifted, base(), terms)
    found = list(dict.fromkeys(found))
    around = near(found, lifted, SHAPES, seed)
    ran = set(started.shapes)
    new = new_class_shapes(results, ran)
    judgement = Judgement(
        started.code.label, started.class_shapes + len(new), differing, len(found), len(around)
    )
    judgement.runs.append(first)
    second = [s for s in dict.fromkeys([*found, *around, *new]) if s not in ran]
    if second:
        judgement.runs.append(differential(started.code, lifted, second, REGISTRY))
    return judgement


def route_changes(
    shapes: list[Shape], ours: list[dict[str, Any]], theirs: list[dict[str, Any]] | None
) -> tuple[list[str], list[Shape]]:
    """The facts where FILE's answers differ from the baseline's on ``shapes``, and the shapes where any
    does (answers compared as JSON, the form the baseline's are cached in)."""
    if theirs is None:
        return [], []
    facts: set[str] = set()
    where: list[Shape] = []
    for shape, a, b in zip(shapes, ours, theirs, strict=True):
        a = json.loads(json.dumps(a))
        if a != b:
            where.append(shape)
            facts |= {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    return sorted(facts), where


def baseline_answers(base: Revision, shapes: list[Shape]) -> list[dict[str, Any]]:
    """The baseline's lifted gates' answers on ``shapes``, as :func:`route_changes` compares them."""
    reg = load_registry(REGISTRY)
    return [json.loads(json.dumps(expected(base, reg, s, {}))) for s in shapes]


def _terms(revision: Revision) -> dict[str, Any]:
    """The z3 term of each route field of ``revision``'s lifted route that a fact maps to, and validity."""
    p = problem(revision, REGISTRY)
    names = {t for t in TERM_OF_FACT.values() if t != VALIDITY}
    terms = {name: as_z3(route_field(p.decision.route, name)) for name in names}
    terms[VALIDITY] = z3.And(*p.constraints)
    return terms


def witnesses(lifted: Revision, base: Revision, fields: list[str]) -> list[Shape]:
    """A few shapes per field of ``fields`` where FILE's lifted value differs from the baseline's (for
    validity: where one side deems a shape valid and the other not), all within the box, both sides
    deeming the shape valid for a route field.  Each query stops at :data:`WITNESS_TIMEOUT_MS`, and the
    fields left once the search has taken :data:`WITNESS_BUDGET_S` are not asked about (a hook's time is
    short; the shapes where the answers differ are run in any case)."""
    ours, theirs = _terms(lifted), _terms(base)
    p = problem(lifted, REGISTRY)
    box = z3.And(*p.symbolic.domain)
    keys = [p.symbolic.variables[n] for n in ("arch", "kv_cache_dtype", "num_heads", "max_qo_len")]
    found: list[Shape] = []
    began = time.perf_counter()
    for name in fields:
        if time.perf_counter() - began > WITNESS_BUDGET_S:
            break
        context = box if name == VALIDITY else z3.And(ours[VALIDITY], theirs[VALIDITY])
        s = z3.Solver()
        s.set("timeout", WITNESS_TIMEOUT_MS)
        s.add(context, ours[name] != theirs[name])
        for _ in range(WITNESSES_PER_FIELD):
            if s.check() != z3.sat:
                break
            model = s.model()
            found.append(p.symbolic.to_shape(model))
            s.add(z3.Or(*[k != model.eval(k, model_completion=True) for k in keys]))
    return list(dict.fromkeys(found))


def near(shapes: list[Shape], lifted: Revision, count: int, seed: int) -> list[Shape]:
    """Up to ``count`` shapes FILE deems valid drawn around ``shapes``: a witness with each field redrawn
    from its domain with probability :data:`NEAR_PROBABILITY` (an unbounded integer within 3 steps of the
    witness's value)."""
    if not shapes:
        return []
    rng = random.Random(seed)
    reg = load_registry(REGISTRY)
    out: list[Shape] = []
    for _ in range(20 * count):
        if len(out) >= count:
            break
        values = rng.choice(shapes).to_json()
        for name, value in values.items():
            if rng.random() >= NEAR_PROBABILITY:
                continue
            spec = FIELD_BY_NAME[name]
            if spec.kind == "bool":
                values[name] = rng.random() < 0.5
            elif spec.values:  # an enum, or an int of few values (dcp_world_size)
                values[name] = rng.choice(spec.values)
            else:
                values[name] = max(spec.minimum, value + rng.randint(-3, 3))
        try:
            shape = Shape.from_json(values)
        except (TypeError, ValueError):
            continue
        if lifted.is_valid(shape, reg):
            out.append(shape)
    return list(dict.fromkeys(out))


def class_shapes(baseline: Baseline) -> list[Shape]:
    """The smallest shape of every counterexample class of the baseline, every registry and invariant."""
    found = [Shape.from_json(c["shape"]) for b in baseline.results.values() for c in b.classes.values()]
    return list(dict.fromkeys(found))


def new_class_shapes(results: Iterable[CheckResult], already: set[Shape]) -> list[Shape]:
    """The smallest shape of every class of FILE's results not already run."""
    found = [c.shape for r in results for c in r.counterexamples if c.shape not in already]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Finding:
    """Disagreements of one kind: a field where the executed file gives one value and the lifted gates
    another, with how many shapes show it and the first of them."""

    field: str
    lifted: Any
    executed: Any
    shapes: int
    shape: dict[str, Any]


def findings(judgement: Judgement) -> list[Finding]:
    """The disagreements grouped by (field, lifted value, executed value), most shapes first."""
    groups: dict[tuple[str, str, str], list[Disagreement]] = {}
    for d in judgement.disagreements:
        groups.setdefault((d.field, repr(d.model), repr(d.executed)), []).append(d)
    found = [Finding(g[0].field, g[0].model, g[0].executed, len(g), g[0].shape) for g in groups.values()]
    return sorted(found, key=lambda f: (-f.shapes, f.field))
