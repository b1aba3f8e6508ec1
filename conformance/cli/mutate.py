"""``mla-spec mutate``: mutants of vLLM 0.28.0's real rocm_aiter_mla.py, our cases vs the shipped tests.

``--dcp``: the DCP gate mutants of vLLM 0.34.0 instead, against our vllm-0.34 cases and
0.34.0's shipped tests.

See :mod:`spec.analyses.mutation`.  Exit status (either set): 0 when our generated cases
kill every mutant not proved equivalent; 1 when a mutant that is not equivalent
survives them; 3 when the only survivors are ones whose equivalence is unknown;
2 for bad input (an unknown ``--mutant``, a release that cannot be fetched, or
an unmutated release that already fails a suite).
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from conformance.cli.errors import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED, BadInput
from conformance.cli.options import Seconds, format_option
from spec.analyses.mutation import DEFAULT_TIMEOUT_MS, UNKNOWN, MutantResult, MutationReport


def _mark(killers: tuple[str, ...]) -> str:
    return f"[green]killed ({len(killers)})[/]" if killers else "[red]survives[/]"


def _killing_tests(killers: tuple[str, ...], shown: int = 3) -> str:
    """The test functions among ``killers`` (pytest node ids), the first ``shown`` of them named."""
    names = list(dict.fromkeys(k.split("::")[-1].split("[")[0] for k in killers))
    more = f", +{len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _equivalent(r: MutantResult) -> str:
    if r.equivalent is True:
        return "[green]proved[/]"
    if r.equivalent == UNKNOWN:
        return f"[yellow]unknown[/] ({r.symbolic.lower()})"
    return "no"


def _print_text(report: MutationReport, console: Console, what: str) -> None:
    """One row per mutant (its killers in both suites, the shipped ones by test function, and
    equivalence), the totals, and every mutant our cases leave alive that is not proved equivalent."""
    table = Table(
        title=f"mla-spec mutate{what}: vLLM {report.release} rocm_aiter_mla.py, "
        f"model {report.revision}, {report.registry}"
    )
    table.add_column("mutant", style="bold", no_wrap=True)
    table.add_column("site", no_wrap=True)
    table.add_column("mutation")
    table.add_column(f"generated ({report.generated_cases} cases)", no_wrap=True)
    table.add_column(f"shipped ({report.shipped_items} items)", no_wrap=True)
    table.add_column("shipped killers", no_wrap=True)
    table.add_column("equivalent", no_wrap=True)
    for r in report.results:
        table.add_row(
            r.mutant.id,
            r.mutant.site,
            r.mutant.description,
            _mark(r.generated_killers),
            _mark(r.shipped_killers),
            _killing_tests(r.shipped_killers),
            _equivalent(r),
        )
    console.print(table)
    t = report.totals()
    console.print(
        f"{t['mutants']} mutants, {t['equivalent']} proved equivalent, {t['unknown']} unknown; "
        f"generated cases kill {t['killed_by_generated']}, shipped tests {t['killed_by_shipped']} "
        f"(both {t['killed_by_both']}, only generated {t['killed_only_by_generated']}, "
        f"only shipped {t['killed_only_by_shipped']}, neither {t['killed_by_neither']}) "
        f"({report.seconds:.1f} s, {report.workers} workers)"
    )
    for r in report.results:
        if r.survives_generated:
            verdict = (
                "[red]no generated case kills[/]"
                if r.equivalent is False
                else "[yellow]unknown, not killed:[/]"
            )
            console.print(f"{verdict} [bold]{r.mutant.id}[/] ({r.mutant.description})", soft_wrap=True)
        for note in r.notes:
            console.print(f"[yellow]note[/] {r.mutant.id}: {note}", soft_wrap=True)


EXAMPLES = """\b
Examples:
  mla-spec mutate --workers 2
  mla-spec mutate --dcp --format json > mutants.json
"""


@click.command("mutate", epilog=EXAMPLES)
@format_option("json")
@click.option(
    "--timeout",
    type=Seconds(),
    default=DEFAULT_TIMEOUT_MS / 1000,
    show_default=True,
    help="Seconds z3 may spend on one field of one mutant's equivalence (then: unknown).",
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=None, help="Mutants run side by side (default: cores)."
)
@click.option("--mutant", "select", multiple=True, metavar="ID", help="Only this mutant (repeatable).")
@click.option(
    "--dcp",
    is_flag=True,
    help="The DCP gate mutants of vLLM 0.34.0 (its DCP route selection, cprr/segmented/Triton verify gates, "
    "_NATIVE_CPRR_HEADS, _MIN_CPRR_QLEN, the persistent gate's DCP term) against our vllm-0.34 cases "
    "(dcp 1, 2, 4, 8) and 0.34.0's shipped tests.",
)
def mutate_command(fmt, timeout, workers, select, dcp) -> None:
    """Mutants of vLLM 0.28.0's real routing code: killed by our generated cases? by vLLM's shipped tests?
    equivalent?

    Executes each mutant rocm_aiter_mla.py in a confined child process (docs/explanation/architecture.md,
    the trust boundary)."""
    from spec.analyses.mutation import BaselineError, dcp_score, score
    from spec.realcode.source import SourceError

    try:
        report = (dcp_score if dcp else score)(
            select=list(select) or None, workers=workers, timeout_ms=int(timeout * 1000)
        )
    except (KeyError, SourceError, BaselineError) as e:
        raise BadInput(str(e).strip("'\"")) from None
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        width = (
            100
            + max(len(r.mutant.id) for r in report.results)
            + max(len(r.mutant.site) for r in report.results)
            + max(len(_killing_tests(r.shipped_killers)) for r in report.results)
        )
        _print_text(report, Console(highlight=False, width=width), " --dcp" if dcp else "")
    survivors = [r for r in report.results if r.survives_generated]
    sys.exit(
        EXIT_VIOLATED
        if any(r.equivalent is False for r in survivors)
        else EXIT_UNKNOWN
        if survivors
        else EXIT_OK
    )
