"""The option set every mla-spec command shares, and how a command names a revision.

Shape flags (one per Shape field), ``--format``, ``--revision``/``--registry``/``--invariant``,
``--timeout`` and ``--max-classes`` are declared once here, so every command spells and checks them the
same way.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from conformance.cli.errors import BadInput
from mla_model.registry import REGISTRY_IDS
from mla_model.revisions import REVISIONS
from mla_model.revisions.base import Revision
from mla_model.shape import FIELDS, Shape
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.verdict import DEFAULT_TIMEOUT_MS

RELEASE_PREFIX = "vllm=="


class Seconds(click.ParamType):
    """A finite number of seconds in ``[minimum, maximum]`` (``nan`` and ``inf`` are refused, not run)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.1, maximum: float = 24 * 3600) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not self.minimum <= seconds <= self.maximum:
            self.fail(
                f"{value!r} is not a finite number of seconds in [{self.minimum:g}, {self.maximum:g}]",
                param,
                ctx,
            )
        return seconds


# The Shape defaults that follow another field (Shape.__post_init__), as the help says them.
_DERIVED_DEFAULTS = {"q_dtype": "fp8 for an fp8 KV cache, else bf16", "gluon_build": "true on gfx950 only"}


def shape_default(name: str) -> str:
    """The value a Shape takes for a field no flag or case id gives, in words."""
    return _DERIVED_DEFAULTS.get(name) or str(getattr(Shape(), name))


def shape_options(fn: Any) -> Any:
    """One option per Shape field, named after it (--num-heads for num_heads), its help naming the default."""
    for spec in reversed(FIELDS):
        flag = "--" + spec.name.replace("_", "-")
        default = f" (default: {shape_default(spec.name)})"
        if spec.kind == "enum":
            fn = click.option(flag, spec.name, type=click.Choice(list(spec.values)), help=spec.doc + default)(
                fn
            )
        elif spec.kind == "bool":
            fn = click.option(flag, spec.name, type=click.BOOL, help=f"{spec.doc}, true/false{default}")(fn)
        else:
            fn = click.option(
                flag, spec.name, type=click.IntRange(min=spec.minimum), help=spec.doc + default
            )(fn)
    return fn


def format_option(*choices: str) -> Any:
    """``--format`` with text first (the default)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", *choices]),
        default="text",
        show_default=True,
        help="text for a person; " + ", ".join(choices) + " for a program (same content).",
    )


def _choice_option(
    flag: str, dests: tuple[str, str], noun: str, values: list[str], multiple: bool, default_help: str
) -> Any:
    """``--flag`` taking one of ``values``, into ``dests[0]`` (or, repeatable, the list ``dests[1]``), its
    help naming the default."""
    return click.option(
        flag,
        dests[1] if multiple else dests[0],
        multiple=multiple,
        type=click.Choice(values),
        help=f"{noun} ({'repeatable; ' if multiple else ''}{default_help}).",
    )


NEWEST_REVISION = list(REVISIONS)[-1]  # REVISIONS is in release order


def revision_option(multiple: bool = False, default_help: str = "default: all") -> Any:
    return _choice_option(
        "--revision", ("revision", "revisions"), "Gate revision", list(REVISIONS), multiple, default_help
    )


def registry_option(multiple: bool = False, default_help: str = "default: all") -> Any:
    return _choice_option(
        "--registry", ("registry", "registries"), "AITER registry", list(REGISTRY_IDS), multiple, default_help
    )


def invariant_option(fn: Any) -> Any:
    return click.option(
        "--invariant",
        "invariants",
        multiple=True,
        type=click.Choice(list(INVARIANT_BY_ID)),
        help="Invariant to prove (repeatable; default: all).",
    )(fn)


def max_classes_option(fn: Any) -> Any:
    return click.option(
        "--max-classes",
        type=click.IntRange(min=1),
        default=None,
        help="Stop enumerating counterexample classes after this many per violated invariant "
        "(default: all of them).",
    )(fn)


def timeout_option(fn: Any) -> Any:
    return click.option(
        "--timeout",
        type=Seconds(),
        default=DEFAULT_TIMEOUT_MS / 1000,
        show_default=True,
        callback=_executed_time_limit,
        help="Seconds per solver call, and per step of a release's code executed in a child (its import, "
        "each shape); a timeout is UNKNOWN, never a pass.",
    )(fn)


def _executed_time_limit(ctx: Any, param: Any, seconds: float) -> float:
    """--timeout also bounds each step of an executed release (spec.realcode.executed.confine)."""
    from spec.realcode.executed import confine

    confine.set_time_limit(seconds)
    return seconds


def load_revision(spec: str, tree: Path | None = None, refused_as_unknown: bool = False) -> Revision:
    """A model revision id, a vLLM release (``0.28.0`` or ``vllm==0.28.0``), or a rocm_aiter_mla.py file
    or vLLM tree (read in ``tree`` where it sits in none: :func:`spec.realcode.revision.real_revision`).

    ``refused_as_unknown``: a file whose routing code uses a construct outside the lifted subset is a
    revision whose every result is UNKNOWN with the refusal (:func:`spec.realcode.revision.
    refused_revision`), as ``check`` reports it; otherwise, as everywhere else, one error line."""
    if spec in REVISIONS:
        return REVISIONS[spec]
    from spec.realcode.extract import RefusedCode
    from spec.realcode.revision import real_revision, refused_revision
    from spec.realcode.source import SourceError, is_release

    release = spec.removeprefix(RELEASE_PREFIX)
    try:
        return real_revision(release) if tree is None else real_revision(release, tree=tree)
    except RefusedCode as e:
        if refused_as_unknown and not is_release(release):
            return refused_revision(release, e)
        raise BadInput(str(e)) from None
    except SourceError as e:
        hint = (
            ""
            if spec.startswith(RELEASE_PREFIX) or is_release(release)
            else f" (model revisions: {', '.join(REVISIONS)})"
        )
        raise BadInput(f"{e}{hint}") from None
