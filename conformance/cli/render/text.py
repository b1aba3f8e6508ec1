"""Text for a person: the rich tables and lines every command prints (same content as its JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mla_model.registry import NO_KERNEL
from mla_model.shape import Shape
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.verdict import PROVED, UNKNOWN, VIOLATED

if TYPE_CHECKING:
    from spec.proof.prover import CheckResult


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
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _cell(r: CheckResult) -> str:
    if r.verdict == PROVED:
        return "[green]PROVED[/]"
    if r.verdict == UNKNOWN:
        return "[yellow]UNKNOWN[/]"
    more = "" if r.complete else "+"
    if INVARIANT_BY_ID[r.invariant].level == "warning":
        return f"[yellow]WARNING ({r.classes}{more})[/]"
    return f"[red]VIOLATED ({r.classes}{more})[/]"


def check_table(results: list[CheckResult], console: Console) -> None:
    registries = list(dict.fromkeys(r.registry for r in results))
    by_key = {(r.revision, r.registry, r.invariant): r for r in results}
    table = Table(title="mla-spec check")
    table.add_column("revision", style="bold", no_wrap=True)
    table.add_column("invariant", no_wrap=True)
    for reg in registries:
        table.add_column(reg, no_wrap=True)
    revisions = list(dict.fromkeys(r.revision for r in results))
    invariants = list(dict.fromkeys(r.invariant for r in results))
    for rev in revisions:
        for j, inv_id in enumerate(invariants):
            cells = [
                _cell(by_key[(rev, reg, inv_id)]) if (rev, reg, inv_id) in by_key else ""
                for reg in registries
            ]
            table.add_row(
                escape(rev) if j == 0 else "", inv_id, *cells, end_section=(j == len(invariants) - 1)
            )
    console.print(table)
    for r in results:
        if r.verdict == VIOLATED:
            inv = INVARIANT_BY_ID[r.invariant]
            shown = f"{len(r.counterexamples)} class{'es' if len(r.counterexamples) != 1 else ''}"
            heading = "[yellow]WARNING[/]" if inv.level == "warning" else "[red]VIOLATED[/]"
            console.print(
                f"\n{heading} [bold]{r.invariant}[/] on {escape(r.revision)} with {r.registry} "
                f"({shown}{'' if r.complete else ', more not enumerated'})"
            )
            console.print(f"  [dim]breaks in production as:[/] {inv.symptom}")
            for c in r.counterexamples:
                detail = c.symptom.split(" -> ")[0]
                console.print(
                    f"  - {shape_summary(c.shape)}  [cyan]->{c.route['path']}[/]  {detail}", soft_wrap=True
                )
        elif r.verdict == UNKNOWN:
            where = escape(f"{r.revision} with {r.registry}: {r.reason}")
            console.print(f"\n[yellow]UNKNOWN[/] {r.invariant} on {where}")


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


def explanation(out: dict, shape: Shape, revision: str, registry: str, console: Console) -> None:
    console.print(f"[bold]{shape_summary(shape)}[/] on {revision} with {registry}")
    if not out["valid"]:
        broken = [name for name, ok in out["validity"].items() if not ok]
        console.print(f"[yellow]not a shape the engine accepts[/]: breaks {'; '.join(broken)}")
    for gate, d in out["decisions"].items():
        conditions = "  ".join(
            f"{text} {'[green]yes[/]' if v else '[red]no[/]'}" for text, v in d["conditions"].items()
        )
        console.print(f"  {gate} = [bold]{d['value']}[/]  [dim]<-[/] {conditions}", soft_wrap=True)
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
    if "why_not_persistent" in out:
        console.print(
            "  why not persistent: the gate stays closed for " + ", ".join(out["why_not_persistent"])
        )
    for inv_id, v in out["invariants"].items():
        if v["holds"]:
            console.print(f"  {inv_id}: [green]holds[/]")
            continue
        verdict = "[yellow]WARNING[/]" if INVARIANT_BY_ID[inv_id].level == "warning" else "[red]VIOLATED[/]"
        console.print(f"  {inv_id}: {verdict}: {v['symptom']}", soft_wrap=True)
        if v["violated"]["violated"]:  # the conjuncts that break it, where z3 can name them
            given = f"given {', '.join(v['violated']['given'])}: " if v["violated"]["given"] else ""
            console.print(f"    [dim]{given}[/]{'; '.join(v['violated']['violated'])}", soft_wrap=True)


# Commands that live in their own modules.
