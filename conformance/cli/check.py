"""``mla-spec check``: prove or refute each invariant, for model revisions or a release's real gates."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from conformance.cli.errors import EXIT_VIOLATED, BadInput, exit_for_checks, exit_for_expectations
from conformance.cli.knobs import knob_findings, knob_line, knob_text, knob_variants, with_settings
from conformance.cli.memory_options import max_num_seqs_option, memory_budget_option
from conformance.cli.options import (
    RELEASE_PREFIX,
    invariant_option,
    load_revision,
    max_classes_option,
    registry_option,
    revision_option,
    timeout_option,
)
from conformance.cli.render.text import check_table, detailed_results, shape_summary
from conformance.cli.second_judge import disagreeing, finish_judges, report_text, start_judges
from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS
from spec.proof.check_all import check_all
from spec.proof.classes import Baseline, BaselineOutcome, class_id, class_json, compare_classes
from spec.proof.expectations import BUNDLED, Manifest, ManifestError, Outcome, compare, load_manifest
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult

if TYPE_CHECKING:
    from spec.realcode.baseline import Choice

Judged = Outcome | BaselineOutcome  # a result held to the manifest's row, or to its baseline's classes
NO_BASELINE = "none"  # --baseline none: the manifest alone

EXAMPLES = """\b
Examples:
  mla-spec check
  mla-spec check --revision vllm-0.34 --invariant kernel-exists --no-expect --show 5
  mla-spec check --vllm 0.34.0 --format sarif > check.sarif
  mla-spec check vllm/v1/attention/backends/mla/rocm_aiter_mla.py
  mla-spec check rocm_aiter_mla.py --baseline 0.33.0
"""


@click.command("check", epilog=EXAMPLES)
@revision_option(multiple=True)
@registry_option(multiple=True)
@invariant_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "sarif", "junit"]),
    default="text",
    show_default=True,
    help="json for a program; sarif: SARIF 2.1.0 for code-scanning views "
    "(violations as errors); junit: one test case per (revision, registry, invariant).",
)
@max_classes_option
@timeout_option
@click.option(
    "--show",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Counterexample classes the text prints per violation (JSON, SARIF and JUnit carry all).",
)
@click.option(
    "--vllm",
    "releases",
    multiple=True,
    metavar="RELEASE|PATH",
    help="Check a vLLM release's (or file's) real gate functions instead of the model's (repeatable).",
)
@click.option(
    "--expect",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Expected-verdicts manifest to compare with (default: the bundled "
    "spec/proof/expected_verdicts.toml): exit 0 when every verdict matches it, 1 naming each surprise.",
)
@click.option(
    "--no-expect",
    is_flag=True,
    help="Raw verdicts: no manifest, no baseline; exit 1 on any violation, and every violation detailed.",
)
@click.option(
    "--baseline",
    metavar="RELEASE|PATH|none",
    help="Compare each gate file (GATE_FILE, --vllm PATH; with this option, --vllm RELEASE too) with this "
    "release or file class by class: a NEW counterexample class is a surprise (exit 1), a GONE one is "
    "fixed.  Default for a gate file, unless --expect is given: the release it comes from (its vLLM "
    "tree's version, else the release closest by content).  none: the manifest alone.",
)
@click.option(
    "--execute/--no-execute",
    default=True,
    show_default=True,
    help="The second judge: also execute each gate file that sits in a vLLM tree (confined, needs torch) "
    "on its baseline's and its own counterexample classes, 500 random shapes, and up to 500 more around "
    "the shapes where its lifted gates route otherwise than the baseline's, and compare every routing "
    "fact with the lifted gates; a disagreement is a surprise (exit 1).  A lone file is never executed.",
)
@memory_budget_option()
@max_num_seqs_option("; only with --memory-budget")
@click.argument("gate_files", nargs=-1, metavar="[GATE_FILE]...")
def check_command(
    revisions,
    registries,
    invariants,
    fmt,
    max_classes,
    timeout,
    show,
    releases,
    manifest_path,
    no_expect,
    baseline,
    execute,
    memory_budget,
    max_num_seqs,
    gate_files,
) -> None:
    """Prove or refute each routing and buffer-sizing invariant, and compare the verdicts with the
    expected-verdicts manifest.

    GATE_FILE arguments are rocm_aiter_mla.py files (or vLLM trees) checked like --vllm PATH, so a
    pre-commit hook can hand check the changed files.  A gate file is compared with its baseline class by
    class (--baseline), not with the manifest.

    Executes code in confined child processes (docs/explanation/architecture.md, the trust boundary):
    a release's rocm_aiter_mla.py, or the file itself where it sits in a vLLM tree (or, for a lone file,
    its baseline release's), to read its reorder_batch_threshold; and a gate file that sits in a vLLM tree
    as the second judge (--execute)."""
    releases = (*releases, *gate_files)
    if max_num_seqs is not None and memory_budget is None:
        raise BadInput("--max-num-seqs sizes the buffers --memory-budget checks; give --memory-budget too")
    if no_expect and manifest_path is not None:
        raise BadInput("--expect and --no-expect contradict each other; give one")
    if no_expect and baseline not in (None, NO_BASELINE):
        raise BadInput("--baseline and --no-expect contradict each other; give one")
    if baseline not in (None, NO_BASELINE) and not any(r not in REVISIONS for r in releases):
        raise BadInput("--baseline compares a gate file or release with it: give GATE_FILE or --vllm")
    manifest = None if no_expect else read_manifest(manifest_path or BUNDLED)
    choices = {
        spec: choice
        for spec in releases
        if (choice := baseline_choice(spec, baseline, default=manifest_path is None and not no_expect))
    }
    trees = [None if r not in choices else choices[r].target_tree for r in releases]
    real = [load_revision(r, tree, refused_as_unknown=True) for r, tree in zip(releases, trees)]
    knobs = knob_variants(releases, real, trees)
    variants = [rev for k in knobs for _, rev in k.variants]
    targets = [*revisions, *real, *variants] if releases else list(revisions or REVISIONS)
    baselines = with_settings(
        {rev.id: classes_of(choices[spec], timeout) for spec, rev in zip(releases, real) if spec in choices},
        knobs,
    )
    judges = start_judges(releases, real, choices, baselines) if execute else {}
    results = check_all(
        targets, registries or REGISTRY_IDS, invariants or list(INVARIANT_BY_ID), max_classes, timeout
    )
    judged = finish_judges(judges, real, results, choices, releases)
    memory = None
    if memory_budget is not None:
        from spec.analyses.memory import over_budget

        memory = (memory_budget, *over_budget(targets, memory_budget, max_num_seqs))
    outcomes = None if manifest is None else judge(results, manifest, baselines)
    if outcomes is not None and choices:
        outcomes = grown_outcomes(outcomes, releases, real, knobs, choices, timeout)
    # Hits are named where they are shown: every class in JSON, the classes the text details (a file's NEW
    # classes among them), none in SARIF or JUnit (the default text run, whose violations are all expected,
    # details none).
    if fmt == "json":
        shown = [(r, r.counterexamples) for r in results]
    elif fmt == "text":
        shown = [(r, r.counterexamples[:show]) for r in detailed_results(results, outcomes)]
        shown += [(o.result, list(o.new[:show])) for o in outcomes or [] if isinstance(o, BaselineOutcome)]
    else:
        shown = []
    stand_in_lines: list[str] = []
    if real:  # a release's or file's real gates (the plain check imports none of spec.realcode)
        from spec.realcode.revision import stand_ins

        stand_in_lines = [line for rev in real for line in stand_ins(rev)]
    report(
        results,
        fmt,
        outcomes,
        show,
        deployments_hit(shown, targets),
        memory,
        judged,
        knob_findings(knobs, outcomes),
        stand_in_lines,
    )


def grown_outcomes(
    outcomes: list[Judged], releases: tuple[str, ...], real: list, knobs: list, choices: dict, timeout: float
) -> list[Judged]:
    """The outcomes with the violations each gate file adds inside classes its baseline has
    (:mod:`spec.proof.growth`), its knob settings held to the same baseline revision."""
    from spec.proof.growth import with_growth
    from spec.realcode.baseline import baseline_revision

    base = with_settings(
        {rev.id: baseline_revision(choices[spec]) for spec, rev in zip(releases, real) if spec in choices},
        knobs,
    )
    revisions = {rev.id: rev for rev in real} | {rev.id: rev for k in knobs for _, rev in k.variants}
    return with_growth(outcomes, revisions, base, int(timeout * 1000))


def deployments_hit(shown: list[tuple[CheckResult, list]], targets: list) -> dict[int, list[str]]:
    """For each counterexample shown (by id), the bundled deployments its class hits ("Kimi-K3 TP8 fp8").

    Hits are counted with the numpy interpretation: a model revision's gates as written, a release's or a
    file's real gates as their lifted terms evaluated over the deployments' table
    (:func:`spec.analyses.shape_grid.evaluate_z3`), so a file's classes name the deployments the file
    itself sends there.
    """
    from spec.analyses.hits import hits

    revision = {t if isinstance(t, str) else t.id: t for t in targets}
    return {
        id(c): hits(revision[r.revision], r.registry, r.invariant, c.view)
        for r, counterexamples in shown
        for c in counterexamples
    }


def baseline_choice(spec: str, given: str | None, default: bool) -> Choice | None:
    """What the check target ``spec`` is compared with class by class (None: the manifest judges it): a
    given baseline for any release or file, the release it comes from by default for a file (``default``:
    neither --expect nor --no-expect given)."""
    from spec.realcode.baseline import choose
    from spec.realcode.source import SourceError, is_release

    release = spec.removeprefix(RELEASE_PREFIX)
    if spec in REVISIONS or given == NO_BASELINE or (given is None and (not default or is_release(release))):
        return None
    try:
        return choose(spec, given)
    except SourceError as e:
        raise BadInput(f"{e}" if given is None else f"--baseline: {e}") from None


def classes_of(choice: Choice, timeout: float) -> Baseline:
    from spec.realcode.baseline import baseline_classes
    from spec.realcode.source import SourceError

    try:
        return baseline_classes(choice, timeout)
    except SourceError as e:
        raise BadInput(str(e)) from None


def judge(results: list[CheckResult], manifest: Manifest, baselines: dict[str, Baseline]) -> list[Judged]:
    """Each result with what it is held to, in the results' order: its baseline's classes where its
    target has a baseline, else the manifest's row."""
    return [
        compare_classes([r], baselines[r.revision])[0]
        if r.revision in baselines
        else compare([r], manifest)[0]
        for r in results
    ]


def read_manifest(path: Path) -> Manifest:
    try:
        return load_manifest(path)
    except ManifestError as e:
        raise BadInput(str(e)) from None


def report(
    results: list[CheckResult],
    fmt: str,
    outcomes: list[Judged] | None,
    show: int = 3,
    hit: dict[int, list[str]] | None = None,
    memory: tuple[int, list[Any], list[str]] | None = None,
    judged: list[Any] | None = None,
    knobs: list[dict[str, Any]] | None = None,
    stand_ins: list[str] | None = None,
) -> None:
    """Write the results in one format, then exit by the surprises (or, without a manifest, by the
    verdicts).  ``hit`` names the deployments each counterexample's class hits.  ``memory`` is
    ``--memory-budget``'s (budget, what exceeds it, notes): reported after the verdicts; anything over the
    budget makes the exit status 1 whatever the verdicts.  ``judged``: the second judge's report of each
    gate file (:mod:`conformance.cli.second_judge`); a disagreement makes the exit status 1 too.
    ``knobs``: each knob a gate file reads that the model does not know (:mod:`conformance.cli.knobs`);
    ``stand_ins``: a line per part of a real revision the model stood in for (a warning, not a failure)."""
    hit = hit or {}
    judged = judged or []
    knobs = knobs or []
    stand_ins = stand_ins or []
    if fmt == "json":
        out = check_json(results, outcomes, hit)
        if memory is not None:
            out["memory"] = memory_json(*memory)
        if judged:
            out["executed"] = [j.to_json() for j in judged]
        if knobs:
            out["knobs"] = knobs
        if stand_ins:
            out["stand_ins"] = stand_ins
        click.echo(json.dumps(out, indent=2))
    elif fmt == "sarif":
        from conformance.cli.render.sarif import check_log

        notes = [knob_line(k) for k in knobs]
        log = check_log(results, shape_summary, outcomes, judged, notes, stand_ins)
        click.echo(json.dumps(log, indent=2))
    elif fmt == "junit":
        from conformance.cli.render.junit import check_report

        click.echo(check_report(results, shape_summary, outcomes))
        report_text(judged, Console(stderr=True, highlight=False), shape_summary)
        knob_text(knobs, Console(stderr=True, highlight=False))
        stand_in_text(stand_ins, Console(stderr=True, highlight=False))
    else:
        check_table(results, Console(highlight=False), outcomes, show, hit)
        report_text(judged, Console(highlight=False), shape_summary)
        knob_text(knobs, Console(highlight=False))
        stand_in_text(stand_ins, Console(highlight=False))
    if memory is not None:
        if fmt == "text":
            memory_report(*memory, Console(highlight=False))
        elif fmt != "json":  # SARIF and JUnit stay one document on stdout: the report goes to stderr
            memory_report(*memory, Console(stderr=True, highlight=False))
        if memory[1]:
            sys.exit(EXIT_VIOLATED)
    if disagreeing(judged):
        sys.exit(EXIT_VIOLATED)
    if outcomes is None:
        exit_for_checks(results)
    exit_for_expectations(outcomes)


def stand_in_text(lines: list[str], console: Console) -> None:
    from rich.markup import escape

    for line in lines:
        console.print(f"\n[yellow]warning: {escape(line)}[/]", soft_wrap=True)


def memory_json(budget: int, over: list[Any], notes: list[str]) -> dict[str, Any]:
    return {"budget": budget, "over_budget": [o.to_json() for o in over], "not_measured": notes}


def memory_report(budget: int, over: list[Any], notes: list[str], console: Console) -> None:
    """--memory-budget's lines: each (revision, deployment) over the budget with its bytes."""
    from rich.markup import escape

    from spec.analyses.memory import human

    verdict = f"[red]{len(over)} over[/]" if over else "[green]none over[/]"
    console.print(
        f"\nmemory budget {human(budget)}: {verdict} (persistent decode metadata + AITER's reduce scratch, "
        "every bundled deployment on gfx942 and gfx950)",
        soft_wrap=True,
    )
    for o in over:
        m = o.memory
        console.print(
            f"  {escape(o.target)}  {escape(o.deployment)}: {human(m.total_bytes)} = metadata "
            f"{m.metadata_bytes:,} B + scratch {m.scratch_bytes or 0:,} B  [dim](threshold {m.threshold}, "
            f"heads {m.sizing[-1]['num_heads'] if m.sizing else '?'}, max_num_seqs {m.max_num_seqs})[/]",
            soft_wrap=True,
        )
    for note in notes:
        console.print(f"  [yellow]{escape(note)}[/]", soft_wrap=True)


def check_json(results: list[CheckResult], outcomes: list[Judged] | None, hit: dict[int, list[str]]) -> dict:
    """Every result with every class (its identity, and the deployments it hits); with a manifest or a
    baseline, each result's expectation (the manifest's row, or the baseline's classes: each class's
    baseline_state, the GONE ones as absent) and the surprises."""

    def result_json(r: CheckResult, o: Judged | None = None) -> dict:
        out = r.to_json()
        out["counterexamples"] = [
            {**class_json(c), "hits": hit.get(id(c), [])}
            | ({"baseline_state": o.state(c)} if isinstance(o, BaselineOutcome) else {})
            for c in r.counterexamples
        ]
        return out

    if outcomes is None:
        return {"results": [result_json(r) for r in results]}
    manifests = [o.manifest for o in outcomes if isinstance(o, Outcome)]
    against = {o.result.revision: o.baseline for o in outcomes if isinstance(o, BaselineOutcome)}
    return {
        "manifest": manifests[0] if manifests else None,
        **(
            {
                "baselines": [
                    {"revision": rev, "baseline": b.label, "how": b.how} for rev, b in against.items()
                ]
            }
            if against
            else {}
        ),
        "as_expected": not any(o.surprise for o in outcomes),
        "surprises": [
            {"revision": o.result.revision, "registry": o.result.registry, "invariant": o.result.invariant}
            | ({"new": [class_id(c) for c in o.new]} if isinstance(o, BaselineOutcome) else {})
            for o in outcomes
            if o.surprise
        ],
        "results": [{**result_json(o.result, o), **o.to_json()} for o in outcomes],
    }
