"""JUnit XML of ``check``: one test case per (revision, registry, invariant), for CI test reports.

PROVED is a passing case, VIOLATED a failure (a warning-level invariant's violation passes, reported in
``system-out``) (its message the symptom, its text one line per
counterexample class), UNKNOWN a skipped case with the reason: a timeout is never shown as a pass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING

from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.verdict import UNKNOWN, VIOLATED

if TYPE_CHECKING:
    from spec.proof.prover import CheckResult


def check_report(results: list[CheckResult], shape_text: Callable[[Shape], str]) -> str:
    suites = ET.Element("testsuites", name="mla-spec check")
    for key in dict.fromkeys((r.revision, r.registry) for r in results):
        rows = [r for r in results if (r.revision, r.registry) == key]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{key[0]} with {key[1]}",
            tests=str(len(rows)),
            failures=str(sum(r.verdict == VIOLATED and _is_fault(r) for r in rows)),
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
            if r.verdict == VIOLATED and _is_fault(r):
                failure = ET.SubElement(
                    case, "failure", message=INVARIANT_BY_ID[r.invariant].symptom, type="VIOLATED"
                )
                failure.text = lines
            elif r.verdict == VIOLATED:  # a warning-level invariant: a cost, reported without failing
                ET.SubElement(
                    case, "system-out"
                ).text = f"WARNING: {INVARIANT_BY_ID[r.invariant].symptom}\n{lines}"
            elif r.verdict == UNKNOWN:
                ET.SubElement(case, "skipped", message=f"UNKNOWN: {r.reason}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _is_fault(r: CheckResult) -> bool:
    return INVARIANT_BY_ID[r.invariant].level == "error"
