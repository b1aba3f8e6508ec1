"""``mla-spec conform``: replay a cases file on a backend, with a progress bar and a summary table.

It runs the pytest plugin (:mod:`conformance.pytest_plugin`) in a child
process and follows the results file as it grows.  A child that loses its
GPU (a CUDA error that kills the context) exits with
:data:`~conformance.runner.DEVICE_LOST_EXIT`; a fresh child then resumes from
the results file.  ``--workers N`` shards over N pytest-xdist workers, one GPU
each.

This module imports neither z3 nor torch at import time, so on a GPU machine
without z3 it runs as ``python -m conformance.cli.conform``.

Exit status: 0 when no case is MISMATCH, NAN or CRASH; 1 otherwise; 2 for bad
input (a missing or malformed cases file, an unknown backend or fault).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conformance.backends import BACKENDS, DEVICE_LOST_EXIT, FAILURES, FAULT_BACKENDS, STATUSES, case_key
from conformance.cli.errors import EXIT_OK, EXIT_UNKNOWN, EXIT_VIOLATED, BadInput
from conformance.cli.options import format_option
from mla_model.case import read_cases, stale_cases

MAX_RESTARTS = 20


def _records(path: Path, backend: str, fault: str | None, keys: set[str]) -> dict[str, dict[str, Any]]:
    """The latest record of each case of this run (backend, fault) in the results file."""
    from conformance.runner import ResultsLog

    return {
        r["key"]: r
        for r in ResultsLog(path).records()
        if r.get("key") in keys and r.get("backend") == backend and r.get("fault") == fault
    }


def _pytest_command(
    backend: str,
    cases: Path,
    out: Path,
    device: str,
    fault: str | None,
    kv_len: int | None,
    full_context: bool,
    workers: int,
    vllm: str | None = None,
    scratch: Path | None = None,
) -> list[str]:
    """pytest isolated in ``scratch``: its rootdir, an empty ini there, no conftest.py anywhere, no cache,
    and only the plugins named here (PYTEST_DISABLE_PLUGIN_AUTOLOAD is set in its environment); ``cases``
    is a copy in ``scratch``, so nothing beside the user's cases file (a conftest.py, an __init__.py, an
    ini file) is read."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "conformance.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--noconftest",
    ]
    if scratch is not None:
        cmd += ["--rootdir", str(scratch), "-c", str(scratch / "pytest.ini"), "--confcutdir", str(scratch)]
    cmd += [
        "--mla-backend",
        backend,
        "--mla-cases",
        str(cases),
        "--mla-results",
        str(out),
        "--mla-device",
        device,
    ]
    if fault:
        cmd += ["--mla-fault", fault]
    if kv_len:
        cmd += ["--mla-kv-len", str(kv_len)]
    if full_context:
        cmd.append("--mla-full-context")
    if vllm:
        cmd += ["--mla-vllm", vllm]
    if workers > 1:
        cmd[5:5] = ["-p", "xdist.plugin"]
        cmd += ["-n", str(workers)]
    return [*cmd, str(cases)]


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by status and by route path, throughput, and reference against kernel time."""
    by_path: dict[str, Counter] = {}
    for r in records:
        by_path.setdefault(r["path"], Counter())[r["status"]] += 1
    finished = [r["finished_at"] - r["t_case_s"] for r in records] + [r["finished_at"] for r in records]
    span = (max(finished) - min(finished)) if records else 0.0
    timed = [r for r in records if "t_kernel_ms" in r and "t_reference_ms" in r]
    kernel = [r["t_kernel_ms"] for r in timed]
    reference = [r["t_reference_ms"] for r in timed]
    return {
        "cases": len(records),
        "statuses": dict(Counter(r["status"] for r in records)),
        "by_path": {p: dict(c) for p, c in sorted(by_path.items())},
        "cases_per_minute": (len(records) / span * 60) if span > 0 else None,
        "median_kernel_ms": statistics.median(kernel) if kernel else None,
        "median_reference_ms": statistics.median(reference) if reference else None,
        "reference_over_kernel": (statistics.median(reference) / statistics.median(kernel))
        if kernel and statistics.median(kernel) > 0
        else None,
        "not_passed": [
            {k: r.get(k) for k in ("key", "status", "path", "detail")}
            for r in records
            if r["status"] not in ("PASS", "NO_KERNEL")
        ],
    }


def _print_summary(summary: dict[str, Any], backend: str, console: Console) -> None:
    table = Table(title=f"mla-spec conform: {backend}")
    table.add_column("route path", style="bold")
    shown = [s for s in STATUSES if s in summary["statuses"]]
    for s in shown:
        table.add_column(s, justify="right")
    for path, counts in summary["by_path"].items():
        table.add_row(escape(path), *[str(counts.get(s, "")) for s in shown])
    table.add_row("all", *[str(summary["statuses"].get(s, "")) for s in shown], style="bold")
    console.print(table)
    if summary["cases_per_minute"]:
        console.print(f"{summary['cases']} cases, {summary['cases_per_minute']:.0f} cases/min")
    if summary["median_kernel_ms"] is not None:
        ratio = summary["reference_over_kernel"]
        console.print(
            f"median time per case: kernel {summary['median_kernel_ms']:.3f} ms, "
            f"reference {summary['median_reference_ms']:.3f} ms" + (f" ({ratio:.1f}x)" if ratio else "")
        )
    for r in summary["not_passed"][:20]:
        what = escape(f"{r['key']} ({r['path']}): {r['detail']}")
        console.print(f"[red]{escape(r['status'])}[/] {what}", soft_wrap=True)
    if len(summary["not_passed"]) > 20:
        console.print(f"... and {len(summary['not_passed']) - 20} more in the results file")


@click.command("conform")
@click.option("--backend", required=True, metavar="NAME", help=f"One of: {', '.join(BACKENDS)}.")
@click.option(
    "--cases", "cases_path", required=True, type=click.Path(path_type=Path), help="Cases JSONL file."
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Results JSONL (streamed; rerun with the same --out to resume). Default: a temporary file.",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option(
    "--fault",
    default=None,
    metavar="NAME",
    help="model backend only: fp8-read-as-bf16, repeat-pad-non-divisor or metadata-short-qlen.",
)
# 262,144 tokens: beyond the longest context of any MLA checkpoint (DeepSeek-V3 and Kimi serve 128K-256K);
# past it one request's KV alone is gigabytes, and a run would exhaust memory instead of answering.
@click.option(
    "--kv-len",
    type=click.IntRange(min=1, max=262_144),
    default=None,
    help="Context tokens per request, from [1, N] (N at most 262,144).",
)
@click.option(
    "--full-context", is_flag=True, help="Every request holds exactly --kv-len context tokens (timing)."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="pytest-xdist workers, one per GPU.",
)
@click.option(
    "--vllm",
    "vllm",
    default=None,
    metavar="RELEASE",
    help="vllm backend only: the vLLM release (0.28.0), tree or rocm_aiter_mla.py to execute "
    "(default: each case's revision's release).",
)
@click.option(
    "--dcp-ranks",
    type=click.Choice(["simulated", "gloo", "nccl"]),
    default=None,
    help="vllm backend, cases with dcp_world_size > 1: run the ranks as threads of one process "
    "(simulated, the default), as gloo processes on the CPU, or as NCCL processes, one GPU each.",
)
@click.option(
    "--inject-fault",
    type=click.Choice(["drop-rank-lse"]),
    default=None,
    help="vllm backend, DCP cases: drop the last rank's LSE (-inf) before the release's merge; "
    "every DCP case that runs must then be a MISMATCH.",
)
@format_option("json")
def conform_command(
    backend, cases_path, out, device, fault, kv_len, full_context, workers, vllm, dcp_ranks, inject_fault, fmt
) -> None:
    """Replay cases on a backend against the float32 reference: PASS, MISMATCH, NAN, CRASH, NO_KERNEL,
    SKIP.

    pytest runs in a confined child process (docs/explanation/architecture.md, the trust boundary); the
    vllm backend executes the release's rocm_aiter_mla.py there."""
    if backend not in BACKENDS:
        raise BadInput(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if fault is not None:
        from mla_model.emulation import FAULTS  # imports torch, which the replay needs anyway

        if fault not in FAULTS or backend not in FAULT_BACKENDS:
            raise BadInput(
                f"--fault {fault!r}: the faults ({', '.join(FAULTS)}) are a switch of the "
                f"{', '.join(FAULT_BACKENDS)} backend"
            )
    if vllm is not None and backend != "vllm":
        raise BadInput("--vllm is a switch of the vllm backend only")
    if (dcp_ranks or inject_fault) and backend != "vllm":
        raise BadInput("--dcp-ranks and --inject-fault are switches of the vllm backend only")
    if not cases_path.is_file():
        raise BadInput(f"--cases {cases_path}: no such file")
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise BadInput(f"--device {device!r}: use auto, cpu, cuda or cuda:N")
    try:
        cases = read_cases(cases_path)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadInput(f"{cases_path}: {e}" if isinstance(e, UnicodeDecodeError) else str(e)) from None
    if not cases:
        raise BadInput(f"--cases {cases_path}: no cases in the file")
    seen: dict[str, int] = {}
    for c in cases:
        seen[case_key(c)] = seen.get(case_key(c), 0) + 1
    twice = [k for k, n in seen.items() if n > 1]
    if twice:
        raise BadInput(
            f"--cases {cases_path}: {len(twice)} case(s) appear more than once (first: {twice[0]}); "
            "a results file keeps one record per case"
        )
    try:
        stale = stale_cases(cases)
    except KeyError as e:  # a case of a revision or registry that mla-spec does not know
        raise BadInput(f"{cases_path}: {e.args[0]}") from None
    if stale:
        raise BadInput(
            f"{cases_path}: {len(stale)} case(s) no longer have their pinned route (first: {stale[0]}); "
            "regenerate them with mla-spec cases"
        )
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="mla-conform-")) / "results.jsonl"
    elif out.name in ("", ".", "..") or out.is_dir():
        raise BadInput(f"--out {out}: a folder; name the results file")
    try:  # before the progress bar, so a refusal stays one line
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--out {out}: cannot create its folder: {e.strerror or e}") from None
    keys = {case_key(c) for c in cases}
    # The child executes a release file (the vllm backend) and runs pytest: confined, in a scratch folder
    # (spec.realcode.executed.confine), which holds the copy of the cases file pytest collects.
    from spec.realcode.executed import confine

    scratch = Path(tempfile.mkdtemp(prefix="mla-conform-run-"))
    (scratch / "pytest.ini").write_text("[pytest]\n")
    copy = scratch / "cases.jsonl"
    shutil.copyfile(cases_path, copy)
    cmd = _pytest_command(
        backend, copy, out.resolve(), device, fault, kv_len, full_context, workers, vllm, scratch
    )
    env = confine.allowed_environment({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    from conformance.backends.vllm import DCP_ENV  # the vllm backend reads the DCP switches from here

    for name, value in (("dcp_ranks", dcp_ranks), ("inject_fault", inject_fault)):
        env.pop(DCP_ENV[name], None)
        if value:
            env[DCP_ENV[name]] = value
    console = Console(stderr=True, highlight=False)
    log = out.with_suffix(".pytest.log")
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=fmt == "json",
    ) as progress:
        task = progress.add_task(backend, total=len(keys), completed=len(_records(out, backend, fault, keys)))
        for _ in range(MAX_RESTARTS):
            before = len(_records(out, backend, fault, keys))
            with (
                open(log, "a") as sink,
                confine.Child(cmd, cwd=scratch, env=env, device=device, stdout=sink, stderr=sink) as child,
            ):
                while child.poll() is None:
                    time.sleep(0.5)
                    progress.update(task, completed=len(_records(out, backend, fault, keys)))
            done = len(_records(out, backend, fault, keys))
            progress.update(task, completed=done)
            if child.returncode != DEVICE_LOST_EXIT or done == before or done == len(keys):
                break
    shutil.rmtree(scratch, ignore_errors=True)
    records = list(_records(out, backend, fault, keys).values())
    if child.returncode not in (0, 1, DEVICE_LOST_EXIT) and not records:
        tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
        raise click.ClickException(f"pytest exited {child.returncode}: {tail[0]} (log: {log})")
    summary = summarise(records)
    summary.update(backend=backend, fault=fault, results=str(out))
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary, backend, Console(highlight=False))
        click.echo(f"results: {out}")
    missing = len(keys) - len(records)
    if missing:
        click.echo(f"mla-spec: {missing} case(s) have no result; rerun with --out {out} to resume", err=True)
    if any(r["status"] in FAILURES for r in records) or missing:
        sys.exit(EXIT_VIOLATED)
    # Every case skipped (a backend that cannot run here): nothing was compared, which is not a pass.
    sys.exit(EXIT_UNKNOWN if records and all(r["status"] == "SKIP" for r in records) else EXIT_OK)


if __name__ == "__main__":
    from conformance.cli.errors import OneLineErrors

    group = OneLineErrors(commands={"conform": conform_command})
    group.main(args=["conform", *sys.argv[1:]], prog_name="mla-spec")
