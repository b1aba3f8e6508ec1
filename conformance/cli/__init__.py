"""The ``mla-spec`` command line: one module per command over mla_model, spec and conformance.

Each command module parses its options (the shared set is :mod:`conformance.cli.options`), calls library
functions that return data, and hands the data to a renderer (:mod:`conformance.cli.render`: text, JSON,
SARIF, JUnit).  It sits in the top layer because conform and vllm-tests need the conformance package.

Exit status (:mod:`conformance.cli.errors`): 0 all as expected, 1 some invariant violated (for check:
a verdict its expected-verdicts manifest does not expect), 2 bad input (one line on stderr, no traceback), 3
some verdict unknown (and none violated).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from conformance.cli.errors import OneLineErrors

# Command name -> the module that holds it (each module's command is ``<name>_command``).  Loaded on first
# use, so ``python -m conformance.cli.conform`` starts on a GPU machine without z3, and --help starts fast.
COMMANDS = {
    name: f"conformance.cli.{name.replace('-', '_')}"
    for name in (
        "check",
        "audit",
        "bind",
        "list",
        "explain",
        "cases",
        "mutate",
        "graph",
        "conform",
        "diff",
        "vllm-tests",
    )
}


class Commands(OneLineErrors):
    """The group of :data:`COMMANDS`, each imported when it is asked for (click's lazy-loading pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(COMMANDS[name])
        command: click.Command = getattr(module, f"{name.replace('-', '_')}_command")
        return command


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mla-spec", prog_name="mla-spec")
def main() -> None:
    """Prove vLLM's ROCm AITER MLA decode routing correct, or show where it breaks."""


def command(name: str) -> Any:
    """One command by name (for tests that call a command in-process)."""
    return main.get_command(click.Context(main), name)
