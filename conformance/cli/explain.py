"""``mla-spec explain``: one shape, gate by gate: conditions, route, AITER's lookup, each invariant."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from conformance.cli.errors import EXIT_OK, EXIT_VIOLATED, BadInput
from conformance.cli.memory_options import max_num_seqs_option
from conformance.cli.options import (
    NEWEST_REVISION,
    format_option,
    registry_option,
    revision_option,
    shape_options,
)
from conformance.cli.render.text import explanation, memory_explanation
from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS
from mla_model.shape import FIELDS, Shape

if TYPE_CHECKING:
    from spec.analyses.memory import Memory


EXAMPLES = """\b
Examples:
  mla-spec explain --arch gfx942 --kv-cache-dtype fp8 --num-heads 8 --max-qo-len 3 --spec-method mtp
  mla-spec explain --case gfx950-fp8-h4-q1-nospec-auto --revision vllm-0.27
  mla-spec explain --model Kimi-K3 --tp 8 --kv-cache-dtype fp8 --all
  mla-spec explain --case gfx942-auto-h1-q5-dflash2-auto --format json
  mla-spec explain --case gfx950-fp8-h12-q1-nospec-auto --vllm 0.27.1
  mla-spec explain --case gfx950-fp8-h12-q1-nospec-auto --vllm ./rocm_aiter_mla.py
"""


@click.command("explain", epilog=EXAMPLES)
@revision_option(default_help=f"default: the case's, else {NEWEST_REVISION}, the newest")
@registry_option(default_help="default: the case's, else aiter-0.1.20")
@click.option(
    "--vllm",
    "real",
    metavar="RELEASE|PATH",
    help="Explain on real code instead of a model revision: a vLLM release, tree or rocm_aiter_mla.py, its "
    "gates read as check --vllm reads them (through the AST path; the reorder_batch_threshold from the "
    "tree's builder, executed confined, or for a file in no tree from the release it comes from).",
)
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
@click.option(
    "--model",
    "model_name",
    metavar="NAME",
    help="An MLA model of the bundled table (Kimi-K3, DeepSeek-V3, ...; docs/reference/deployments.md): "
    "with --tp, sets --num-heads to its MLA heads / TP.",
)
@click.option(
    "--tp",
    type=click.IntRange(min=1),
    help="Tensor-parallel size of --model: each rank decodes the model's MLA heads / TP (DCP 1).",
)
@click.option(
    "--memory",
    "show_memory",
    is_flag=True,
    help="Also measure the bytes the persistent decode metadata and AITER's reduce scratch take on the "
    "revision's release (its builder and AITER's sizing executed; docs/reference/memory.md).",
)
@max_num_seqs_option("; implies --memory")
@click.option(
    "--all",
    "every_invariant",
    is_flag=True,
    help="List every invariant that holds too (default: the broken ones, then one line for the rest).",
)
@format_option("json")
@shape_options
def explain_command(
    revision,
    registry,
    real,
    case_ref,
    cases_file,
    model_name,
    tp,
    show_memory,
    max_num_seqs,
    every_invariant,
    fmt,
    **fields,
) -> None:
    """Explain one shape: each gate as the and/or tree of its conditions, the route, AITER's kernel lookup,
    the invariants it breaks (with the conjunct that breaks), and why the persistent schedule is off; with
    --memory, the bytes the persistent decode metadata and AITER's reduce scratch take (the revision's
    release executed).  Fields no flag or case id gives take the defaults each flag's help names, and the
    text says which.

    Exit status as check --no-expect's: 1 when the shape is valid and breaks an invariant (a
    warning-level one does not count), else 0."""
    from mla_model.case import iter_cases, parse_case_id
    from spec.analyses.explain import explain

    given = {k: v for k, v in fields.items() if v is not None}
    if model_name is not None or tp is not None:
        given["num_heads"] = _heads_per_rank(model_name, tp, fields["num_heads"])
    try:
        base = parse_case_id(case_ref).to_json() if case_ref else {}
        if cases_file is not None:
            if not case_ref:
                raise ValueError("--cases needs --case ID")
            match = next((c for c in iter_cases(cases_file) if c.id == case_ref), None)  # within its bounds
            if match is None:
                raise ValueError(f"no case {case_ref!r} in {cases_file}")
            revision, registry = revision or match.revision, registry or match.registry
        shape = Shape(**{**base, **given})
    except (ValueError, OSError) as e:
        raise BadInput(str(e)) from None
    measured = show_memory or max_num_seqs is not None
    if real is not None and (revision is not None and cases_file is None):
        raise BadInput("--vllm and --revision both name the gates to explain; give one")
    if real is not None and measured:
        raise BadInput("--memory measures a model revision's release; give --revision, not --vllm")
    revision, registry = revision or NEWEST_REVISION, registry or "aiter-0.1.20"
    if revision not in REVISIONS:
        raise BadInput(f"the case's revision {revision!r} is not one mla-spec knows")
    if registry not in REGISTRY_IDS:
        raise BadInput(f"the case's registry {registry!r} is not one mla-spec knows")
    gates = REVISIONS[revision] if real is None else _real_gates(real)
    revision = gates.id
    out = explain(gates, load_registry(registry), shape)
    memory, why_not = _memory(revision, shape, max_num_seqs) if measured else (None, None)
    defaulted = {f.name: getattr(shape, f.name) for f in FIELDS if f.name not in given and f.name not in base}
    if fmt == "json":
        out = {**out, "defaulted": defaulted}
        if measured:
            out = {**out, "memory": memory.to_json() if memory else {"error": why_not}}
        click.echo(json.dumps(out, indent=2))
    else:
        console = Console(highlight=False)
        explanation(out, shape, revision, registry, console, defaulted, every_invariant)
        if measured:
            memory_explanation(memory, why_not, max_num_seqs is None, console)
    sys.exit(EXIT_VIOLATED if out["valid"] and _breaks(out) else EXIT_OK)


def _real_gates(spec: str):  # -> Revision
    """The real gates of a release or file (a file in no vLLM tree: its release's tree stands in)."""
    from conformance.cli.options import load_revision
    from spec.realcode.bind import origin_of_source, stand_in_tree
    from spec.realcode.source import SourceError, resolve

    try:
        source = resolve(spec)
        tree = (
            None if source.label.startswith("vllm==") else stand_in_tree(source, origin_of_source(source)[0])
        )
    except SourceError as e:
        raise BadInput(str(e)) from None
    return load_revision(spec, tree)


def _breaks(out: dict) -> bool:
    """Some invariant of error level is broken (a warning-level one is a cost, as in check)."""
    from spec.proof.invariants import INVARIANT_BY_ID

    return any(not v["holds"] and INVARIANT_BY_ID[i].level != "warning" for i, v in out["invariants"].items())


def _memory(revision: str, shape: Shape, max_num_seqs: int | None) -> tuple[Memory | None, str | None]:
    """The persistent buffers and scratch on the revision's release (spec.analyses.memory), or why not."""
    from spec.analyses.memory import for_shape

    return for_shape(revision, shape, max_num_seqs)


def _heads_per_rank(model_name: str | None, tp: int | None, num_heads: int | None) -> int:
    """``--model NAME --tp N`` as heads per rank; any other combination of the three is bad input."""
    from mla_model.deployments import find_model

    if model_name is None:
        raise BadInput("--tp needs --model NAME (the model whose MLA heads it divides)")
    if tp is None:
        raise BadInput("--model needs --tp N (the tensor-parallel size that divides its MLA heads)")
    if num_heads is not None:
        raise BadInput("--model and --tp set the heads per rank; give them or --num-heads, not both")
    try:
        return find_model(model_name).heads_per_rank(tp)
    except ValueError as e:
        raise BadInput(str(e)) from None
