"""Text for a person: the rich tables and lines every command prints (same content as its JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from mla_model.registry import NO_KERNEL
from mla_model.shape import FP8_KV_CACHE_DTYPES, Shape
from spec.proof.classes import route_changes
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.verdict import PROVED, UNKNOWN, VIOLATED

if TYPE_CHECKING:
    from spec.proof.classes import BaselineOutcome
    from spec.proof.expectations import Outcome
    from spec.proof.prover import CheckResult

    Judged = Outcome | BaselineOutcome


def shape_summary(s: Shape) -> str:
    parts = [
        s.arch,
        f"kv={s.kv_cache_dtype}",
        f"q={s.q_dtype}",
        f"heads={s.num_heads}",
        f"qlen={s.max_qo_len}",
    ]
    parts.append("no drafter" if s.spec_method == "none" else f"{s.spec_method} k={s.num_spec_tokens}")
    defaults = Shape(arch=s.arch, kv_cache_dtype=s.kv_cache_dtype)
    for name in ("asm_padding_mode", "gluon_build", "num_reqs", "dcp_world_size", "causal", "kv_cache_bytes"):
        if getattr(s, name) != getattr(defaults, name):
            parts.append(f"{name}={getattr(s, name)}")
    return " ".join(parts)


def label_count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 'es' if noun.endswith('s') else 's'}"


def _cell(r: CheckResult, surprise: bool = False, short: bool = False) -> str:
    """A verdict cell: PROVED, UNKNOWN, VIOLATED (n) or WARNING (n), ``!`` marking a surprise; ``short``:
    VIOL n and WARN n (:data:`SHORT_LEGEND`), for a terminal too narrow for the long cells."""
    mark = " [bold magenta]![/]" if surprise else ""
    if r.verdict == PROVED:
        return f"[green]PROVED[/]{mark}"
    if r.verdict == UNKNOWN:
        return f"[yellow]UNKNOWN[/]{mark}"
    n = f"{r.classes}{'' if r.complete else '+'}"
    if INVARIANT_BY_ID[r.invariant].level == "warning":
        return f"[yellow]{f'WARN {n}' if short else f'WARNING ({n})'}[/]{mark}"
    return f"[red]{f'VIOL {n}' if short else f'VIOLATED ({n})'}[/]{mark}"


SHORT_LEGEND = (
    "VIOL n: VIOLATED with n counterexample classes (n+: more not enumerated); WARN n: a warning-level "
    "invariant violated (a cost, not a fault); !: a surprise (a verdict the manifest does not expect, or a "
    "NEW class against the baseline)"
)


def revision_label(revision: str) -> str:
    """A revision as a table shows it: a gate file's path shortened to its last three parts."""
    parts = revision.replace("\\", "/").split("/")
    return revision if len(parts) <= 3 else "…/" + "/".join(parts[-3:])


def detailed_results(results: list[CheckResult], outcomes: list[Judged] | None) -> list[CheckResult]:
    """The results the text details below its table: every one without a manifest, else the surprises
    (of a result held to a baseline, only an UNKNOWN one: its classes are listed by state)."""
    if outcomes is None:
        return results
    return [
        o.result for o in outcomes if o.surprise and (_held_to_manifest(o) or o.result.verdict == UNKNOWN)
    ]


def unknown_groups(results: list[CheckResult]) -> dict[tuple[str, str], list[CheckResult]]:
    """The UNKNOWN results by (revision, reason): a file refused for one construct is UNKNOWN everywhere
    for the same reason, said once."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for r in results:
        if r.verdict == UNKNOWN:
            groups.setdefault((r.revision, r.reason), []).append(r)
    return groups


def _surprise_lines(surprises: list[Any], console: Console, line: Any) -> None:
    """A ``! revision / registry / invariant: ...`` line per surprise (``line`` writes it), except that the
    UNKNOWN ones sharing a revision and a reason are one line, the reason said once above."""
    grouped = {key: g for key, g in unknown_groups([o.result for o in surprises]).items() if len(g) > 1}
    said: set[tuple[str, str]] = set()
    for o in surprises:
        key = (o.result.revision, o.result.reason)
        if o.result.verdict != UNKNOWN or key not in grouped:
            line(o)
        elif key not in said:
            said.add(key)
            console.print(
                f"  ! {escape(key[0])}: {label_count(len(grouped[key]), 'result')} UNKNOWN (the reason "
                "above)",
                soft_wrap=True,
            )


def _held_to_manifest(o: Judged) -> bool:
    return hasattr(o, "expected")


def check_table(
    results: list[CheckResult],
    console: Console,
    outcomes: list[Judged] | None = None,
    show: int = 3,
    hit: dict[int, list[str]] | None = None,
) -> None:
    """The verdict table, then each violation's first ``show`` classes: with a manifest (``outcomes``),
    only the surprises are detailed and a summary says whether every verdict is as expected; a result held
    to a baseline lists its NEW and GONE classes (``show`` of each), and a summary counts them."""
    table = verdict_table(results, outcomes, short=False)
    short = Measurement.get(console, console.options, table).maximum > console.width
    console.print(verdict_table(results, outcomes, short=True) if short else table)
    if short:
        console.print(f"[dim]{SHORT_LEGEND}[/]")
    detailed = detailed_results(results, outcomes)
    for r in detailed:
        if r.verdict == VIOLATED:
            _violation(r, console, show, hit or {})
    for (revision, reason), group in unknown_groups(detailed).items():
        if len(group) == 1:
            (r,) = group
            where = escape(f"{r.revision} with {r.registry}: {r.reason}")
            console.print(f"\n[yellow]UNKNOWN[/] {r.invariant} on {where}")
            continue
        registries = ", ".join(dict.fromkeys(r.registry for r in group))
        console.print(
            f"\n[yellow]UNKNOWN[/] {label_count(len(group), 'result')} on {escape(revision)} "
            f"({label_count(len({r.invariant for r in group}), 'invariant')} with {registries}): "
            f"{escape(reason)}",
            soft_wrap=True,
        )
    manifest = [o for o in outcomes or [] if _held_to_manifest(o)]
    if manifest:
        expectation_summary(manifest, console)
    against = [o for o in outcomes or [] if not _held_to_manifest(o)]
    for revision in dict.fromkeys(o.result.revision for o in against):
        baseline_lines([o for o in against if o.result.revision == revision], console, show, hit or {})


def verdict_table(results: list[CheckResult], outcomes: list[Judged] | None, short: bool) -> Table:
    """check's table: a row per (revision, invariant), a column per registry.  The invariant and verdict
    columns are never cut (a narrow terminal folds the revision, a gate file's path, instead)."""
    surprise = {id(o.result): o.surprise for o in outcomes or []}
    registries = list(dict.fromkeys(r.registry for r in results))
    by_key = {(r.revision, r.registry, r.invariant): r for r in results}
    revisions = list(dict.fromkeys(r.revision for r in results))
    invariants = list(dict.fromkeys(r.invariant for r in results))
    table = Table(title="mla-spec check")
    table.add_column("revision", style="bold", overflow="fold")
    table.add_column("invariant", no_wrap=True, min_width=max(map(len, invariants), default=0))
    rows = {
        (rev, inv_id): [
            _cell(r, surprise.get(id(r), False), short) if (r := by_key.get((rev, reg, inv_id))) else ""
            for reg in registries
        ]
        for rev in revisions
        for inv_id in invariants
    }
    for i, reg in enumerate(registries):
        widest = max((Text.from_markup(cells[i]).cell_len for cells in rows.values()), default=0)
        table.add_column(reg, no_wrap=True, min_width=max(len(reg), widest))
    for rev in revisions:
        for j, inv_id in enumerate(invariants):
            table.add_row(
                escape(revision_label(rev)) if j == 0 else "",
                inv_id,
                *rows[rev, inv_id],
                end_section=(j == len(invariants) - 1),
            )
    return table


HITS_SHOWN = 6  # deployment groups named per class in text (JSON has every deployment)


def grouped_hits(labels: list[str]) -> list[str]:
    """Deployment labels with the TP sizes of one model and setting merged: "Kimi-K3 TP4/TP8 fp8"."""
    groups: dict[tuple[str, str], list[str]] = {}
    for label in labels:
        model, sep, rest = label.partition(" TP")
        tp, _, setting = rest.partition(" ")
        groups.setdefault((model, setting) if sep else (label, ""), []).append(f"TP{tp}" if sep else "")
    return [
        f"{model} {'/'.join(tps)} {setting}".strip() if setting else model
        for (model, setting), tps in groups.items()
    ]


def _hits_line(labels: list[str], console: Console, indent: str) -> None:
    """The bundled deployments a class hits, grouped (none: no line)."""
    names = grouped_hits(labels)
    if names:
        more = f" and {len(names) - HITS_SHOWN} more" if len(names) > HITS_SHOWN else ""
        console.print(f"{indent}[dim]hits:[/] {', '.join(names[:HITS_SHOWN])}{more}", soft_wrap=True)


def _violation(r: CheckResult, console: Console, show: int, hit: dict[int, list[str]]) -> None:
    inv = INVARIANT_BY_ID[r.invariant]
    heading = "[yellow]WARNING[/]" if inv.level == "warning" else "[red]VIOLATED[/]"
    console.print(
        f"\n{heading} [bold]{r.invariant}[/] on {escape(r.revision)} with {r.registry} "
        f"({label_count(r.classes, 'class')}{'' if r.complete else ', more not enumerated'})"
    )
    console.print(f"  [dim]breaks in production as:[/] {inv.symptom}")
    for c in r.counterexamples[:show]:
        detail = c.symptom.split(" -> ")[0]
        console.print(f"  - {shape_summary(c.shape)}  [cyan]->{c.route['path']}[/]  {detail}", soft_wrap=True)
        _hits_line(hit.get(id(c), []), console, "    ")
    hidden = len(r.counterexamples) - show
    if hidden > 0:
        console.print(
            f"  [dim]... and {label_count(hidden, 'more class')} (--show {r.classes}, or --format json)[/]"
        )


def expectation_summary(outcomes: list[Outcome], console: Console) -> None:
    """One line when every verdict is what the manifest expects; else one line per surprise."""
    manifest = escape(str(outcomes[0].manifest)) if outcomes else ""
    surprises = [o for o in outcomes if o.surprise]
    expected_violations = sum(o.result.verdict == VIOLATED for o in outcomes if not o.surprise)
    if not surprises:
        n = len(outcomes)
        verdicts = "the one verdict matches" if n == 1 else f"all {label_count(n, 'verdict')} match"
        console.print(
            f"\n[green]As expected:[/] {verdicts} {manifest} "
            f"({label_count(expected_violations, 'expected violation')}, each with its reason there; "
            "--no-expect details every violation)",
            soft_wrap=True,
        )
        return
    console.print(
        f"\n[bold magenta]{label_count(len(surprises), 'surprise')}[/] against {manifest}:", soft_wrap=True
    )

    def line(o: Outcome) -> None:
        r, e = o.result, o.expected
        want = f"expected {e.verdict} (row {e.row}: {escape(e.reason)})" if e else "no row expects it"
        level = " [dim](warning: does not change the exit status)[/]" if not o.counts else ""
        console.print(
            f"  ! {escape(r.revision)} / {r.registry} / {r.invariant}: {r.verdict}, {want}{level}",
            soft_wrap=True,
        )

    _surprise_lines(surprises, console, line)


def baseline_lines(
    outcomes: list[BaselineOutcome], console: Console, show: int, hit: dict[int, list[str]]
) -> None:
    """One check target's results against its baseline: per result with a NEW or GONE class, those classes
    (``show`` of each, with the deployments each hits) and how many are unchanged; one line for the other
    results; then the surprises."""
    b, revision = outcomes[0].baseline, outcomes[0].result.revision
    console.print(
        f"\n[bold]{escape(revision)}[/] against [bold]{escape(b.label)}[/] ({escape(b.how)}), "
        "class by class:",
        soft_wrap=True,
    )
    changed = [o for o in outcomes if o.new or o.gone or o.grown is not None]
    for o in changed:
        r = o.result
        was = b.results[r.registry, r.invariant].verdict if (r.registry, r.invariant) in b.results else "-"
        console.print(
            f"  {r.invariant} with {r.registry}: [bold magenta]{len(o.new)} NEW[/], "
            f"[green]{len(o.gone)} GONE[/], {len(o.unchanged)} unchanged  [dim]({was} -> {r.verdict})[/]",
            soft_wrap=True,
        )
        new, in_place = [], set()
        for c in o.new:
            g = o.replaces(c)
            moved = None if g is None else route_changes(g["route"], c.route)
            if g is not None:
                in_place.add(g["class_id"])
            new.append((c.shape, c.route["path"], c.symptom, moved, hit.get(id(c), [])))
        _state_lines("NEW ", new, console, show)
        gone: list[tuple[Any, ...]] = [
            (Shape.from_json(g["shape"]), g["route"]["path"], g["symptom"], None, [])
            for g in o.gone
            if g["class_id"] not in in_place
        ]
        _state_lines("GONE", gone, console, show)
        if o.grown is not None:
            _grown_line(o.grown, console)
        if in_place:
            console.print(
                f"    [dim]({label_count(len(in_place), 'GONE class')} replaced by NEW ones of the same "
                "view, above)[/]"
            )
    same = [
        o for o in outcomes if not (o.new or o.gone or o.grown is not None or o.result.verdict == UNKNOWN)
    ]
    if same:
        console.print(
            f"  {'other results' if changed else 'results'} as the baseline's: "
            f"{label_count(len(same), 'result')}, "
            f"{label_count(sum(len(o.unchanged) for o in same), 'class')} unchanged",
            soft_wrap=True,
        )
    surprises = [o for o in outcomes if o.surprise]
    new, gone = sum(len(o.new) for o in outcomes), sum(len(o.gone) for o in outcomes)
    if not surprises:
        console.print(
            f"\n[green]As the baseline:[/] no NEW class against {escape(b.label)} ({gone} GONE, fixed)",
            soft_wrap=True,
        )
        return
    console.print(
        f"\n[bold magenta]{label_count(len(surprises), 'surprise')}[/] against the baseline "
        f"{escape(b.label)} ({new} NEW, {gone} GONE):",
        soft_wrap=True,
    )

    def line(o: BaselineOutcome) -> None:
        r = o.result
        what = (
            f"UNKNOWN ({escape(r.reason)})"
            if r.verdict == UNKNOWN
            else label_count(len(o.new), "NEW class")
            if o.new
            else "NEW violations inside a class the baseline has"
            if not o.grown.unknown
            else f"UNKNOWN whether it violates more shapes ({escape(o.grown.unknown)})"
        )
        level = " [dim](warning: does not change the exit status)[/]" if not o.counts else ""
        console.print(
            f"  ! {escape(r.revision)} / {r.registry} / {r.invariant}: {what}{level}", soft_wrap=True
        )

    _surprise_lines(surprises, console, line)


def _grown_line(grown: Any, console: Console) -> None:
    """The least shape a file violates where its baseline does not, inside a class the baseline has
    (:mod:`spec.proof.growth`)."""
    if grown.unknown:
        console.print(f"    [yellow]UNKNOWN whether more shapes are violated: {escape(grown.unknown)}[/]")
        return
    console.print(
        f"    NEW  {shape_summary(grown.shape)}  [cyan]->{grown.route['path']}[/]  "
        f"{escape(grown.detail.split(' -> ')[0])}",
        soft_wrap=True,
    )
    console.print(
        f"         [dim]a violation inside a class the baseline has ({escape(grown.baseline)})[/]",
        soft_wrap=True,
    )


def _state_lines(state: str, classes: list[tuple[Any, ...]], console: Console, show: int) -> None:
    """The first ``show`` classes of one baseline state, a line each (GONE ones marked fixed).  Each item
    is (shape, path, symptom, moved, hits): ``moved``, for a NEW class in place of a GONE one of the same
    view, the route fields that differ (:func:`spec.proof.classes.route_changes`); ``hits``, the bundled
    deployments the class hits."""
    fixed = "  [green](fixed)[/]" if state == "GONE" else ""
    for shape, path, symptom, moved, hits in classes[:show]:
        detail = escape(symptom.split(" -> ")[0])
        console.print(
            f"    {state} {shape_summary(shape)}  [cyan]->{path}[/]  {detail}{fixed}", soft_wrap=True
        )
        if moved:
            fields = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in moved.items())
            console.print(
                f"         [dim]in place of the baseline's class of this view: {escape(fields)}[/]",
                soft_wrap=True,
            )
        _hits_line(hits, console, "         ")
    if len(classes) > show:
        console.print(
            f"    [dim]... and {len(classes) - show} more {state.strip()} (--show, or --format json)[/]"
        )


def short_verdict(r: CheckResult) -> str:
    return {"PROVED": "[green]✓[/]", "UNKNOWN": "[yellow]?[/]"}.get(
        r.verdict, f"[red]✗ {r.classes}{'' if r.complete else '+'}[/]"
    )


def executed_cell(e: Any) -> str:
    if e is None:
        return "[dim]no model[/]"
    n = len(e.disagreements)
    return f"[{'red' if n else 'green'}]{n}/{e.shapes:,}[/]"


def executed_lines(executed: Any, console: Console) -> None:
    n = len(executed.disagreements)
    colour = "red" if n else "green"
    console.print(
        f"executed: {label_count(executed.shapes, 'shape')} of {escape(executed.release)}'s real decode path "
        f"({executed.valid:,} valid) against {executed.revision}: [{colour}]{n} disagreement"
        f"{'' if n == 1 else 's'}[/] ({executed.seconds:.1f} s)"
    )
    console.print(
        "  compared: " + ", ".join(f"{k} {v:,}" for k, v in sorted(executed.compared.items())), soft_wrap=True
    )
    for d in executed.disagreements[:10]:
        console.print(
            f"  [red]{d.field}[/] at {shape_summary(Shape(**d.shape))}: executed {d.executed!r}, "
            f"model {d.model!r}",
            soft_wrap=True,
        )


def _yes_no(value: bool) -> str:
    return "[green]yes[/]" if value else "[red]no[/] "


def condition_lines(node: dict, console: Console, indent: str = "    ") -> None:
    """A gate's and/or tree (spec.analyses.explain.decision_conditions), a node a line with its value."""
    if "condition" in node:
        console.print(f"{indent}{_yes_no(node['value'])} {escape(node['condition'])}", soft_wrap=True)
        return
    console.print(f"{indent}{_yes_no(node['value'])} [dim]{node['op']}:[/]")
    for child in node["children"]:
        condition_lines(child, console, indent + "    ")


def explanation(
    out: dict,
    shape: Shape,
    revision: str,
    registry: str,
    console: Console,
    defaulted: dict[str, Any] | None = None,
    every_invariant: bool = False,
) -> None:
    """explain's text: the shape (and the fields it took by default), the gates as and/or trees, the route,
    AITER's lookup, the scales, then the invariants the shape breaks; those that hold are one line (each
    on its own with ``every_invariant``)."""
    console.print(f"[bold]{shape_summary(shape)}[/] on {revision} with {registry}")
    if defaulted:
        console.print(
            "  [dim]defaulted (no flag or case id gave them):[/] "
            + ", ".join(f"{name}={value}" for name, value in defaulted.items()),
            soft_wrap=True,
        )
    if not out["valid"]:
        broken = [name for name, ok in out["validity"].items() if not ok]
        console.print(f"[yellow]not a shape the engine accepts[/]: breaks {'; '.join(broken)}")
    for gate, d in out["decisions"].items():
        tree = d["tree"]
        if "condition" in tree:
            console.print(
                f"  {gate} = [bold]{d['value']}[/]  [dim]<-[/] {escape(tree['condition'])}", soft_wrap=True
            )
            continue
        console.print(f"  {gate} = [bold]{d['value']}[/]  [dim]<- {tree['op']}:[/]")
        for child in tree["children"]:
            condition_lines(child, console)
    r, k = out["route"], out["kernel"]
    console.print(f"  _mtp_decode_qlen = {r['mtp_decode_qlen']}")
    if r["path"].startswith("asm"):
        padded = (
            f"{r['padded_q_heads']} by {r['head_padding']}" if r["head_padding"] != "none" else "no padding"
        )
        console.print(
            f"  route: [cyan]{r['path']}[/], {r['decode_heads']} heads ({padded}; the kernel is asked for "
            f"{r['request']['padded_heads']}), qlen {r['request']['kernel_qlen']}"
        )
    else:
        console.print(
            f"  route: [cyan]{r['path']}[/], {r['decode_heads']} heads, qlen {r['request']['kernel_qlen']}"
        )
    if shape.dcp_world_size > 1:
        console.print(
            f"  DCP: {shape.dcp_world_size} ranks, {r['decode_heads']} gathered heads, DCP route "
            f"[cyan]{r['dcp_route']}[/]"
            + ("; ASM asks for the LSE" if r["path"].startswith("asm") else "")
            + (" and the round-robin (cprr) kernel" if r["request"]["cprr"] else "")
        )
    if r["path"].startswith("asm"):
        key = " ".join(f"{a}:{b}" for a, b in k["key"].items())
        console.print(
            f"  AITER: persistent={k['persistent_after_aiter']}  key {key}  -> "
            + (k["kernel"] if k["kernel"] != NO_KERNEL else f"[red]{NO_KERNEL}[/]")
            + (
                f"  get_block_n_fp8[{k['block_n_key']}] {'ok' if k['block_n_key_ok'] else '[red]KeyError[/]'}"
                if k["block_n_lookup"]
                else ""
            )
        )
    if shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES:
        sc = out["scales"]
        console.print(
            f"  scales: q_scale {'passed' if sc['q_scale_passed'] else 'not passed'}; kv_scale "
            + (
                "passed, on the scores"
                if sc["kv_scale_passed"]
                else "[red]1.0 passed[/], the cache's scale lost"
            )
            + f"; V scaled by it {sc['kv_scale_on_v_times']}x"
            + ("" if sc["kv_scale_on_v_times"] == 1 or not sc["kv_scale_passed"] else " [red](needs 1x)[/]")
        )
    if "why_not_persistent" in out:
        console.print(
            "  why not persistent: the gate stays closed for " + ", ".join(out["why_not_persistent"])
        )
    holding = [inv_id for inv_id, v in out["invariants"].items() if v["holds"]]
    for inv_id, v in out["invariants"].items():
        if v["holds"]:
            continue
        verdict = "[yellow]WARNING[/]" if INVARIANT_BY_ID[inv_id].level == "warning" else "[red]VIOLATED[/]"
        console.print(f"  {inv_id}: {verdict}: {v['symptom']}", soft_wrap=True)
        if v["violated"]["violated"]:  # the conjuncts that break it, where z3 can name them
            given = f"given {', '.join(v['violated']['given'])}: " if v["violated"]["given"] else ""
            violated = "; ".join(v["violated"]["violated"])
            console.print(f"    [dim]{escape(given)}[/]{escape(violated)}", soft_wrap=True)
    if every_invariant:
        for inv_id in holding:
            console.print(f"  {inv_id}: [green]holds[/]")
    elif holding:
        everything = (
            "every invariant holds"
            if len(holding) == len(out["invariants"])
            else (f"the other {len(holding)} invariants hold")
        )
        console.print(f"  [green]{everything}[/] [dim](--all lists them)[/]", soft_wrap=True)


def memory_explanation(memory: Any, why_not: str | None, default_seqs: bool, console: Console) -> None:
    """explain's memory section: the sizing call(s) the release made, each persistent buffer with the
    total, AITER's reduce scratch, and the sum (:class:`spec.analyses.memory.Memory`)."""
    from spec.analyses.memory import human

    if memory is None:
        console.print(f"  memory: [yellow]not measured[/]: {escape(why_not or '')}", soft_wrap=True)
        return
    seqs = f"max_num_seqs {memory.max_num_seqs}" + (" (vLLM's default on this GPU)" if default_seqs else "")
    console.print(
        f"  memory ({escape(memory.release)}'s builder, {escape(memory.aiter)}'s sizing; {seqs}): "
        f"threshold {memory.threshold}, _mtp_decode_qlen {memory.mtp_decode_qlen}",
        soft_wrap=True,
    )
    if memory.sizing:
        first, qlens = memory.sizing[0], sorted({c["max_seqlen_qo"] for c in memory.sizing})
        q = str(qlens[0]) if len(qlens) == 1 else f"each of {qlens[0]}..{qlens[-1]}, per-dimension maximum"
        console.print(
            f"    get_mla_metadata_info_v1(batch {first['max_num_reqs']}, qlen {q}, heads "
            f"{first['num_heads']}, q {first['q_dtype']}, kv {first['kv_dtype']})",
            soft_wrap=True,
        )
    if memory.error:
        console.print(f"    [red]not sized[/]: {escape(memory.error)}", soft_wrap=True)
    if memory.buffers:
        for name, b in memory.buffers.items():
            shape = "x".join(str(d) for d in b["shape"]) or "scalar"
            console.print(f"    {name:<24} {shape:>10} {b['dtype']:<7} {b['bytes']:>14,} B")
        console.print(f"    persistent metadata      {human(memory.metadata_bytes)}")
    scratch = memory.scratch or {}
    if "bytes" in scratch:
        tensors = ", ".join(
            f"{'x'.join(str(d) for d in t['shape'])} {t['dtype']}" for t in scratch["tensors"]
        )
        console.print(
            f"    reduce scratch           {human(memory.scratch_bytes)}  [dim]mla_decode_fwd at "
            f"{scratch['rows']} rows ({memory.max_num_seqs} requests x qlen {scratch['qlen']}), "
            f"{scratch['heads']} heads: {tensors}[/]",
            soft_wrap=True,
        )
        console.print(f"    total                    {human(memory.total_bytes)}")
    elif "error" in scratch:
        console.print(f"    reduce scratch: [red]not measured[/]: {escape(scratch['error'])}", soft_wrap=True)


# Commands that live in their own modules.
