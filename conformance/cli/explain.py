"""``mla-spec explain``: one shape, gate by gate: conditions, route, AITER's lookup, each invariant."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from conformance.cli.errors import EXIT_OK, BadInput
from conformance.cli.options import format_option, registry_option, revision_option, shape_options
from conformance.cli.render.text import explanation
from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS
from mla_model.shape import Shape


@click.command("explain")
@revision_option(default_help="default: the case's, else vllm-0.28")
@registry_option(default_help="default: the case's, else aiter-0.1.20")
@click.option(
    "--case",
    "case_ref",
    metavar="ID",
    help="A case id (gfx950-fp8-h12-q5-dspark3-auto); the shape flags then change it.",
)
@click.option(
    "--cases",
    "cases_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="cases.jsonl to take the case's revision and registry from.",
)
@format_option("json")
@shape_options
def explain_command(revision, registry, case_ref, cases_file, fmt, **fields) -> None:
    """Explain one shape: each gate and its conditions, the route, AITER's kernel lookup, each invariant
    (with the conjunct that breaks), and why the persistent schedule is off."""
    from mla_model.case import parse_case_id, read_cases
    from spec.analyses.explain import explain

    given = {k: v for k, v in fields.items() if v is not None}
    try:
        base = parse_case_id(case_ref).to_json() if case_ref else {}
        if cases_file is not None:
            if not case_ref:
                raise ValueError("--cases needs --case ID")
            match = next((c for c in read_cases(cases_file) if c.id == case_ref), None)
            if match is None:
                raise ValueError(f"no case {case_ref!r} in {cases_file}")
            revision, registry = revision or match.revision, registry or match.registry
        shape = Shape(**{**base, **given})
    except (ValueError, OSError) as e:
        raise BadInput(str(e)) from None
    revision, registry = revision or "vllm-0.28", registry or "aiter-0.1.20"
    if revision not in REVISIONS:
        raise BadInput(f"the case's revision {revision!r} is not one mla-spec knows")
    if registry not in REGISTRY_IDS:
        raise BadInput(f"the case's registry {registry!r} is not one mla-spec knows")
    out = explain(REVISIONS[revision], load_registry(registry), shape)
    if fmt == "json":
        click.echo(json.dumps(out, indent=2))
        sys.exit(EXIT_OK)
    explanation(out, shape, revision, registry, Console(highlight=False))
    sys.exit(EXIT_OK)
