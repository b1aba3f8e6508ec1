"""How every mla-spec command ends: its exit status, and one line on stderr for bad input.

0: all as expected; 1: an invariant violated (check: a verdict the manifest does not expect, or a NEW class
against a gate file's baseline), or a comparison differs; 2: bad input, one line on stderr and
no traceback; 3: some verdict UNKNOWN (a timeout, lifting unsupported) and none violated.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import click

from spec.proof.verdict import UNKNOWN, VIOLATED

EXIT_OK, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_UNKNOWN = 0, 1, 2, 3


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


class OneLineErrors(click.Group):
    """Every usage error becomes one line on stderr and exit status 2; so does unwritable output."""

    def main(self, args: Any = None, prog_name: str | None = None, **kwargs: Any) -> Any:
        _keep_odd_names_printable()
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


def _keep_odd_names_printable() -> None:
    """A path given in an undecodable encoding (argv's surrogate escapes) is echoed back, not a traceback:
    stdout escapes what it cannot encode, as stderr always does (a UTF-8 locale's stdout is strict)."""
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    """Drop what could not be written, so the interpreter's own flush at exit does not fail again."""
    import os

    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass


def exit_for(verdicts: Iterable[str]) -> None:
    """Exit 1 if anything is violated, else 3 if anything is unknown, else 0."""
    seen = set(verdicts)
    sys.exit(EXIT_VIOLATED if VIOLATED in seen else EXIT_UNKNOWN if UNKNOWN in seen else EXIT_OK)


def exit_for_checks(results: Iterable[Any]) -> None:
    """:func:`exit_for` over check results, where a violated warning-level invariant (a cost, not a fault)
    does not count; its UNKNOWN still does (a timeout is never a pass)."""
    from spec.proof.invariants import INVARIANT_BY_ID

    exit_for(
        r.verdict
        for r in results
        if not (r.verdict == VIOLATED and INVARIANT_BY_ID[r.invariant].level == "warning")
    )


def exit_for_expectations(outcomes: Iterable[Any]) -> None:
    """Against a manifest: exit 1 if a verdict that counts is a surprise (not UNKNOWN), else 3 if
    anything is UNKNOWN, else 0 (expected violations and warning-level surprises exit 0)."""
    outcomes = list(outcomes)
    if any(o.surprise and o.counts and o.result.verdict != UNKNOWN for o in outcomes):
        sys.exit(EXIT_VIOLATED)
    sys.exit(EXIT_UNKNOWN if any(o.result.verdict == UNKNOWN for o in outcomes) else EXIT_OK)
