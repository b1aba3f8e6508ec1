"""``mla-spec check``: prove or refute each invariant, for model revisions or a release's real gates."""

from __future__ import annotations

import json

import click
from rich.console import Console

from conformance.cli.errors import exit_for_checks
from conformance.cli.options import (
    invariant_option,
    load_revision,
    max_classes_option,
    registry_option,
    revision_option,
    timeout_option,
)
from conformance.cli.render.text import check_table, shape_summary
from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS
from spec.proof.check_all import check_all
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult


@click.command("check")
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
    "--vllm",
    "releases",
    multiple=True,
    metavar="RELEASE|PATH",
    help="Check a vLLM release's (or file's) real gate functions instead of the model's (repeatable).",
)
def check_command(revisions, registries, invariants, fmt, max_classes, timeout, releases) -> None:
    """Prove or refute each routing and buffer-sizing invariant."""
    targets = (
        [*revisions, *[load_revision(r) for r in releases]] if releases else list(revisions or REVISIONS)
    )
    results = check_all(
        targets, registries or REGISTRY_IDS, invariants or list(INVARIANT_BY_ID), max_classes, timeout
    )
    report(results, fmt)


def report(results: list[CheckResult], fmt: str) -> None:
    """Write the results in one format, then exit by their verdicts."""
    if fmt == "json":
        click.echo(json.dumps({"results": [r.to_json() for r in results]}, indent=2))
    elif fmt == "sarif":
        from conformance.cli.render.sarif import check_log

        click.echo(json.dumps(check_log(results, shape_summary), indent=2))
    elif fmt == "junit":
        from conformance.cli.render.junit import check_report

        click.echo(check_report(results, shape_summary))
    else:
        check_table(results, Console(highlight=False))
    exit_for_checks(results)
