"""check's side of knobs the model does not know (spec.realcode.knobs): a gate file is proved once more at
each value of each such knob, against the same baseline, and the output names the knob and the values at
which something NEW appears."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from conformance.cli.options import RELEASE_PREFIX
from mla_model.revisions.base import Revision


@dataclass
class KnobsOf:
    """The knobs one gate file reads that the model does not know, and its revision at each setting."""

    spec: str
    base: Revision  # every knob unset
    knobs: tuple[Any, ...]  # spec.realcode.knobs.Knob
    variants: list[tuple[tuple[tuple[str, Any], ...], Revision]]  # (setting, revision)


def knob_variants(specs: tuple[str, ...], real: list[Revision], trees: list[Path | None]) -> list[KnobsOf]:
    """For each gate file or release that reads knobs the model does not know, its revisions at each value."""
    from spec.realcode.knobs import variants
    from spec.realcode.revision import real_revision

    out = []
    for spec, base, tree in zip(specs, real, trees):
        knobs = base.free_inputs
        release = spec.removeprefix(RELEASE_PREFIX)
        if knobs:
            out.append(
                KnobsOf(
                    spec,
                    base,
                    knobs,
                    [(s, real_revision(release, tree=tree, setting=s)) for s in variants(knobs)],
                )
            )
    return out


def with_settings(by_id: dict[str, Any], found: list[KnobsOf]) -> dict[str, Any]:
    """``by_id`` (keyed by revision id) with each knob setting of a file mapped to what its file is: a
    setting is held to the file's baseline."""
    out = dict(by_id)
    for f in found:
        if f.base.id in out:
            out.update({rev.id: out[f.base.id] for _, rev in f.variants})
    return out


def knob_findings(found: list[KnobsOf], outcomes: list[Any] | None) -> list[dict[str, Any]]:
    """One entry per knob: what it is, and each value at which a check result has a surprise (a NEW
    class, or UNKNOWN), with those invariants."""
    surprising: dict[str, set[str]] = {}
    for o in outcomes or []:
        if o.surprise:
            surprising.setdefault(o.result.revision, set()).add(o.result.invariant)
    entries = []
    for f in found:
        for k in f.knobs:
            violated = [
                {"value": setting[0][1], "invariants": sorted(surprising[rev.id])}
                for setting, rev in f.variants
                if setting[0][0] == k.name and rev.id in surprising
            ]
            entries.append(
                {
                    "file": f.spec,
                    "name": k.name,
                    "line": k.line,
                    "values": list(k.values),
                    "note": k.describe(),
                    "violated_when": violated,
                }
            )
    return entries


def knob_line(entry: dict[str, Any]) -> str:
    """'VLLM_X: a knob the model did not know, taken as a free input (values unset, '1'); violated when
    VLLM_X='1' (fp8-never-reaches-gluon)'."""
    if not entry["violated_when"]:
        return f"{entry['note']}; nothing new at any of its values"
    when = "; ".join(
        f"{entry['name']}={v['value']!r} ({', '.join(v['invariants'])})" for v in entry["violated_when"]
    )
    return f"{entry['note']}; violated when {when}"


def knob_text(entries: list[dict[str, Any]], console: Console) -> None:
    for e in entries:
        style = "red" if e["violated_when"] else "yellow"
        console.print(f"\n[{style}]knob in {escape(e['file'])}: {escape(knob_line(e))}[/]", soft_wrap=True)
