"""``mla-spec vllm-tests --vllm X [--against R]``: a release's own ROCm AITER MLA tests, over the stubs.

See :mod:`spec.realcode.shipped_tests`.  Exit status: 0 every runnable item
passed, 1 some item failed or errored, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import click

from conformance.cli.errors import EXIT_OK, EXIT_VIOLATED, BadInput
from conformance.cli.options import format_option

EXAMPLES = """\b
Examples:
  mla-spec vllm-tests --vllm 0.34.0
  mla-spec vllm-tests --vllm 0.34.0 --against ./rocm_aiter_mla.py -k routing
"""


@click.command("vllm-tests", epilog=EXAMPLES)
@click.option(
    "--vllm",
    "release",
    required=True,
    metavar="X",
    help="vLLM release whose shipped tests/v1/attention/*aiter_mla* tests run (e.g. 0.28.0).",
)
@click.option(
    "--against",
    default=None,
    metavar="R",
    help="Backend under test: a release version, a vLLM tree, or a rocm_aiter_mla.py "
    "(a lone file reads its helper code from X's tree).  Default: X.",
)
@click.option(
    "--arch",
    type=click.Choice(["gfx942", "gfx950"]),
    default="gfx950",
    show_default=True,
    help="Arch the stub platform reports (vllm.platforms.rocm.on_gfx950/on_gfx942).",
)
@click.option("-k", "select", default=None, metavar="EXPR", help="Only the items pytest -k EXPR selects.")
@format_option("json")
def vllm_tests_command(release, against, arch, select, fmt) -> None:
    """Run release X's ROCm AITER MLA tests, unmodified, against R's backend over the harness stubs.

    Each item passes, fails, errors, is skipped by the test itself, or is not runnable:
    it needs a name the stubs lack, a GPU, or an AITER kernel's output.

    Executes R's rocm_aiter_mla.py and X's tests in a confined child process
    (docs/explanation/architecture.md, the trust boundary).
    """
    from spec.realcode.shipped_tests import ShippedTestsError, run_shipped_tests
    from spec.realcode.source import SourceError

    try:
        result = run_shipped_tests(release, against, arch=arch, select=select)
    except (SourceError, ShippedTestsError) as e:
        raise BadInput(str(e)) from None
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        _print_text(result)
    sys.exit(EXIT_VIOLATED if result["failed"] or result["errors"] else EXIT_OK)


def _group(rows: list[dict[str, Any]], key: str) -> list[tuple[str, str, int]]:
    """(test function, text, count): parametrized items of one test with one reason shown once."""
    c: Counter[tuple[str, str]] = Counter()
    for r in rows:
        fn = r["item"].split("[")[0].split("/")[-1]
        c[(fn, r[key].splitlines()[0] if r[key] else "")] += 1
    return [(fn, text, n) for (fn, text), n in c.items()]


def _print_text(r: dict[str, Any]) -> None:
    echo = click.echo
    nr = len(r["not_runnable"])
    echo(f"vLLM {r['release']} shipped tests against {r['against']} ({r['arch']}, {r['wall_s']}s)")
    for f in r["files"]:
        counts = r["by_file"].get(f, {})
        shown = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items() if n)
        echo(f"  {f}: {shown or 'no items'}")
    echo(
        f"items {r['items']}: passed {r['passed']}, failed {r['failed']}, errors {r['errors']}, "
        f"skipped {r['skipped']}, not runnable {nr}"
    )
    for title, rows, key in (
        ("FAILED", r["failures"], "message"),
        ("NOT RUNNABLE", r["not_runnable"], "reason"),
        ("SKIPPED", r.get("skips", []), "reason"),
    ):
        if not rows:
            continue
        echo(f"\n{title}:")
        for fn, text, n in _group(rows, key):
            echo(f"  {fn}{f' (x{n})' if n > 1 else ''}: {text}")
    runnable = r["items"] - nr - r["skipped"]
    if r["failed"] or r["errors"]:
        echo(f"\n{r['failed'] + r['errors']} of {runnable} runnable items failed")
    else:
        echo(f"\nall {runnable} runnable items passed")
