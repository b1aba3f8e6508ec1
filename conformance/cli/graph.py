"""``mla-spec graph``: the routing DAG of one revision, reachable and dead leaves, as PNG/SVG/DOT or JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from conformance.cli.errors import EXIT_UNKNOWN, BadInput
from conformance.cli.options import NEWEST_REVISION, format_option
from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS
from mla_model.route import PATHS

if TYPE_CHECKING:  # networkx, z3 and matplotlib load only when the command runs
    import networkx as nx


def _writable(out: Path, formats: tuple[str, ...]) -> None:
    """Fail before the solver runs when ``out`` cannot be written."""
    if out.suffix.lower() not in formats:
        raise BadInput(f"--out {out}: unsupported extension '{out.suffix}'; use {', '.join(formats)}")
    if out.is_dir() or not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise BadInput(
            f"cannot write {out}: "
            + ("it is a folder" if out.is_dir() else f"{out.parent} is not a writable folder")
        )


def outline(g: nx.DiGraph) -> str:
    """The graph as text: each decision with its condition, then each path with the leaves it reaches."""
    dead = lambda n: "" if g.nodes[n]["reachable"] else "  [dead]"  # noqa: E731
    lines = [
        f"{g.graph['revision']} with {g.graph['registry']}: forward_mqa's decisions, in order "
        "(dead: no valid shape gets there)"
    ]
    for u, v, a in g.edges(data=True):
        if a["kind"] == "yes":
            lines.append(f"  {g.nodes[u]['label']:<26} yes -> {v:<18} when {a['condition']}{dead(v)}")
        elif a["kind"] == "no" and g.nodes[v]["kind"] == "path":
            lines.append(f"  {'':<26}  no -> {v}{dead(v)}")
    for path in PATHS:
        lines.append(f"{path}{dead(path)}")
        by_arch = lambda leaf: (g.nodes[leaf]["arch"] or "", g.nodes[leaf]["kind"] == "failure", leaf)  # noqa: E731
        for leaf in sorted(g.successors(path), key=by_arch):
            a = g.nodes[leaf]
            if g.edges[path, leaf]["reachable"] or not a["reachable"]:
                what = f"{a['arch']}  {a['label']}  ({a['key']})" if "key" in a else a["label"]
                lines.append(f"  {what}{dead(leaf)}")
    return "\n".join(lines)


EXAMPLES = f"""\b
Examples:
  mla-spec graph
  mla-spec graph --revision vllm-0.28 --out routing.png
  mla-spec graph --revision {NEWEST_REVISION} --registry aiter-0.1.19 --format json
"""


@click.command("graph", epilog=EXAMPLES)
@click.option(
    "--revision",
    type=click.Choice(list(REVISIONS)),
    default=NEWEST_REVISION,
    show_default=True,
    help="Gate revision (default: the newest).",
)
@click.option(
    "--registry",
    type=click.Choice(list(REGISTRY_IDS)),
    default="aiter-0.1.20",
    show_default=True,
    help="AITER registry.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write the graph to FILE.png, FILE.svg (matplotlib) or FILE.dot (pydot).",
)
@format_option("json")
def graph_command(revision, registry, out, fmt) -> None:
    """The routing as a DAG: forward_mqa's decisions -> paths -> kernels, each marked reachable or dead
    (z3)."""
    from conformance.cli.render.graph import FORMATS, render
    from spec.analyses.graph import Undecided, graph_json, pin_witnesses, routing_graph

    if out is not None:
        _writable(out, FORMATS)
    try:
        g = routing_graph(revision, registry)
        if fmt == "json":
            pin_witnesses(g)  # JSON readers get canonical witness shapes
    except Undecided as e:
        click.echo(f"mla-spec: error: reachability undecided: {e}", err=True)
        sys.exit(EXIT_UNKNOWN)
    if out is not None:
        try:
            render(g, out)
        except OSError as e:
            raise BadInput(f"cannot write {out}: {e.strerror or e}") from None
    if fmt == "json":
        click.echo(json.dumps(graph_json(g), indent=2))
    elif out is None:
        click.echo(outline(g))
    else:
        leaves = [a for a in g.nodes.values() if a["kind"] in ("kernel", "failure")]
        click.echo(
            f"wrote {out}: {sum(a['reachable'] for a in leaves)} reachable leaves, "
            f"{sum(not a['reachable'] for a in leaves)} dead; dead paths: "
            f"{', '.join(p for p in PATHS if not g.nodes[p]['reachable']) or 'none'}"
        )
