"""``mla-spec audit``: the invariants on several releases' real gates, and each release's executed decode path
against the model revision that describes it."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conformance.cli.errors import EXIT_VIOLATED, BadInput, exit_for_checks
from conformance.cli.options import (
    invariant_option,
    load_revision,
    max_classes_option,
    registry_option,
    timeout_option,
)
from conformance.cli.render.text import executed_cell, short_verdict
from spec.proof.check_all import check_all
from spec.proof.invariants import INVARIANT_BY_ID


@click.command("audit")
@click.option(
    "--vllm",
    is_flag=True,
    expose_value=False,
    help="Accepted for symmetry with check and bind: the arguments are vLLM releases either way.",
)
@click.argument("releases", nargs=-1, required=True)
@registry_option(multiple=True, default_help="default: aiter-0.1.20")
@invariant_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: check's JSON plus the executed differential per release.",
)
@max_classes_option
@timeout_option
@click.option(
    "--executed",
    "count",
    type=click.IntRange(min=0),
    default=2000,
    show_default=True,
    help="Random valid shapes for each release's executed differential against its model revision "
    "(besides the solver-found cases); 0 skips it.",
)
def audit_command(releases, registries, invariants, fmt, max_classes, timeout, count) -> None:
    """Prove the invariants on the real gates of several vLLM releases (release x invariant), and run each
    release's real decode path against the model revision that describes it.

    Executes each release's rocm_aiter_mla.py in a confined child process (docs/explanation/architecture.md,
    the trust boundary)."""
    targets = [load_revision(r) for r in releases]
    results = check_all(
        targets, registries or ("aiter-0.1.20",), invariants or list(INVARIANT_BY_ID), max_classes, timeout
    )
    executed = _executed(releases, count) if count else {}
    disagree = any(e is not None and e.disagreements for e in executed.values())
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "results": [r.to_json() for r in results],
                    "executed": {label: e.to_json() if e else None for label, e in executed.items()},
                },
                indent=2,
            )
        )
    else:
        _table(results, executed)
    if disagree:
        sys.exit(EXIT_VIOLATED)
    exit_for_checks(results)


def _executed(releases: tuple[str, ...], count: int) -> dict[str, Any]:
    from spec.realcode.bind import executed_for_releases
    from spec.realcode.executed.harness import HarnessError
    from spec.realcode.source import SourceError

    try:
        return executed_for_releases(releases, count)
    except (SourceError, HarnessError) as e:
        raise BadInput(str(e)) from None


def _table(results: list[Any], executed: dict[str, Any]) -> None:
    labels = list(dict.fromkeys((r.revision, r.registry) for r in results))
    console = Console(highlight=False, width=max(80, 34 + 12 * len(labels)))
    table = Table(title="mla-spec audit: real gates of each release (✓ proved, ✗ n: violated in n classes)")
    table.add_column("invariant", style="bold", no_wrap=True)
    for rev, reg in labels:
        table.add_column(
            escape(rev.replace("vllm==", "")) + ("" if len({g for _, g in labels}) == 1 else f"\n{reg}"),
            no_wrap=True,
        )
    by_key = {(r.revision, r.registry, r.invariant): r for r in results}
    for inv in dict.fromkeys(r.invariant for r in results):
        table.add_row(inv, *[short_verdict(by_key[(rev, reg, inv)]) for rev, reg in labels])
    if executed:
        table.add_row(
            "[italic]executed vs model[/]",
            *[executed_cell(executed.get(rev)) for rev, _ in labels],
            end_section=False,
        )
    console.print(table)
    if executed:
        console.print(
            "executed vs model: the release's real decode path against its model revision, "
            "as disagreements / shapes (mla-spec bind shows them)"
        )
