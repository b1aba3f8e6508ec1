"""``mla-spec cases``: write a revision's edge shapes as cases and test modules."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

from conformance.atomic_write import Refused, check_target, replace_folder, write_file
from conformance.case_modules import slug, write_suite
from conformance.cli.errors import EXIT_UNKNOWN, BadInput
from conformance.cli.options import format_option
from mla_model.case import Case, cases_text
from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS

DEFAULT_REGISTRY = "aiter-0.1.20"


def _generate(job: tuple[str, str, int]) -> list[Case]:
    from spec.analyses.cases import generate

    return generate(*job)


EXAMPLES = """\b
Examples:
  mla-spec cases --revision vllm-0.34 --out gen
  mla-spec cases --style vllm --revision vllm-0.34 --out test_rocm_aiter_mla_mlaspec_routing.py
  mla-spec cases --style jsonl --revision vllm-0.34 --routes 200 --out replay.jsonl
"""


@click.command("cases", epilog=EXAMPLES)
@click.option(
    "--revision",
    "revisions",
    multiple=True,
    type=click.Choice([*REVISIONS, "all"]),
    help="Gate revision (repeatable, or 'all'); more than one writes OUT/<revision>/ each.",
)
@click.option(
    "--registry",
    type=click.Choice(list(REGISTRY_IDS)),
    default=DEFAULT_REGISTRY,
    show_default=True,
    help="AITER registry whose kernel lookups the cases pin.",
)
@click.option(
    "--style",
    type=click.Choice(["suite", "vllm", "jsonl"]),
    default="suite",
    show_default=True,
    help="suite: OUT/cases.jsonl + a pytest module for this repo; vllm: one drop-in module OUT "
    "for tests/v1/attention/ of a vLLM checkout; jsonl: every revision's cases in one file OUT "
    "(for mla-spec conform), a (shape, route) once.",
)
@click.option(
    "--routes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also cover up to N distinct routes per revision, each at its smallest and largest shape "
    "(for a GPU replay).",
)
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="Folder (suite) or file (vllm, jsonl)."
)
@format_option("json")
def cases_command(revisions, registry, style, routes, out, fmt) -> None:
    """Edge shapes (MC/DC pairs, counterexamples, thresholds) as test cases, pinned to the model's route."""
    if not str(out).strip() or str(out) == ".":
        raise BadInput("--out needs a folder or file name (it was empty)")
    chosen = list(REVISIONS) if not revisions or "all" in revisions else list(dict.fromkeys(revisions))
    if style == "vllm" and len(chosen) != 1:
        raise BadInput("--style vllm writes one module: name one --revision")
    if style != "suite" and out.is_dir() and not out.is_symlink():
        raise BadInput(f"--style {style} writes a file, and {out} is a folder")
    try:  # before the solver runs, so a refusal costs nothing
        check_target(out, folder=style == "suite")
    except Refused as e:
        raise BadInput(str(e)) from None
    jobs = [(rev, registry, routes) for rev in chosen]
    from spec.analyses.cases import SolverGaveUp

    try:
        if len(jobs) > 1:  # one process per revision: z3 is single-threaded
            with ProcessPoolExecutor(max_workers=min(len(jobs), 4)) as pool:
                results = list(pool.map(_generate, jobs))
        else:
            results = [_generate(jobs[0])]
    except SolverGaveUp as e:
        click.echo(f"mla-spec: unknown: {e}; nothing written", err=True)
        sys.exit(EXIT_UNKNOWN)
    written: list[dict] = []
    try:
        if style == "jsonl":
            first: dict[tuple, Case] = {}
            for c in (c for cases in results for c in cases):
                first.setdefault((c.id, json.dumps(c.expected_route, sort_keys=True)), c)
            unique = list(first.values())
            write_file(out, cases_text(unique))
            written.append(
                {
                    "revision": ",".join(chosen),
                    "registry": registry,
                    "cases": len(unique),
                    "files": [str(out)],
                }
            )
        elif style == "vllm":
            from conformance.vllm_module import render_vllm_module

            write_file(out, render_vllm_module(chosen[0], registry, results[0]))
            written.append(
                {"revision": chosen[0], "registry": registry, "cases": len(results[0]), "files": [str(out)]}
            )
        else:
            # The whole folder is staged beside OUT and swapped in: killed midway, OUT stays as it was.
            files: dict[str, list[Path]] = {}

            def fill(staging: Path) -> list[Path]:
                for rev, cases in zip(chosen, results):
                    files[rev] = write_suite(
                        cases, staging / slug(rev) if len(chosen) > 1 else staging, rev, registry
                    )
                return [p for paths in files.values() for p in paths]

            done = iter(replace_folder(out, fill))
            for rev, cases in zip(chosen, results):
                paths = [next(done) for _ in files[rev]]
                written.append(
                    {
                        "revision": rev,
                        "registry": registry,
                        "cases": len(cases),
                        "files": [str(p) for p in paths],
                    }
                )
    except Refused as e:
        raise BadInput(str(e)) from None
    except OSError as e:
        raise BadInput(f"cannot write {e.filename}: {e.strerror}") from None
    if fmt == "json":
        click.echo(json.dumps({"written": written}, indent=2))
        return
    for w in written:
        click.echo(f"{w['revision']} ({w['registry']}): {w['cases']} cases -> {', '.join(w['files'])}")
