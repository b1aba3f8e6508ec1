"""``mla-spec list``: the gate revisions, AITER registries and invariants mla-spec knows."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from conformance.cli.options import format_option
from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS
from spec.proof.invariants import INVARIANTS

EXAMPLES = """\b
Examples:
  mla-spec list
  mla-spec list --format json
"""


@click.command("list", epilog=EXAMPLES)
@format_option("json")
def list_command(fmt) -> None:
    """List the gate revisions, AITER registries and invariants mla-spec knows."""
    revisions = [
        {
            "id": r.id,
            "title": r.title,
            "source": r.source,
            "validity": [name for name, _ in r.rules(load_registry(REGISTRY_IDS[-1]))],
        }
        for r in REVISIONS.values()
    ]
    registries = [{"id": i, "source": load_registry(i).source} for i in REGISTRY_IDS]
    invariants = [
        {
            "id": i.id,
            "statement": i.statement,
            "symptom": i.symptom,
            "source": i.source,
            "pr_51011": i.pr_51011,
        }
        for i in INVARIANTS
    ]
    if fmt == "json":
        click.echo(
            json.dumps({"revisions": revisions, "registries": registries, "invariants": invariants}, indent=2)
        )
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
