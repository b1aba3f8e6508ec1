"""Run the ``mla-spec`` command line in-process (click's CliRunner), as a subprocess would report it.

Only the README's two commands and the entry point are run as real subprocesses; every other CLI test calls
:func:`run`, which returns the exit status, stdout and stderr.  An exception that escapes the command (a
traceback a user would see) fails the test instead of becoming an exit status.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from click.testing import CliRunner

from conformance.cli import main


def run(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        result = CliRunner().invoke(
            main, [str(a) for a in args], prog_name="mla-spec", env={"COLUMNS": "200"}
        )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"mla-spec {' '.join(map(str, args))} raised {result.exception!r}"
        ) from result.exception
    return subprocess.CompletedProcess(["mla-spec", *args], result.exit_code, result.stdout, result.stderr)
