"""``mla-spec mutate``: the mutation score of the generated suite against the vllm-0.28 gates.

Exit status: 0 when the generated cases kill every mutant that z3 does not
prove equivalent; 1 when some mutant survives them (its witness shape is
printed: the generator's gap); 3 when an equivalence proof timed out and
nothing survived.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from conformance.cli_common import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED, format_option, shape_summary
from spec.mutation import DEFAULT_TIMEOUT_MS, REGISTRY_ID, REVISION_ID, UNKNOWN, MutantResult, MutationReport, score


def _mark(killed: bool) -> str:
    return "[green]killed[/]" if killed else "[red]survives[/]"


def _equivalent(r: MutantResult) -> str:
    if r.equivalent is True:
        return "[green]proved[/]"
    if r.equivalent == UNKNOWN:
        return "[yellow]unknown[/]"
    return "no" if r.killed_by_generated else "[red]no (witness)[/]"


def _print_text(report: MutationReport, console: Console) -> None:
    table = Table(title=f"mla-spec mutate: {REVISION_ID} gates, {REGISTRY_ID}")
    table.add_column("mutant", style="bold", no_wrap=True)
    table.add_column("site (vLLM 0.28.0)", no_wrap=True)
    table.add_column(f"generated ({report.generated_cases} cases)", no_wrap=True)
    table.add_column(f"PR grid ({report.pr_grid_cases} cases)", no_wrap=True)
    table.add_column("equivalent", no_wrap=True)
    for r in report.results:
        table.add_row(r.mutant.id, r.mutant.site, _mark(r.killed_by_generated), _mark(r.killed_by_pr_grid),
                      _equivalent(r))
    console.print(table)
    results = report.results
    equivalent = sum(r.equivalent is True for r in results)
    console.print(f"{len(results)} mutants, {equivalent} proved equivalent; generated cases kill "
                  f"{sum(r.killed_by_generated for r in results)} with {report.generated_cases} cases, the PR's grids "
                  f"{sum(r.killed_by_pr_grid for r in results)} with {report.pr_grid_cases} "
                  f"({report.seconds:.1f} s)")
    for r in results:
        if r.survives_generated:
            where = "" if r.witness is None else f": {shape_summary(r.witness)}"
            verdict = "z3 timed out on" if r.equivalent == UNKNOWN else "no generated case kills"
            console.print(f"[red]{verdict}[/] [bold]{r.mutant.id}[/] ({r.mutant.description}){where}", soft_wrap=True)


@click.command("mutate")
@format_option("json")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT_MS / 1000, show_default=True,
              help="Seconds z3 may spend proving one surviving mutant equivalent (then: unknown).")
def mutate_command(fmt, timeout) -> None:
    """Mutants of the vllm-0.28 gates: killed by the generated cases? by PR #51011's grids? equivalent?"""
    report = score(timeout_ms=int(timeout * 1000))
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        # Wide enough for the table whatever the terminal (as `check` sizes its own): ids and sites never wrap.
        width = 70 + max(len(r.mutant.id) for r in report.results) + max(len(r.mutant.site) for r in report.results)
        _print_text(report, Console(highlight=False, width=width))
    survivors = [r for r in report.results if r.survives_generated]
    sys.exit(EXIT_VIOLATED if any(r.equivalent is False for r in survivors) else EXIT_UNKNOWN if survivors else EXIT_OK)
