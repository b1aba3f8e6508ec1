"""check's second judge on the command line: which gate files it executes, and how it reports them.

The judge itself is :mod:`spec.realcode.second_judge`.  A gate file is executed only where it sits in a
vLLM tree (a lone file never is: the trust boundary in docs/explanation/architecture.md) and torch is
installed; otherwise its report is one line saying why the second judge did not run.  A file the harness
cannot execute (an import that fails, a step past ``--timeout``) ends check in one line, exit 2: a file
the judge could not run is not a file it passed.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console
from rich.markup import escape

from conformance.cli.errors import BadInput
from conformance.cli.options import RELEASE_PREFIX
from mla_model.revisions import REVISIONS
from mla_model.revisions.base import Revision
from mla_model.shape import Shape
from spec.proof.classes import Baseline
from spec.proof.prover import CheckResult

SECTION = "second judge"  # how the text output names it


@dataclass(frozen=True)
class NotRun:
    """A gate file the second judge did not execute, and why (one line)."""

    label: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.label, "ran": False, "why": self.why}


def start_judges(
    specs: tuple[str, ...], real: list[Revision], choices: dict[str, Any], baselines: dict[str, Baseline]
) -> dict[str, Any]:
    """Start the first run of every gate file (by revision id) that can be executed; a :class:`NotRun`
    for the others.  Releases are not judged here: ``bind`` proves them equal to their executed code."""
    from spec.realcode.executed.harness import release_code
    from spec.realcode.revision import refusal
    from spec.realcode.second_judge import start
    from spec.realcode.source import SourceError, is_release, resolve, tree_of

    judges: dict[str, Any] = {}
    for spec, rev in zip(specs, real):
        if spec in REVISIONS or is_release(spec.removeprefix(RELEASE_PREFIX)):
            continue
        if refusal(rev) is not None:
            judges[rev.id] = NotRun(
                spec, "its gates could not be lifted (every result is UNKNOWN): nothing to compare"
            )
            continue
        try:
            path = resolve(spec).path
        except SourceError as e:
            judges[rev.id] = NotRun(spec, str(e))
            continue
        if tree_of(path) is None:
            judges[rev.id] = NotRun(spec, "it sits in no vLLM tree, and a lone file is never executed")
        elif importlib.util.find_spec("torch") is None:
            judges[rev.id] = NotRun(spec, "torch is not installed (pip install 'mla-spec[conform]')")
        else:
            code = replace(release_code(str(path.absolute())), label=spec)  # named as given
            judges[rev.id] = start(code, baselines.get(rev.id))
    return judges


def finish_judges(
    judges: dict[str, Any],
    real: list[Revision],
    results: list[CheckResult],
    choices: dict[str, Any],
    specs: tuple[str, ...],
) -> list[Any]:
    """Each gate file's :class:`~spec.realcode.second_judge.Judgement` (or :class:`NotRun`), in order."""
    from spec.realcode.baseline import baseline_expected, baseline_revision
    from spec.realcode.executed.harness import NEEDS_TORCH, HarnessError
    from spec.realcode.second_judge import Started, finish
    from spec.realcode.source import SourceError

    out: list[Any] = []
    for spec, rev in zip(specs, real):
        judge = judges.get(rev.id)
        if not isinstance(judge, Started):
            out += [judge] if judge is not None else []
            continue
        choice = choices.get(spec)
        try:
            answers = baseline_expected(choice, judge.shapes) if choice is not None else None
            out.append(
                finish(
                    judge,
                    rev,
                    [r for r in results if r.revision == rev.id],
                    (lambda c=choice: baseline_revision(c)) if choice is not None else None,
                    answers,
                )
            )
        except HarnessError as e:
            if str(e) == NEEDS_TORCH:
                out.append(NotRun(spec, "torch cannot be imported by the harness child"))
                continue
            raise BadInput(
                f"{spec}: the second judge could not execute it: {e} (--no-execute: skip it)"
            ) from None
        except SourceError as e:
            raise BadInput(f"{spec}: {e}") from None
    return out


def finding_line(f: Any, shape_text: Any) -> str:
    """One disagreement kind in one line: field, both values, how many shapes, the first shape."""
    many = f" ({f.shapes} shapes; first: " if f.shapes > 1 else " ("
    return (
        f"{f.field}: the lifted gates say {f.lifted}; the executed file gives {f.executed}"
        f"{many}{shape_text(Shape.from_json(f.shape))})"
    )


def summary(j: Any) -> str:
    """The judgement in one line."""
    differ = (
        f"; routes differing from the baseline: {', '.join(j.differing)} ({j.witnesses} witnesses, "
        f"{j.near_witnesses} shapes around them)"
        if j.differing
        else ""
    )
    return (
        f"{j.label} executed on {j.shapes} shapes ({j.class_shapes} class shapes{differ}) in "
        f"{len(j.runs)} child run{'s' if len(j.runs) != 1 else ''}, {j.seconds:.1f} s"
    )


def report_text(judged: list[Any], console: Console, shape_text: Any) -> None:
    from spec.realcode.second_judge import findings

    for j in judged:
        if isinstance(j, NotRun):
            console.print(
                f"\n[yellow]{SECTION}: did not run on {escape(j.label)}: {escape(j.why)}[/]", soft_wrap=True
            )
            continue
        console.print(f"\n{SECTION}: {escape(summary(j))}", soft_wrap=True)
        found = findings(j)
        if not found:
            console.print("  [green]no disagreement with the lifted gates[/]")
            continue
        console.print(
            f"  [red]{len(j.disagreements)} disagreement{'s' if len(j.disagreements) != 1 else ''} with the "
            "lifted gates (a surprise: the verdicts above do not describe this file)[/]",
            soft_wrap=True,
        )
        for f in found:
            console.print(f"  {escape(finding_line(f, shape_text))}", soft_wrap=True)


def disagreeing(judged: list[Any]) -> bool:
    return any(not isinstance(j, NotRun) and j.disagreements for j in judged)
