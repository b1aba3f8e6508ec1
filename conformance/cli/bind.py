"""``mla-spec bind``: a release's gate functions against a model revision (symbolic and bounded), and its
whole decode path executed shape by shape against the model's routes."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conformance.cli.errors import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED, BadInput
from conformance.cli.options import format_option, revision_option, timeout_option
from conformance.cli.render.text import executed_lines, shape_summary
from mla_model.shape import Shape

EXAMPLES = """\b
Examples:
  mla-spec bind --vllm 0.34.0
  mla-spec bind --vllm 0.33.0 --shapes 50
  mla-spec bind --vllm ./rocm_aiter_mla.py --shapes 0
  mla-spec bind --vllm ./rocm_aiter_mla.py --revision vllm-0.34
"""


@click.command("bind", epilog=EXAMPLES)
@click.option(
    "--vllm", "spec", required=True, metavar="RELEASE|PATH", help="vLLM release, tree or rocm_aiter_mla.py."
)
@revision_option(default_help="default: the one that models that release")
@format_option("json")
@click.option("--no-symbolic", is_flag=True, help="Only the bounded comparison (no lifting).")
@click.option(
    "--shapes",
    "count",
    type=click.IntRange(min=0),
    default=2000,
    show_default=True,
    help="Random valid shapes for the executed differential (besides the solver-found cases); 0 skips it.",
)
@timeout_option
def bind_command(spec, revision, fmt, no_symbolic, count, timeout) -> None:
    """Compare a release with a model revision: its gate functions (symbolic and bounded), and its whole
    decode path executed shape by shape against the model's routes.

    Executes the release's rocm_aiter_mla.py in a confined child process (docs/explanation/architecture.md,
    the trust boundary)."""
    from spec.realcode.bind import bind, executed_comparison
    from spec.realcode.executed.harness import HarnessError
    from spec.realcode.source import SourceError

    try:
        bound = bind(spec, revision, symbolic=not no_symbolic, timeout_ms=int(timeout * 1000))
        label, model_id, why, rows = bound.label, bound.model_id, bound.why, bound.rows
        executed = executed_comparison(spec, model_id, count, tree=bound.tree) if count else None
    except (SourceError, ValueError, HarnessError) as e:
        raise BadInput(str(e)) from None
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "release": label,
                    "revision": model_id,
                    "revision_chosen_as": why,
                    "functions": [r.to_json() for r in rows],
                    "executed": executed.to_json() if executed else None,
                },
                indent=2,
                default=str,
            )
        )
    else:
        console = Console(highlight=False)
        table = Table(title=f"mla-spec bind: {escape(label)} against the model revision {model_id}")
        for col in ("function", "method", "verdict", "points", "seconds"):
            table.add_column(col, no_wrap=True)
        for r in rows:
            colour = {"EQUIVALENT": "green", "DIFFERENT": "red"}.get(r.verdict, "yellow")
            table.add_row(
                r.function,
                r.method,
                f"[{colour}]{r.verdict}[/]",
                f"{r.checked:,}" if r.checked else "",
                f"{r.seconds:.2f}",
            )
        console.print(table)
        console.print(f"The model revision {model_id}: {escape(why)}.", soft_wrap=True)
        for r in rows:
            if r.reason:
                console.print(f"{r.function} ({r.method}): {r.reason}")
            for d in r.differences:
                where = shape_summary(Shape(**d["shape"])) if "shape" in d else json.dumps(d["inputs"])
                console.print(
                    f"[red]{r.function}[/] ({r.method}) differs at {where}: "
                    f"real {d['real']!r}, model {d['model']!r}",
                    soft_wrap=True,
                )
        if executed:
            executed_lines(executed, console)
    # 1: some function differs; 3: lifting failed (the gate was not compared symbolically), or a comparison
    # is UNKNOWN (z3 or the real code ran past --timeout): never a pass.
    if any(r.verdict == "DIFFERENT" for r in rows) or (executed and executed.disagreements):
        sys.exit(EXIT_VIOLATED)
    unknown = any(
        r.verdict == "UNKNOWN" or (r.verdict == "UNSUPPORTED" and r.method == "symbolic") for r in rows
    )
    sys.exit(EXIT_UNKNOWN if unknown else EXIT_OK)
