"""``mla-spec audit``: the invariants on several releases' real gates, and each release's executed decode path
against the model revision that describes it.

The verdicts are judged like check's: against the expected-verdicts manifest (``--expect``, default the
bundled one; ``--no-expect`` for raw verdicts).  Exit 0 when every verdict is the expected one and the
executed paths agree with the model, 1 on a surprise or a disagreement, 3 on an UNKNOWN."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from conformance.cli.errors import EXIT_VIOLATED, BadInput, exit_for_checks, exit_for_expectations
from conformance.cli.options import (
    RELEASE_PREFIX,
    invariant_option,
    load_revision,
    max_classes_option,
    registry_option,
    timeout_option,
)
from conformance.cli.render.text import executed_cell, short_verdict
from mla_model.revisions import REVISIONS
from spec.proof.check_all import check_all
from spec.proof.invariants import INVARIANT_BY_ID

EXAMPLES = """\b
Examples:
  mla-spec audit 0.33.0 0.34.0 --executed 0
  mla-spec audit 0.27.1 0.28.0 --invariant fp8-never-reaches-gluon --format json
"""


@click.command("audit", epilog=EXAMPLES)
@click.option(
    "--vllm",
    "named",
    multiple=True,
    metavar="RELEASE",
    help="A vLLM release to audit (repeatable), as check --vllm takes it; releases may also be given as "
    "arguments: audit --vllm 0.27.1 0.28.0 audits both.",
)
@click.argument("releases", nargs=-1)
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
@click.option(
    "--expect",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Expected-verdicts manifest (default: the bundled spec/proof/expected_verdicts.toml), as check's.",
)
@click.option("--no-expect", is_flag=True, help="Raw verdicts: exit 1 on any violation.")
def audit_command(
    named, releases, registries, invariants, fmt, max_classes, timeout, count, manifest_path, no_expect
) -> None:
    """Prove the invariants on the real gates of several vLLM releases (release x invariant), judged against
    the expected-verdicts manifest, and run each release's real decode path against the model revision
    that describes it.  Example: mla-spec audit 0.28.0 0.34.0 --executed 200

    Executes each release's rocm_aiter_mla.py in a confined child process (docs/explanation/architecture.md,
    the trust boundary)."""
    from conformance.cli.check import read_manifest
    from spec.proof.expectations import BUNDLED, compare

    releases = (*named, *releases)
    if not releases:
        raise BadInput("audit needs at least one vLLM release (audit 0.28.0, or --vllm 0.28.0)")
    if no_expect and manifest_path is not None:
        raise BadInput("--expect and --no-expect contradict each other; give one")
    manifest = None if no_expect else read_manifest(manifest_path or BUNDLED)
    judged_as = _judged_as(releases)
    targets = [load_revision(r, judged_as[r][3] if r in judged_as else None) for r in releases]
    results = check_all(
        targets, registries or ("aiter-0.1.20",), invariants or list(INVARIANT_BY_ID), max_classes, timeout
    )
    outcomes = (
        None
        if manifest is None
        else compare(results, manifest, {label: v for label, v, _, _ in judged_as.values()})
    )
    surprises = [o for o in outcomes or [] if o.surprise]
    executed = _executed(releases, count) if count else {}
    disagree = any(e is not None and e.disagreements for e in executed.values())
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "results": [r.to_json() for r in results]
                    if outcomes is None
                    else [{**o.result.to_json(), **o.to_json()} for o in outcomes],
                    **(
                        {}
                        if outcomes is None
                        else {
                            "as_expected": not surprises,
                            "judged_as": {label: release for label, release, _, _ in judged_as.values()},
                            "surprises": [
                                {
                                    "revision": o.result.revision,
                                    "registry": o.result.registry,
                                    "invariant": o.result.invariant,
                                }
                                for o in surprises
                            ],
                        }
                    ),
                    "executed": {label: e.to_json() if e else None for label, e in executed.items()},
                },
                indent=2,
            )
        )
    else:
        _table(results, executed)
        if manifest is not None:
            for target, release, how, _ in judged_as.values():
                click.echo(f"{target} is held to the manifest's rows of {release}: {how}")
        for o in surprises:
            click.echo(
                f"! surprise: {o.result.invariant} is {o.result.verdict} on {o.result.revision} "
                f"({o.result.registry}); the manifest expects "
                f"{o.expected.verdict if o.expected else 'no row'}"
            )
    if disagree:
        sys.exit(EXIT_VIOLATED)
    if outcomes is None:
        exit_for_checks(results)
    exit_for_expectations(outcomes)


def _judged_as(releases: tuple[str, ...]) -> dict[str, tuple[str, str, str, Path | None]]:
    """For each file among the targets: the label its column has, the release whose
    manifest rows it is held to, the one it comes from (spec.realcode.release_of), how that is known, and
    that release's tree where the file sits in none (its threshold and envs defaults, as check and bind
    read them).  A target that names nothing is left to load_revision's error."""
    from spec.realcode.bind import origin_of_source, stand_in_tree
    from spec.realcode.source import SourceError, is_release, resolve

    out = {}
    for spec in releases:
        if spec in REVISIONS or spec.startswith(RELEASE_PREFIX) or is_release(spec):
            continue
        try:
            source = resolve(spec)
        except SourceError:
            continue
        try:
            release, how = origin_of_source(source)
        except SourceError as e:
            raise BadInput(str(e)) from None
        out[spec] = (source.label, f"vllm=={release}", how, stand_in_tree(source, release))
    return out


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
