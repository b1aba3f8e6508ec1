"""``mla-spec diff OLD NEW``: where the routing changes between two gate revisions.

See :mod:`spec.analyses.diff`.
"""

from __future__ import annotations

import json
import sys
import traceback
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape

from conformance.cli.errors import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED
from conformance.cli.options import format_option, load_revision
from conformance.cli.render.text import shape_summary
from mla_model.registry import REGISTRY_IDS, load_registry

if TYPE_CHECKING:
    from spec.analyses.diff import Diff


# mla-spec's own code failed: neither a finding (1) nor bad input (2) nor a verdict left open (3).
EXIT_INTERNAL = 4


class Unsupported(click.ClickException):
    """The real code could not be lifted into z3: no diff, and not a pass."""

    exit_code = EXIT_UNKNOWN


class InternalError(click.ClickException):
    """A bug in mla-spec: one line naming the exception and where it was raised, exit 4, so that a crash
    never reads as "new routes" (exit 1) under --fail-on-new-routes."""

    exit_code = EXIT_INTERNAL

    def __init__(self, e: BaseException) -> None:
        frames = traceback.extract_tb(e.__traceback__)
        where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        super().__init__(
            f"internal error, a bug in mla-spec, no diff computed: {type(e).__name__}: {e}{where}; "
            "please report it with this command line"
        )


EXAMPLES = """\b
Examples:
  mla-spec diff vllm-0.33 vllm-0.34
  mla-spec diff vllm==0.33.0 vllm==0.34.0 --format json
  mla-spec diff old.py new.py --fail-on-new-routes --format sarif > diff.sarif
"""


@click.command("diff", epilog=EXAMPLES)
@click.argument("old")
@click.argument("new")
@click.option(
    "--registry",
    type=click.Choice(list(REGISTRY_IDS)),
    default="aiter-0.1.20",
    show_default=True,
    help="AITER registry that resolves the ASM kernels.",
)
@click.option(
    "--fail-on-new-routes",
    is_flag=True,
    help="Exit 1 when NEW sends any shape to a path or kernel that OLD did not use for it.",
)
@format_option("json", "sarif")
def diff_command(old, new, registry, fail_on_new_routes, fmt) -> None:
    """Every region where NEW routes a decode step differently from OLD.

    OLD and NEW are model revisions (mla-spec list), vLLM releases (vllm==0.28.0) or
    rocm_aiter_mla.py files / vLLM trees.  A route is the path, the ASM kernel and the
    persistent-metadata sizing; only shapes of the bounded box valid under both revisions count.

    Exit status: 0 (1 with --fail-on-new-routes when NEW sends a shape to a path or kernel OLD did not
    use for it), 2 bad input, 3 when z3 could not confirm the regions or the real code could not be
    lifted, 4 when mla-spec itself fails (an internal error: one line, never read as new routes).
    """
    from spec.analyses.diff import diff
    from spec.realcode.symexec import LiftingUnsupported

    before, after = load_revision(old), load_revision(new)
    try:
        result = diff(before, after, load_registry(registry))
    except LiftingUnsupported as e:
        raise Unsupported(f"cannot lift the real gates into z3 ({e}); no diff computed") from None
    except Exception as e:  # our own code failing (DiffDisagreement included) is never a finding
        raise InternalError(e) from None
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    elif fmt == "sarif":
        from conformance.cli.render.sarif import diff_log

        click.echo(json.dumps(diff_log(result, fail_on_new_routes, shape_summary), indent=2))
    else:
        _print_text(result, fail_on_new_routes, Console(highlight=False))
    if fail_on_new_routes and result.new_routes:
        sys.exit(EXIT_VIOLATED)
    sys.exit(EXIT_OK if result.confirmed_by_z3 else EXIT_UNKNOWN)  # unconfirmed regions are never a pass


def _print_text(result: Diff, fail_on_new_routes: bool, console: Console) -> None:
    old, new = escape(result.old.id), escape(result.new.id)
    console.print(f"[bold]mla-spec diff[/] {old} -> {new} with {result.registry}")
    console.print(
        f"{result.compared:,} shapes of the box are valid under both revisions; "
        f"{result.changed:,} change route, in {len(result.regions)} region"
        f"{'' if len(result.regions) == 1 else 's'}.",
        soft_wrap=True,
    )
    for path, regions in groupby(result.regions, key=lambda r: (r.old_route.path, r.new_route.path)):
        regions = list(regions)
        console.print(f"\n[bold cyan]{path[0]} -> {path[1]}[/]  {sum(r.shapes for r in regions):,} shapes")
        for (before, after), group in groupby(regions, key=lambda r: (r.old_route, r.new_route)):
            group = list(group)
            mark = " [red](new route)[/]" if fail_on_new_routes and group[0].new_route_taken else ""
            if before.detail() or after.detail() or mark:
                console.print(
                    f"  {before.detail() or before.path} -> {after.detail() or after.path}{mark}",
                    soft_wrap=True,
                )
            for r in group:
                console.print(f"    {r.shapes:>12,}  {escape(r.constraint)}", soft_wrap=True)
    console.print(
        f"\n[dim]rbt: reorder_batch_threshold, the longest query the scheduler hands decode. Counted: "
        f"shapes valid under both revisions ({result.valid_only_in_old:,} valid only under {old}, "
        f"{result.valid_only_in_new:,} only under {new}: not compared).[/]",
        soft_wrap=True,
    )
    console.print(
        "[dim]"
        + (
            "z3 proved it: within the box each region holds only its change and every change lies "
            "in a region."
            if result.confirmed_by_z3
            else "z3 ran out of time confirming the regions; counts are exact on the grid."
        )
        + "[/]",
        soft_wrap=True,
    )
    if result.new_routes:
        n = sum(r.shapes for r in result.new_routes)
        colour = "red" if fail_on_new_routes else "yellow"
        console.print(
            f"[{colour}]{len(result.new_routes)} region(s), {n:,} shapes: {new} sends shapes to a path "
            f"or kernel {old} did not use for them.[/]",
            soft_wrap=True,
        )
