"""SARIF 2.1.0 logs of ``check`` and ``diff``, so violations show in code-scanning views.

Format: OASIS "Static Analysis Results Interchange Format (SARIF) Version 2.1.0"
(https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html), within the
subset GitHub code scanning reads ("SARIF support for code scanning": a run's
``tool.driver.rules``, results with ``ruleId``, ``level``, ``message.text``
and a ``physicalLocation`` whose ``artifactLocation.uri`` is relative to the
repository root, ``partialFingerprints`` to track a result across runs).

* ``check``: one rule per invariant checked (shortDescription: its statement,
  fullDescription: how it breaks in production, help: why); one ``error``
  result per violated (revision, registry, invariant), whose message carries
  the smallest counterexample, and one ``warning`` per UNKNOWN verdict (a
  timeout is never a pass).  A result held to a baseline (a gate file) is
  reported class by class instead: one result per class with its
  ``baselineState`` (``new``, or ``unchanged`` and suppressed: the baseline
  has it), and a ``note`` per GONE class (``absent``: fixed), each
  fingerprinted by its class identity (:mod:`spec.proof.classes`).  Where any
  result carries ``baselineState``, every one does (SARIF 2.1.0 §3.27.24): a
  result held to the manifest is ``unchanged`` where expected, else ``new``.
* ``diff``: two rules, ``new-route`` (NEW sends shapes to a path or kernel OLD
  did not use for them) and ``metadata-sizing`` (the persistent metadata is
  sized differently against reorder_batch_threshold); one result per region,
  an ``error`` where ``--fail-on-new-routes`` fails on it, else a ``warning``
  (new route) or a ``note`` (sizing only).

Locations point at the revision's source: ``mla_model/revisions/<module>.py``
(at its ``route``) for a model revision, vLLM's
``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` (at ``use_gluon_decode``)
for a release, the file itself for a path.  Shapes are written by the
caller's ``shape_text`` (the command line's summary), so this module needs no
layer above ``spec``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mla_model.revisions import REVISIONS
from mla_model.shape import Shape
from spec.analyses.diff import Diff, Region
from spec.proof.classes import ABSENT, NEW, UNCHANGED, BaselineOutcome, class_json
from spec.proof.expectations import Outcome
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import UNKNOWN, VIOLATED, CheckResult
from spec.realcode.source import RELATIVE_PATH

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_ROOT = Path(__file__).resolve().parents[3]  # the directory holding mla_model/, spec/, conformance/

ShapeText = Callable[[Shape], str]

DEFAULT_ANCHOR = "def use_gluon_decode"


def check_log(
    results: list[CheckResult],
    shape_text: ShapeText,
    outcomes: list[Outcome | BaselineOutcome] | None = None,
    executed: list[Any] | None = None,
    notes: list[str] | tuple[str, ...] = (),
    warnings: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The SARIF log of a check: violations as errors, unknown verdicts as warnings.  ``executed``: the
    second judge's reports (:func:`_judge_results`); ``notes``: lines about the run (knobs the model did
    not know); ``warnings``: parts of a real revision the model stood in for.  With a manifest,
    a violation it expects carries an external suppression whose justification is the manifest's reason
    (code-scanning views file it as dismissed), and a surprise says so in its message.  A result held to
    a baseline is one result per class (:func:`_class_results`)."""
    judged = {id(o.result): o for o in outcomes or []}
    baselined = any(isinstance(o, BaselineOutcome) for o in outcomes or [])
    checked = list(dict.fromkeys(r.invariant for r in results))
    rules = [_invariant_rule(INVARIANT_BY_ID[i]) for i in checked]
    out = []
    for r in results:
        against = judged.get(id(r))
        if isinstance(against, BaselineOutcome):
            out += _class_results(against, checked.index(r.invariant), shape_text)
            continue
        if r.verdict not in (VIOLATED, UNKNOWN):
            continue
        where = f"{r.revision} with {r.registry}"
        if r.verdict == UNKNOWN:
            text = f"{r.invariant} is UNKNOWN on {where}: {r.reason or 'the solver gave no answer'}"
        elif r.counterexamples:
            c = r.counterexamples[0]
            text = (
                f"{r.invariant} is VIOLATED on {where} "
                f"({r.classes}{'' if r.complete else '+'} counterexample "
                f"class{'es' if r.classes != 1 else ''}); "
                f"smallest: {shape_text(c.shape)} -> {c.route['path']}: {c.symptom}"
            )
        else:
            text = f"{r.invariant} is VIOLATED on {where}: {r.reason}"
        o = against
        if o is not None and o.surprise:
            text += " (a surprise: " + (
                f"the manifest expects {o.expected.verdict})" if o.expected else "no manifest row expects it)"
            )
        out.append(
            {
                "ruleId": r.invariant,
                "ruleIndex": checked.index(r.invariant),
                "level": INVARIANT_BY_ID[r.invariant].level if r.verdict == VIOLATED else "warning",
                "message": {"text": text},
                "locations": [revision_location(r.revision, INVARIANT_BY_ID[r.invariant].anchor)],
                "partialFingerprints": {"mlaSpecCheck/v1": f"{r.revision}|{r.registry}|{r.invariant}"},
                "properties": r.to_json(),
                **(
                    {"suppressions": [{"kind": "external", "justification": o.expected.reason}]}
                    if o is not None and o.expected is not None and not o.surprise
                    else {}
                ),
                **({"baselineState": NEW if o is None or o.surprise else UNCHANGED} if baselined else {}),
            }
        )
    from conformance.cli.second_judge import NotRun

    ran = [j for j in executed or [] if not isinstance(j, NotRun)]
    if ran:
        rules.append(EXECUTED_RULE)
        out += _judge_results(ran, len(rules) - 1, shape_text)
    log = _log(rules, out)
    # A judge that did not run, and a knob the model did not know, are notes on the run (SARIF §3.20.21),
    # not results to baseline (the knob's NEW classes are results, under the revision that names its value).
    texts = [
        *(
            ("note", f"the second judge did not run on {j.label}: {j.why}")
            for j in executed or []
            if isinstance(j, NotRun)
        ),
        *(("note", t) for t in notes),
        *(("warning", t) for t in warnings),
    ]
    if texts:
        log["runs"][0]["invocations"] = [
            {
                "executionSuccessful": True,
                "toolExecutionNotifications": [
                    {"level": level, "message": {"text": t}} for level, t in texts
                ],
            }
        ]
    return log


def _rule(rule_id: str, short: str, full: str, level: str) -> dict[str, Any]:
    """A rule of mla-spec's own (not an invariant's): its CamelCase name made from the id."""
    return {
        "id": rule_id,
        "name": "".join(part.capitalize() for part in rule_id.split("-")),
        "shortDescription": {"text": short},
        "fullDescription": {"text": full},
        "defaultConfiguration": {"level": level},
    }


EXECUTED_RULE = _rule(
    "executed-disagreement",
    "The executed gate file routes a shape otherwise than its lifted gates",
    "check's second judge executed the file (confined) and a routing fact it recorded differs from what "
    "the gates lifted from the same file say: the proof's verdicts do not describe the file.",
    "error",
)


def _judge_results(judged: list[Any], rule: int, shape_text: ShapeText) -> list[dict[str, Any]]:
    """One error per kind of disagreement (field, both values): always NEW, since a disagreement is a fault
    of the lifting, never a state of the baseline."""
    from conformance.cli.second_judge import finding_line
    from spec.realcode.second_judge import findings

    return [
        {
            "ruleId": EXECUTED_RULE["id"],
            "ruleIndex": rule,
            "level": "error",
            "message": {"text": finding_line(f, shape_text)},
            "locations": [revision_location(j.label, DEFAULT_ANCHOR)],
            "partialFingerprints": {"mlaSpecCheck/v1": f"{j.label}|{f.field}|{f.lifted!r}|{f.executed!r}"},
            "baselineState": NEW,
        }
        for j in judged
        for f in findings(j)
    ]


def _class_results(o: BaselineOutcome, rule: int, shape_text: ShapeText) -> list[dict[str, Any]]:
    """A result held to a baseline, class by class: each class of the check (``new``, or ``unchanged`` and
    suppressed), each GONE class of the baseline (an ``absent`` note: fixed), and an UNKNOWN verdict as one
    ``new`` warning."""
    r, label = o.result, o.baseline.label
    where = f"{r.revision} with {r.registry}"
    location = [revision_location(r.revision, INVARIANT_BY_ID[r.invariant].anchor)]
    if r.verdict == UNKNOWN:
        text = f"{r.invariant} is UNKNOWN on {where}: {r.reason or 'the solver gave no answer'}"
        return [_class_result(r, rule, "warning", text, location, NEW, r.to_json(), "UNKNOWN")]
    out = []
    for c in r.counterexamples:
        state = o.state(c)
        text = (
            f"{r.invariant} on {where}: "
            + ("a NEW class, not in" if state == NEW else "a class also in")
            + f" the baseline {label}: {shape_text(c.shape)} -> {c.route['path']}: {c.symptom}"
        )
        cj = class_json(c)
        level = INVARIANT_BY_ID[r.invariant].level
        out.append(
            _class_result(r, rule, level, text, location, state, cj, cj["class_id"])
            | (
                {"suppressions": [{"kind": "external", "justification": f"in the baseline {label} already"}]}
                if state == UNCHANGED
                else {}
            )
        )
    if o.grown is not None:
        g = o.grown
        text = (
            f"{r.invariant} on {where}: UNKNOWN whether it violates shapes the baseline {label} does not: "
            f"{g.unknown}"
            if g.unknown
            else f"{r.invariant} on {where}: NEW violations inside a class the baseline {label} has "
            f"({g.baseline}): {shape_text(g.shape)} -> {g.route['path']}: {g.detail}"
        )
        level = "warning" if g.unknown else INVARIANT_BY_ID[r.invariant].level
        out.append(_class_result(r, rule, level, text, location, NEW, g.to_json(), "grown"))
    for g in o.gone:
        text = (
            f"fixed: {r.invariant} on {where} no longer has this class of the baseline {label}: "
            f"{shape_text(Shape.from_json(g['shape']))} -> {g['route']['path']}: {g['symptom']}"
        )
        out.append(_class_result(r, rule, "note", text, location, ABSENT, g, g["class_id"]))
    return out


def _class_result(
    r: CheckResult,
    rule: int,
    level: str,
    text: str,
    location: list,
    state: str,
    properties: dict[str, Any],
    cid: str,
) -> dict[str, Any]:
    return {
        "ruleId": r.invariant,
        "ruleIndex": rule,
        "level": level,
        "message": {"text": text},
        "locations": location,
        "partialFingerprints": {"mlaSpecClass/v1": f"{r.registry}|{r.invariant}|{cid}"},
        "baselineState": state,
        "properties": properties,
    }


def diff_log(d: Diff, fail_on_new_routes: bool, shape_text: ShapeText) -> dict[str, Any]:
    """The SARIF log of a diff: one result per region of changed routes."""
    rules = [
        _rule(
            "new-route",
            "NEW sends shapes to a path or kernel OLD did not use for them.",
            "A decode step that changes path or kernel runs different code in production: check it against "
            "the invariants (mla-spec check) and replay it on a GPU.",
            "warning",
        ),
        _rule(
            "metadata-sizing",
            "NEW sizes the persistent metadata differently against reorder_batch_threshold, on the same "
            "path and kernel.",
            "Buffers sized below the longest query the scheduler can hand decode close the persistent gate "
            "for longer steps (vLLM #51011).",
            "note",
        ),
    ]
    out = []
    for region in d.regions:
        rule = "new-route" if region.new_route_taken else "metadata-sizing"
        level = "note" if rule == "metadata-sizing" else "error" if fail_on_new_routes else "warning"
        out.append(
            {
                "ruleId": rule,
                "ruleIndex": 0 if rule == "new-route" else 1,
                "level": level,
                "message": {"text": _region_text(d, region, shape_text)},
                "locations": [revision_location(d.new.id)],
                "partialFingerprints": {
                    "mlaSpecDiff/v1": f"{d.old.id}|{d.new.id}|{d.registry}|{region.constraint}|"
                    f"{region.old_route.text()}|{region.new_route.text()}"
                },
                "properties": region.to_json(),
            }
        )
    return _log(rules, out)


def _region_text(d: Diff, region: Region, shape_text: ShapeText) -> str:
    return (
        f"{d.old.id} -> {d.new.id} with {d.registry}: {region.shapes:,} shapes ({region.constraint}) move "
        f"from {region.old_route.text()} to {region.new_route.text()}; smallest: {shape_text(region.example)}"
    )


def _invariant_rule(inv: Any) -> dict[str, Any]:
    return {
        "id": inv.id,
        "name": "".join(part.capitalize() for part in inv.id.split("-")),
        "shortDescription": {"text": inv.statement},
        "fullDescription": {"text": inv.symptom},
        "help": {"text": f"{inv.why} Source: {inv.source}"},
        "defaultConfiguration": {"level": inv.level},
        "properties": {"pr_51011": inv.pr_51011},
    }


def revision_location(revision_id: str, anchor: str = DEFAULT_ANCHOR) -> dict[str, Any]:
    """Where a revision's routing code lives, as a SARIF location: for real code, the line of ``anchor``."""
    if revision_id in REVISIONS:
        route = REVISIONS[revision_id].route
        route = getattr(
            route, "func", route
        )  # the dcp-era revisions bind their features with functools.partial
        module = Path(inspect.getsourcefile(route)).resolve()
        uri = module.relative_to(_ROOT).as_posix() if module.is_relative_to(_ROOT) else module.as_uri()
        return _location(uri, inspect.getsourcelines(route)[1], base=module.is_relative_to(_ROOT))
    if revision_id.startswith("vllm=="):
        from spec.realcode.source import cache_dir

        cached = cache_dir() / revision_id.split("==", 1)[1] / "tree" / RELATIVE_PATH
        return _location(RELATIVE_PATH.as_posix(), _line_of(cached, anchor), base=True)
    path = Path(revision_id)
    if path.is_absolute():
        return _location(path.as_uri(), _line_of(path, anchor), base=False)
    return _location(path.as_posix(), _line_of(path, anchor), base=True)


def _line_of(path: Path, anchor: str) -> int:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 1
    for needle in (anchor, DEFAULT_ANCHOR):
        for n, line in enumerate(lines, 1):
            if needle in line:
                return n
    return 1


def _location(uri: str, line: int, base: bool) -> dict[str, Any]:
    artifact = {"uri": uri, **({"uriBaseId": "%SRCROOT%"} if base else {})}
    return {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": line}}}


def _log(rules: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        tool_version = version("mla-spec")
    except PackageNotFoundError:
        tool_version = "0.0.0"
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "mla-spec", "version": tool_version, "rules": rules}},
                "results": results,
            }
        ],
    }
