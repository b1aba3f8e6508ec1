"""What every mla-spec command shares: exit codes, one-line errors, shape flags and summaries.

Each command lives in the module that does its job (``cli.py`` for the proof
commands, ``cmd_*.py`` for the rest) and imports these; ``cli.py`` assembles
the group.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import click

from mla_model.shape import FIELDS, Shape

EXIT_OK, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


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
            self.fail(f"{value!r} is not a finite number of seconds in [{self.minimum:g}, {self.maximum:g}]",
                      param, ctx)
        return seconds


class OneLineErrors(click.Group):
    """Every usage error becomes one line on stderr and exit status 2; so does output that cannot be written."""

    def main(self, args: Any = None, prog_name: str | None = None, **kwargs: Any) -> Any:
        try:
            result = super().main(args=args, prog_name=prog_name, standalone_mode=False, **kwargs)
            sys.stdout.flush()
            return result
        except OSError as e:  # a full disk, a closed pipe: the results were not delivered
            _silence_stdout()
            click.echo(f"mla-spec: error: cannot write the output: {e.strerror or e}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.exceptions.Exit as e:
            try:
                sys.stdout.flush()
            except OSError as err:
                _silence_stdout()
                click.echo(f"mla-spec: error: cannot write the output: {err.strerror or err}", err=True)
                sys.exit(EXIT_BAD_INPUT)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("mla-spec: error: aborted", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.ClickException as e:
            message = " ".join(e.format_message().split())
            click.echo(f"mla-spec: error: {message}", err=True)
            sys.exit(EXIT_BAD_INPUT if isinstance(e, (click.UsageError, BadInput)) else e.exit_code)


def _silence_stdout() -> None:
    """Drop what could not be written, so the interpreter's own flush at exit does not fail again."""
    import os

    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass


def shape_summary(s: Shape) -> str:
    parts = [s.arch, f"kv={s.kv_cache_dtype}", f"q={s.q_dtype}", f"heads={s.num_heads}", f"qlen={s.max_qo_len}"]
    parts.append("no drafter" if s.spec_method == "none" else f"{s.spec_method} k={s.num_spec_tokens}")
    defaults = Shape(arch=s.arch, kv_cache_dtype=s.kv_cache_dtype)
    for name in ("asm_padding_mode", "gluon_build", "num_reqs", "dcp_world_size", "causal", "kv_cache_bytes"):
        if getattr(s, name) != getattr(defaults, name):
            parts.append(f"{name}={getattr(s, name)}")
    return " ".join(parts)


def shape_options(fn: Any) -> Any:
    """One option per Shape field, named after it (--num-heads for num_heads)."""
    for spec in reversed(FIELDS):
        flag = "--" + spec.name.replace("_", "-")
        if spec.kind == "enum":
            fn = click.option(flag, spec.name, type=click.Choice(list(spec.values)), help=spec.doc)(fn)
        elif spec.kind == "bool":
            fn = click.option(flag, spec.name, type=click.BOOL, help=f"{spec.doc} (true/false)")(fn)
        else:
            fn = click.option(flag, spec.name, type=click.IntRange(min=spec.minimum), help=spec.doc)(fn)
    return fn



def format_option(*choices: str) -> Any:
    """``--format`` with text first (the default)."""
    return click.option("--format", "fmt", type=click.Choice(["text", *choices]), default="text", show_default=True,
                        help="text for a person; " + ", ".join(choices) + " for a program (same content).")
