"""JUnit XML of ``check``: one test case per (revision, registry, invariant), for CI test reports.

Without a manifest: PROVED is a passing case, VIOLATED a failure (its message the symptom, its text one
line per counterexample class; a warning-level invariant's violation passes, reported in ``system-out``),
UNKNOWN a skipped case with the reason: a timeout is never shown as a pass.  With a manifest, a verdict it
expects passes (an expected violation reported in ``system-out`` with the manifest's reason) and a
surprise of an error-level invariant fails, whatever its verdict.  A result held to a baseline (a gate
file) fails on a NEW class of an error-level invariant, its message counting them and its text listing
them; otherwise its classes and the GONE ones are reported in ``system-out``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING

from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.verdict import PROVED, UNKNOWN, VIOLATED

if TYPE_CHECKING:
    from spec.proof.classes import BaselineOutcome
    from spec.proof.expectations import Outcome
    from spec.proof.prover import CheckResult


def check_report(
    results: list[CheckResult],
    shape_text: Callable[[Shape], str],
    outcomes: list[Outcome | BaselineOutcome] | None = None,
) -> str:
    expected = {id(o.result): o for o in outcomes or []}
    fails = {id(r): _fails(r, expected.get(id(r)), outcomes is not None) for r in results}
    suites = ET.Element("testsuites", name="mla-spec check")
    for key in dict.fromkeys((r.revision, r.registry) for r in results):
        rows = [r for r in results if (r.revision, r.registry) == key]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{key[0]} with {key[1]}",
            tests=str(len(rows)),
            failures=str(sum(fails[id(r)] for r in rows)),
            skipped=str(sum(r.verdict == UNKNOWN for r in rows)),
        )
        for r in rows:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{r.revision}.{r.registry}",
                name=r.invariant,
                time=f"{r.seconds:.3f}",
            )
            lines = "\n".join(
                f"{shape_text(c.shape)} -> {c.route['path']}: {c.symptom.split(' -> ')[0]}"
                for c in r.counterexamples
            )
            o = expected.get(id(r))
            if r.verdict != UNKNOWN and o is not None and not hasattr(o, "expected"):
                _against_baseline(case, o, fails[id(r)], shape_text)
            elif r.verdict == UNKNOWN:
                ET.SubElement(case, "skipped", message=f"UNKNOWN: {r.reason}")
            elif fails[id(r)] and r.verdict == PROVED:
                e = o.expected if o is not None else None
                ET.SubElement(
                    case,
                    "failure",
                    type="SURPRISE",
                    message=f"PROVED, but the manifest expects {e.verdict} ({e.reason}): update it"
                    if e
                    else "PROVED, and no manifest row expects it",
                )
            elif fails[id(r)]:
                failure = ET.SubElement(
                    case, "failure", message=INVARIANT_BY_ID[r.invariant].symptom, type="VIOLATED"
                )
                failure.text = lines
            elif r.verdict == VIOLATED and o is not None and o.expected is not None:
                ET.SubElement(case, "system-out").text = f"EXPECTED: {o.expected.reason}\n{lines}"
            elif r.verdict == VIOLATED:  # a warning-level invariant: a cost, reported without failing
                ET.SubElement(
                    case, "system-out"
                ).text = f"WARNING: {INVARIANT_BY_ID[r.invariant].symptom}\n{lines}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _against_baseline(
    case: ET.Element, o: BaselineOutcome, fails: bool, shape_text: Callable[[Shape], str]
) -> None:
    """A result held to its baseline: a failure naming the NEW classes, or its classes in system-out."""

    def line(state: str, shape: Shape, path: str, symptom: str) -> str:
        return f"{state} {shape_text(shape)} -> {path}: {symptom.split(' -> ')[0]}"

    label = o.baseline.label
    lines = [line("NEW", c.shape, c.route["path"], c.symptom) for c in o.new]
    lines += [line("UNCHANGED", c.shape, c.route["path"], c.symptom) for c in o.unchanged]
    lines += [
        line("GONE", Shape.from_json(g["shape"]), g["route"]["path"], g["symptom"]) + " (fixed)"
        for g in o.gone
    ]
    if fails:
        failure = ET.SubElement(
            case, "failure", type="NEW", message=f"{len(o.new)} NEW class(es) against the baseline {label}"
        )
        failure.text = "\n".join(lines)
    elif lines:
        ET.SubElement(case, "system-out").text = f"BASELINE {label}:\n" + "\n".join(lines)


def _fails(r: CheckResult, o: Outcome | BaselineOutcome | None, against_manifest: bool) -> bool:
    """A failing test case: a surprise that counts, or (without a manifest) an error-level violation."""
    if r.verdict == UNKNOWN:
        return False
    if against_manifest:
        return o is not None and o.surprise and o.counts
    return r.verdict == VIOLATED and INVARIANT_BY_ID[r.invariant].level == "error"
