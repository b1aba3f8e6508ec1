"""The ``mla-spec`` command line: a thin layer over mla_model, spec and conformance.

It lives in the top layer because later commands (replay on a GPU) need the
conformance package; the proof commands only call into spec.

Exit status: 0 all proved, 1 some invariant violated, 2 bad input (one line on
stderr, no traceback), 3 some verdict unknown (and none violated).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from conformance.cli_common import (
    EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED, BadInput, OneLineErrors, Seconds, format_option, shape_options,
    shape_summary,
)
from mla_model.registry import NO_KERNEL, REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS
from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID, INVARIANTS
from spec.proof.prover import DEFAULT_TIMEOUT_MS, PROVED, UNKNOWN, VIOLATED, CheckResult, check


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mla-spec", prog_name="mla-spec")
def main() -> None:
    """Prove vLLM's ROCm AITER MLA decode routing correct, or show where it breaks."""


def _cell(r: CheckResult) -> str:
    if r.verdict == PROVED:
        return "[green]PROVED[/]"
    if r.verdict == UNKNOWN:
        return "[yellow]UNKNOWN[/]"
    more = "" if r.complete else "+"
    return f"[red]VIOLATED ({r.classes}{more})[/]"


def _print_text(results: list[CheckResult], console: Console) -> None:
    registries = list(dict.fromkeys(r.registry for r in results))
    by_key = {(r.revision, r.registry, r.invariant): r for r in results}
    table = Table(title="mla-spec check")
    table.add_column("revision", style="bold", no_wrap=True)
    table.add_column("invariant", no_wrap=True)
    for reg in registries:
        table.add_column(reg, no_wrap=True)
    revisions = list(dict.fromkeys(r.revision for r in results))
    invariants = list(dict.fromkeys(r.invariant for r in results))
    for i, rev in enumerate(revisions):
        for j, inv_id in enumerate(invariants):
            cells = [_cell(by_key[(rev, reg, inv_id)]) if (rev, reg, inv_id) in by_key else "" for reg in registries]
            table.add_row(rev if j == 0 else "", inv_id, *cells, end_section=(j == len(invariants) - 1))
    console.print(table)
    for r in results:
        if r.verdict == VIOLATED:
            inv = INVARIANT_BY_ID[r.invariant]
            shown = f"{len(r.counterexamples)} class{'es' if len(r.counterexamples) != 1 else ''}"
            console.print(f"\n[red]VIOLATED[/] [bold]{r.invariant}[/] on {r.revision} with {r.registry} "
                          f"({shown}{'' if r.complete else ', more not enumerated'})")
            console.print(f"  [dim]breaks in production as:[/] {inv.symptom}")
            for c in r.counterexamples:
                detail = c.symptom.split(" -> ")[0]
                console.print(f"  - {shape_summary(c.shape)}  [cyan]->{c.route['path']}[/]  {detail}", soft_wrap=True)
        elif r.verdict == UNKNOWN:
            console.print(f"\n[yellow]UNKNOWN[/] {r.invariant} on {r.revision} with {r.registry}: {r.reason}")


@main.command("check")
@click.option("--revision", "revisions", multiple=True, type=click.Choice(list(REVISIONS)),
              help="Gate revision to check (repeatable; default: all).")
@click.option("--registry", "registries", multiple=True, type=click.Choice(list(REGISTRY_IDS)),
              help="AITER registry to check against (repeatable; default: all).")
@click.option("--invariant", "invariants", multiple=True, type=click.Choice(list(INVARIANT_BY_ID)),
              help="Invariant to prove (repeatable; default: all).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif"]), default="text", show_default=True,
              help="sarif: SARIF 2.1.0 for code-scanning views (violations as errors).")
@click.option("--max-classes", type=click.IntRange(min=1), default=10, show_default=True,
              help="Counterexample classes to enumerate per violated invariant.")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT_MS / 1000, show_default=True,
              help="Seconds per solver call; a timeout is UNKNOWN, never a pass.")
@click.option("--vllm", "releases", multiple=True, metavar="RELEASE|PATH",
              help="Check a vLLM release's (or file's) real gate functions instead of the model's (repeatable).")
def check_command(revisions, registries, invariants, fmt, max_classes, timeout, releases) -> None:
    """Prove or refute each routing and buffer-sizing invariant."""
    targets = [*revisions, *[_real(r) for r in releases]] if releases else list(revisions or REVISIONS)
    results = _run_checks(targets, registries or REGISTRY_IDS, invariants or list(INVARIANT_BY_ID), max_classes, timeout)
    _report(results, fmt)


def _real(spec: str) -> Any:
    from spec.realcode.revision import real_revision
    from spec.realcode.source import SourceError

    try:
        return real_revision(spec)
    except SourceError as e:
        raise BadInput(str(e)) from None


def _run_checks(targets, registries, invariants, max_classes, timeout) -> list[CheckResult]:
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
            for job, results in zip(parallel, pool.map(_check_pair, parallel, chunksize=1)):
                done[id(job)] = results
    return [r for job in jobs for r in done.get(id(job)) or _check_pair(job)]


def _check_pair(job: tuple) -> list[CheckResult]:
    from spec.realcode.symexec import LiftingUnsupported

    rev, reg, invariants, max_classes, timeout = job
    results = []
    for inv in invariants:
        try:
            results.append(check(rev, reg, INVARIANT_BY_ID[inv], max_classes=max_classes,
                                 timeout_ms=int(timeout * 1000)))
        except LiftingUnsupported as e:
            rid = rev if isinstance(rev, str) else rev.id
            results.append(CheckResult(rid, reg, inv, UNKNOWN, 0.0, complete=False,
                                       reason=f"lifting unsupported ({e}); run 'mla-spec bind' for the bounded check"))
    return results


def _exit_for(results: list[CheckResult]) -> None:
    """Exit 1 if anything is violated, else 3 if anything is unknown, else 0."""
    verdicts = {r.verdict for r in results}
    sys.exit(EXIT_VIOLATED if VIOLATED in verdicts else EXIT_UNKNOWN if UNKNOWN in verdicts else EXIT_OK)


def _report(results: list[CheckResult], fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps({"results": [r.to_json() for r in results]}, indent=2))
    elif fmt == "sarif":
        from spec.sarif import check_log

        click.echo(json.dumps(check_log(results, shape_summary), indent=2))
    else:
        _print_text(results, Console(highlight=False))
    _exit_for(results)


@main.command("audit")
@click.option("--vllm", "vllm_flag", is_flag=True, help="Accepted for symmetry: the arguments are vLLM releases.")
@click.argument("releases", nargs=-1, required=True)
@click.option("--registry", "registries", multiple=True, type=click.Choice(list(REGISTRY_IDS)),
              help="AITER registry (repeatable; default: aiter-0.1.20).")
@click.option("--invariant", "invariants", multiple=True, type=click.Choice(list(INVARIANT_BY_ID)),
              help="Invariant to prove (repeatable; default: all).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: check's JSON plus the executed differential per release.")
@click.option("--max-classes", type=click.IntRange(min=1), default=10, show_default=True,
              help="Counterexample classes to enumerate per violated invariant (as check).")
@click.option("--timeout", type=Seconds(), default=DEFAULT_TIMEOUT_MS / 1000, show_default=True,
              help="Seconds per solver call; a timeout is UNKNOWN, never a pass.")
@click.option("--executed", "count", type=click.IntRange(min=0), default=2000, show_default=True,
              help="Random valid shapes for each release's executed differential against its model revision "
                   "(besides the solver-found cases); 0 skips it.")
def audit_command(vllm_flag, releases, registries, invariants, fmt, max_classes, timeout, count) -> None:
    """Prove the invariants on the real gates of several vLLM releases (release x invariant), and run each
    release's real decode path against the model revision that describes it."""
    targets = [_real(r) for r in releases]
    results = _run_checks(targets, registries or ("aiter-0.1.20",), invariants or list(INVARIANT_BY_ID),
                          max_classes, timeout)
    executed = _executed_all(releases, count) if count else {}
    disagree = any(e is not None and e.disagreements for e in executed.values())
    if fmt == "json":
        click.echo(json.dumps({"results": [r.to_json() for r in results],
                               "executed": {label: e.to_json() if e else None for label, e in executed.items()}},
                              indent=2))
        sys.exit(EXIT_VIOLATED) if disagree else _exit_for(results)
    labels = list(dict.fromkeys((r.revision, r.registry) for r in results))
    console = Console(highlight=False, width=max(80, 34 + 12 * len(labels)))
    table = Table(title="mla-spec audit: real gates of each release (✓ proved, ✗ n: violated in n classes)")
    table.add_column("invariant", style="bold", no_wrap=True)
    for rev, reg in labels:
        table.add_column(rev.replace("vllm==", "") + ("" if len({g for _, g in labels}) == 1 else f"\n{reg}"),
                         no_wrap=True)
    by_key = {(r.revision, r.registry, r.invariant): r for r in results}
    for inv in dict.fromkeys(r.invariant for r in results):
        table.add_row(inv, *[_short(by_key[(rev, reg, inv)]) for rev, reg in labels])
    if executed:
        table.add_row("[italic]executed vs model[/]", *[_executed_cell(executed.get(rev)) for rev, _ in labels],
                      end_section=False)
    console.print(table)
    if executed:
        console.print("executed vs model: the release's real decode path against its model revision, "
                      "as disagreements / shapes (mla-spec bind shows them)")
    if disagree:
        sys.exit(EXIT_VIOLATED)
    _exit_for(results)


def _executed_all(releases: tuple[str, ...], count: int) -> dict[str, Any]:
    from spec.realcode.bind import default_model, executed_comparison
    from spec.realcode.executed.harness import HarnessError
    from spec.realcode.source import SourceError, release_version

    out: dict[str, Any] = {}
    for spec in releases:
        version = release_version(spec)
        label = f"vllm=={version}" if version else spec  # as check labels the release's column
        model = default_model(label)
        try:
            out[label] = executed_comparison(spec, model, count) if model else None
        except (SourceError, HarnessError) as e:
            raise BadInput(str(e)) from None
    return out


def _executed_cell(e: Any) -> str:
    if e is None:
        return "[dim]no model[/]"
    n = len(e.disagreements)
    return f"[{'red' if n else 'green'}]{n}/{e.shapes:,}[/]"


def _short(r: CheckResult) -> str:
    return {"PROVED": "[green]✓[/]", "UNKNOWN": "[yellow]?[/]"}.get(
        r.verdict, f"[red]✗ {r.classes}{'' if r.complete else '+'}[/]")


@main.command("bind")
@click.option("--vllm", "spec", required=True, metavar="RELEASE|PATH", help="vLLM release, tree or rocm_aiter_mla.py.")
@click.option("--revision", type=click.Choice(list(REVISIONS)), help="Model revision to compare with "
              "(default: the one that models that release).")
@format_option("json")
@click.option("--no-symbolic", is_flag=True, help="Only the bounded comparison (no lifting).")
@click.option("--shapes", "count", type=click.IntRange(min=0), default=2000, show_default=True,
              help="Random valid shapes for the executed differential (besides the solver-found cases); "
                   "0 skips it.")
def bind_command(spec, revision, fmt, no_symbolic, count) -> None:
    """Compare a release with a model revision: its gate functions (symbolic and bounded), and its whole
    decode path executed shape by shape against the model's routes."""
    from spec.realcode.bind import bind, executed_comparison
    from spec.realcode.executed.harness import HarnessError
    from spec.realcode.source import SourceError

    try:
        label, model_id, rows = bind(spec, revision, symbolic=not no_symbolic)
        executed = executed_comparison(spec, model_id, count) if count else None
    except (SourceError, ValueError, HarnessError) as e:
        raise BadInput(str(e)) from None
    if fmt == "json":
        click.echo(json.dumps({"release": label, "revision": model_id, "functions": [r.to_json() for r in rows],
                               "executed": executed.to_json() if executed else None}, indent=2, default=str))
    else:
        console = Console(highlight=False)
        table = Table(title=f"mla-spec bind: {label} against the model revision {model_id}")
        for col in ("function", "method", "verdict", "points", "seconds"):
            table.add_column(col, no_wrap=True)
        for r in rows:
            colour = {"EQUIVALENT": "green", "DIFFERENT": "red"}.get(r.verdict, "yellow")
            table.add_row(r.function, r.method, f"[{colour}]{r.verdict}[/]", f"{r.checked:,}" if r.checked else "",
                          f"{r.seconds:.2f}")
        console.print(table)
        for r in rows:
            if r.reason:
                console.print(f"{r.function} ({r.method}): {r.reason}")
            for d in r.differences:
                where = shape_summary(Shape(**d["shape"])) if "shape" in d else json.dumps(d["inputs"])
                console.print(f"[red]{r.function}[/] ({r.method}) differs at {where}: "
                              f"real {d['real']!r}, model {d['model']!r}", soft_wrap=True)
        if executed:
            _print_executed(executed, console)
    # 1: some function differs; 3: lifting failed, so the gate was not compared symbolically.
    if any(r.verdict == "DIFFERENT" for r in rows) or (executed and executed.disagreements):
        sys.exit(EXIT_VIOLATED)
    sys.exit(EXIT_UNKNOWN if any(r.verdict == "UNSUPPORTED" and r.method == "symbolic" for r in rows) else EXIT_OK)


def _print_executed(executed: Any, console: Console) -> None:
    n = len(executed.disagreements)
    colour = "red" if n else "green"
    console.print(f"executed: {label_count(executed.shapes, 'shape')} of {executed.release}'s real decode path "
                  f"({executed.valid:,} valid) against {executed.revision}: [{colour}]{n} disagreement"
                  f"{'' if n == 1 else 's'}[/] ({executed.seconds:.1f} s)")
    console.print("  compared: " + ", ".join(f"{k} {v:,}" for k, v in sorted(executed.compared.items())),
                  soft_wrap=True)
    for d in executed.disagreements[:10]:
        console.print(f"  [red]{d.field}[/] at {shape_summary(Shape(**d.shape))}: executed {d.executed!r}, "
                      f"model {d.model!r}", soft_wrap=True)


def label_count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


@main.command("list")
@format_option("json")
def list_command(fmt) -> None:
    """List the gate revisions, AITER registries and invariants mla-spec knows."""
    revisions = [
        {"id": r.id, "title": r.title, "source": r.source,
         "validity": [name for name, _ in r.rules(load_registry(REGISTRY_IDS[-1]))]}
        for r in REVISIONS.values()
    ]
    registries = [{"id": i, "source": load_registry(i).source} for i in REGISTRY_IDS]
    invariants = [{"id": i.id, "statement": i.statement, "symptom": i.symptom, "source": i.source,
                   "pr_51011": i.pr_51011} for i in INVARIANTS]
    if fmt == "json":
        click.echo(json.dumps({"revisions": revisions, "registries": registries, "invariants": invariants}, indent=2))
        return
    console = Console(highlight=False)
    for r in revisions:
        console.print(f"[bold]{r['id']}[/] accepts a shape when: " + "; ".join(r["validity"]))
    for title, rows, cols in (
        ("gate revisions", revisions, ("id", "title", "source")),
        ("AITER registries", registries, ("id", "source")),
        ("invariants", invariants, ("id", "statement")),
    ):
        table = Table(title=title, show_lines=True)
        for c in cols:
            table.add_column(c, no_wrap=(c == "id"))
        for row in rows:
            table.add_row(*[str(row[c]) for c in cols])
        console.print(table)


@main.command("explain")
@click.option("--revision", type=click.Choice(list(REVISIONS)), help="Gate revision (default: the case's, else vllm-0.28).")
@click.option("--registry", type=click.Choice(list(REGISTRY_IDS)), help="AITER registry (default: the case's, else aiter-0.1.20).")
@click.option("--case", "case_ref", metavar="ID", help="A case id (gfx950-fp8-h12-q5-dspark3-auto); the shape flags then change it.")
@click.option("--cases", "cases_file", type=click.Path(dir_okay=False, path_type=Path),
              help="cases.jsonl to take the case's revision and registry from.")
@format_option("json")
@shape_options
def explain_command(revision, registry, case_ref, cases_file, fmt, **fields) -> None:
    """Explain one shape: each gate and its conditions, the route, AITER's kernel lookup, each invariant
    (with the conjunct that breaks), and why the persistent schedule is off."""
    from mla_model.case import parse_case_id, read_cases
    from spec.analyses.explain import explain

    given = {k: v for k, v in fields.items() if v is not None}
    try:
        base = parse_case_id(case_ref).to_json() if case_ref else {}
        if cases_file is not None:
            if not case_ref:
                raise ValueError("--cases needs --case ID")
            match = next((c for c in read_cases(cases_file) if c.id == case_ref), None)
            if match is None:
                raise ValueError(f"no case {case_ref!r} in {cases_file}")
            revision, registry = revision or match.revision, registry or match.registry
        shape = Shape(**{**base, **given})
    except (ValueError, OSError) as e:
        raise BadInput(str(e)) from None
    revision, registry = revision or "vllm-0.28", registry or "aiter-0.1.20"
    if revision not in REVISIONS:
        raise BadInput(f"the case's revision {revision!r} is not one mla-spec knows")
    if registry not in REGISTRY_IDS:
        raise BadInput(f"the case's registry {registry!r} is not one mla-spec knows")
    out = explain(REVISIONS[revision], load_registry(registry), shape)
    if fmt == "json":
        click.echo(json.dumps(out, indent=2))
        sys.exit(EXIT_OK)
    _print_explanation(out, shape, revision, registry, Console(highlight=False))
    sys.exit(EXIT_OK)


def _print_explanation(out: dict, shape: Shape, revision: str, registry: str, console: Console) -> None:
    console.print(f"[bold]{shape_summary(shape)}[/] on {revision} with {registry}")
    if not out["valid"]:
        broken = [name for name, ok in out["validity"].items() if not ok]
        console.print(f"[yellow]not a shape the engine accepts[/]: breaks {'; '.join(broken)}")
    for gate, d in out["decisions"].items():
        conditions = "  ".join(f"{text} {'[green]yes[/]' if v else '[red]no[/]'}" for text, v in d["conditions"].items())
        console.print(f"  {gate} = [bold]{d['value']}[/]  [dim]<-[/] {conditions}", soft_wrap=True)
    r, k = out["route"], out["kernel"]
    console.print(f"  _mtp_decode_qlen = {r['mtp_decode_qlen']}")
    if r["path"].startswith("asm"):
        padded = f"{r['padded_q_heads']} by {r['head_padding']}" if r["head_padding"] != "none" else "no padding"
        console.print(f"  route: [cyan]{r['path']}[/], {r['decode_heads']} heads ({padded}; the kernel is asked for "
                      f"{r['request']['padded_heads']}), qlen {r['request']['kernel_qlen']}")
    else:
        console.print(f"  route: [cyan]{r['path']}[/], {r['decode_heads']} heads, qlen {r['request']['kernel_qlen']}")
    if r["path"].startswith("asm"):
        key = " ".join(f"{a}:{b}" for a, b in k["key"].items())
        console.print(f"  AITER: persistent={k['persistent_after_aiter']}  key {key}  -> "
                      + (k['kernel'] if k['kernel'] != NO_KERNEL else f"[red]{NO_KERNEL}[/]")
                      + (f"  get_block_n_fp8[{k['block_n_key']}] {'ok' if k['block_n_key_ok'] else '[red]KeyError[/]'}"
                         if k["block_n_lookup"] else ""))
    if "why_not_persistent" in out:
        console.print("  why not persistent: the gate stays closed for " + ", ".join(out["why_not_persistent"]))
    for inv_id, v in out["invariants"].items():
        if v["holds"]:
            console.print(f"  {inv_id}: [green]holds[/]")
            continue
        console.print(f"  {inv_id}: [red]VIOLATED[/]: {v['symptom']}", soft_wrap=True)
        given = f"given {', '.join(v['violated']['given'])}: " if v["violated"]["given"] else ""
        console.print(f"    [dim]{given}[/]{'; '.join(v['violated']['violated'])}", soft_wrap=True)


# Commands that live in their own modules.
from conformance.cmd_cases import cases_command  # noqa: E402

main.add_command(cases_command)
from conformance.cmd_mutate import mutate_command  # noqa: E402

main.add_command(mutate_command)
from conformance.cmd_graph import graph_command  # noqa: E402

main.add_command(graph_command)
from conformance.cmd_conform import conform_command  # noqa: E402

main.add_command(conform_command)
from conformance.cmd_diff import diff_command  # noqa: E402

main.add_command(diff_command)
from conformance.cmd_vllm_tests import vllm_tests_command  # noqa: E402

main.add_command(vllm_tests_command)
