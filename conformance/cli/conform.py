"""``mla-spec conform``: replay a cases file on a backend, with a progress bar and a summary table.

It runs the pytest plugin (:mod:`conformance.pytest_plugin`) in a child
process and follows the results file as it grows.  A child that loses its
GPU (a CUDA error that kills the context) exits with
:data:`~conformance.runner.DEVICE_LOST_EXIT`; a fresh child then resumes from
the results file.  ``--workers N`` shards over N pytest-xdist workers, one GPU
each.

This module imports neither z3 nor torch at import time, so on a GPU machine
without z3 it runs as ``python -m conformance.cli.conform``.

The results file opens with the run's settings and is held with a lock for the
run (:mod:`conformance.results_file`); a child killed by a signal leaves ERROR
for the cases it had not finished, which a rerun runs again.  The cases file is
read one case at a time, and the results file followed from where it was last
read, so a million cases need their keys in memory, not their records.

Each result is judged like check judges a verdict (:mod:`conformance.expect`): against the status
its case's class predicts (``expected_outcome``), expected or a surprise (marked ``!``).
Exit status: 0 when every status is the expected one; 1 naming each surprise (a PASS where a MISMATCH
was predicted is a detection lost), any ERROR (the harness failed) or a case without a result; 3
where a case was skipped (nothing compared) and nothing failed; 2 for bad input (a missing or
malformed cases file, an unknown backend or fault, an ``--out`` that is not ours or was made with
other settings, a case past ``--max-memory``); 130 on SIGINT and 143 on SIGTERM, with how many cases
are done.  ``--no-expect`` gives the raw statuses: 1 on any MISMATCH, NAN, CRASH or ERROR, 3 when
every case was skipped, else 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
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
from conformance.cli.memory_options import ByteCount
from conformance.cli.options import format_option
from conformance.results_file import DEFAULT_KV_LEN, Refused, open_results, run_settings
from mla_model.case import iter_cases, stale_cases
from mla_model.limits import input_file

MAX_RESTARTS = 20


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
        cmd[4:4] = ["-p", "xdist.plugin"]  # named: plugin autoload is off in the child
        cmd += ["-n", str(workers)]
    return [*cmd, str(cases)]


def summarise(records: list[dict[str, Any]], since: float | None = None) -> dict[str, Any]:
    """Counts by status and by route path, throughput, reference against kernel time, and (records judged
    by :func:`conformance.expect.judge`) the surprises.

    The rate counts the cases this run ran (finished at or after ``since``, the run's start) over the time
    they took, so a resume is not credited with the cases an earlier run left on disk."""
    by_path: dict[str, Counter] = {}
    for r in records:
        by_path.setdefault(r["path"], Counter())[r["status"]] += 1
    ran = [r for r in records if since is None or r["finished_at"] >= since]
    finished = [r["finished_at"] - r["t_case_s"] for r in ran] + [r["finished_at"] for r in ran]
    span = (max(finished) - min(finished)) if ran else 0.0
    timed = [r for r in records if "t_kernel_ms" in r and "t_reference_ms" in r]
    kernel = [r["t_kernel_ms"] for r in timed]
    reference = [r["t_reference_ms"] for r in timed]
    return {
        "cases": len(records),
        "ran_now": len(ran),
        "statuses": dict(Counter(r["status"] for r in records)),
        "by_path": {p: dict(c) for p, c in sorted(by_path.items())},
        "cases_per_minute": (len(ran) / span * 60) if span > 0 else None,
        "median_kernel_ms": statistics.median(kernel) if kernel else None,
        "median_reference_ms": statistics.median(reference) if reference else None,
        "reference_over_kernel": (statistics.median(reference) / statistics.median(kernel))
        if kernel and statistics.median(kernel) > 0
        else None,
        "not_passed": [
            {k: r.get(k) for k in ("key", "status", "path", "detail", "expected")}
            for r in records
            if r["status"] not in ("PASS", "NO_KERNEL")
        ],
        "surprises": [
            {k: r.get(k) for k in ("key", "status", "expected", "path", "detail")}
            for r in records
            if r.get("verdict") in ("surprise", "error")
        ],
        "expected": sum(r.get("verdict") == "expected" for r in records)
        if any("verdict" in r for r in records)
        else None,
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
        earlier = summary["cases"] - summary["ran_now"]
        resumed = f" ({summary['ran_now']} run now, {earlier} from an earlier run)" if earlier else ""
        console.print(f"{summary['cases']} cases{resumed}, {summary['cases_per_minute']:.0f} cases/min")
    if summary["median_kernel_ms"] is not None:
        ratio = summary["reference_over_kernel"]
        console.print(
            f"median time per case: kernel {summary['median_kernel_ms']:.3f} ms, "
            f"reference {summary['median_reference_ms']:.3f} ms" + (f" ({ratio:.1f}x)" if ratio else "")
        )
    surprising = {r["key"] for r in summary["surprises"]}
    for r in summary["not_passed"][:20]:
        what = escape(f"{r['key']} ({r['path']}): {r['detail']}")
        mark = "!" if r["key"] in surprising else " "
        console.print(f"{mark} [red]{escape(r['status'])}[/] {what}", soft_wrap=True)
    if len(summary["not_passed"]) > 20:
        console.print(f"... and {len(summary['not_passed']) - 20} more in the results file")
    for r in summary["surprises"]:
        console.print(
            f"! [bold red]surprise[/] {escape(r['key'])}: {escape(r['status'])}, "
            f"expected {escape(str(r['expected']))} ({escape(r['path'])})",
            soft_wrap=True,
        )
    if summary.get("expected") is not None:
        console.print(
            f"{summary['expected']} of {summary['cases']} statuses as expected, "
            f"{len(summary['surprises'])} surprise(s)"
        )


EXAMPLES = """\b
Examples:
  mla-spec conform --backend model --cases gen/cases.jsonl
  mla-spec conform --backend vllm --vllm 0.34.0 --cases gen/cases.jsonl --out results.jsonl
  mla-spec conform --backend aiter-triton --cases gen/cases.jsonl --device cuda
"""


@click.command("conform", epilog=EXAMPLES)
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
@click.option(
    "--max-memory",
    type=ByteCount(),
    default=None,
    metavar="BYTES",
    help="Refuse, before anything runs, a case whose inputs and reference would take more than BYTES "
    "(estimated from its shape and --kv-len; a number, or with a unit: 16GiB). Default: the memory the "
    "machine has available (MemAvailable).",
)
@click.option(
    "--no-expect",
    is_flag=True,
    help="Raw statuses: do not judge each against the status its case's class predicts.",
)
@format_option("json")
def conform_command(
    backend,
    cases_path,
    out,
    device,
    fault,
    kv_len,
    full_context,
    workers,
    vllm,
    dcp_ranks,
    inject_fault,
    max_memory,
    no_expect,
    fmt,
) -> None:
    """Replay cases on a backend against the float32 reference: PASS, MISMATCH, NAN, CRASH, NO_KERNEL,
    SKIP, ERROR.

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
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise BadInput(f"--device {device!r}: use auto, cpu, cuda or cuda:N")
    try:
        input_file(cases_path, "--cases")  # a device or a FIFO is refused before it is opened
    except FileNotFoundError:
        raise BadInput(f"--cases {cases_path}: no such file") from None
    except (ValueError, OSError) as e:
        raise BadInput(
            str(e) if isinstance(e, ValueError) else f"--cases {cases_path}: {e.strerror}"
        ) from None
    console = Console(stderr=True, highlight=False)
    handlers = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}
    order: list[str] = []
    lock = None
    try:
        order = _checked_keys(cases_path, kv_len or DEFAULT_KV_LEN, max_memory, console)
        if out is None:
            out = Path(tempfile.mkdtemp(prefix="mla-conform-")) / "results.jsonl"
        elif out.name in ("", ".", "..") or (out.is_dir() and not out.is_symlink()):
            raise BadInput(f"--out {out}: a folder; name the results file")
        try:  # before the progress bar, so a refusal stays one line
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BadInput(f"--out {out}: cannot create its folder: {e.strerror or e}") from None
        settings = run_settings(backend, device, fault, kv_len, full_context, vllm, dcp_ranks, inject_fault)
        try:
            lock = open_results(out, settings, cases_path)  # held until conform exits
        except Refused as e:
            raise BadInput(str(e)) from None
        _replay(
            backend,
            cases_path,
            out,
            device,
            fault,
            kv_len,
            full_context,
            workers,
            vllm,
            dcp_ranks,
            inject_fault,
            no_expect,
            fmt,
            order,
            console,
        )
    except Interrupted as e:
        for sig in handlers:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C while the child stops changes nothing
        _stop_children()
        if lock is None:
            click.echo("mla-spec: interrupted before any case ran; nothing was written", err=True)
        else:
            done = _Results(out, backend, fault, set(order)).update()
            click.echo(
                f"mla-spec: interrupted: {done} of {len(order)} done; rerun the same command to resume",
                err=True,
            )
        sys.exit(128 + e.signum)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if lock is not None:
            os.close(lock)


def _checked_keys(cases_path: Path, kv_len: int, max_memory: int | None, console: Console) -> list[str]:
    """The keys of the cases file, in order, read one case at a time (nothing but the keys is kept), after
    refusing it whole for a bad line, a key twice, a case whose pinned route is stale, or a case whose
    estimated memory is past ``max_memory`` (default: what the machine has available)."""
    from conformance.runner import memory_estimate  # imports torch, which the replay needs anyway

    limit, limit_name = (max_memory, "--max-memory") if max_memory else (_available_memory(), "available")
    keys: list[str] = []
    seen: set[str] = set()
    twice: dict[str, None] = {}
    stale: list[str] = []
    counter = TextColumn("checking cases: {task.completed:,}")
    with Progress(counter, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("check", total=None)
        try:
            for case in iter_cases(cases_path):
                key = case_key(case)
                if key in seen:
                    twice[key] = None
                seen.add(key)
                keys.append(key)
                if stale_cases([case]):
                    stale.append(case.id)
                need = memory_estimate(case, kv_len)
                if limit is not None and need > limit:
                    raise BadInput(
                        f"case {key} needs about {_bytes(need)} ({case.shape.num_reqs} request(s) of up "
                        f"to {kv_len:,} context tokens), past {limit_name} memory {_bytes(limit)}; lower "
                        "--kv-len or raise --max-memory"
                    )
                if len(keys) % 1000 == 0:
                    bar.update(task, completed=len(keys))
        except (ValueError, UnicodeDecodeError) as e:
            raise BadInput(str(e)) from None
        except KeyError as e:  # a case of a revision or registry that mla-spec does not know
            raise BadInput(f"{cases_path}: {e.args[0]}") from None
    if not keys:
        raise BadInput(f"--cases {cases_path}: no cases in the file")
    if twice:
        raise BadInput(
            f"--cases {cases_path}: {len(twice)} case(s) appear more than once (first: {next(iter(twice))}); "
            "a results file keeps one record per case"
        )
    if stale:
        raise BadInput(
            f"{cases_path}: {len(stale)} case(s) no longer have their pinned route (first: {stale[0]}); "
            "regenerate them with mla-spec cases"
        )
    return keys


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where the machine does not say)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _bytes(n: int) -> str:
    return f"{n / (1 << 30):,.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):,.1f} MiB"


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached conform: stop the child, keep the results file, say how to resume."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def _stop_children() -> None:
    """End conform's children (the pytest child, with its process group where it has its own): SIGINT, then
    SIGTERM, then SIGKILL, each given a few seconds; so no worker writes the results file after conform."""
    pids = _children()
    for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                group = os.getpgid(pid)
                if group != os.getpgrp():
                    os.killpg(group, sig)
                else:
                    os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if not _reaped(pid)]
            time.sleep(0.05)
        if not pids:
            return


def _children() -> list[int]:
    """The pids whose parent is this process (from /proc)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.append(int(entry))
    return out


def _reaped(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


class _Results:
    """The results file followed as it grows: the latest record of each case of this run."""

    def __init__(self, out: Path, backend: str, fault: str | None, keys: set[str]) -> None:
        from conformance.runner import ResultsLog

        self.log, self.backend, self.fault, self.keys = ResultsLog(out), backend, fault, keys
        self.latest: dict[str, dict[str, Any]] = {}

    def update(self) -> int:
        """Read what was appended; the number of cases done (an ERROR is not: a resume runs it again)."""
        for r in self.log.new_records():
            if (
                r.get("key") in self.keys
                and r.get("backend") == self.backend
                and r.get("fault") == self.fault
            ):
                self.latest[r["key"]] = {k: r[k] for k in _SUMMARY_FIELDS if k in r}
        return self.done()

    def done(self) -> int:
        return sum(r["status"] != "ERROR" for r in self.latest.values())


# What the summary reads of a record (the rest stays in the file, so a million records fit in memory).
_SUMMARY_FIELDS = (
    "key",
    "status",
    "path",
    "detail",
    "t_case_s",
    "finished_at",
    "t_kernel_ms",
    "t_reference_ms",
)


def _replay(
    backend: str,
    cases_path: Path,
    out: Path,
    device: str,
    fault: str | None,
    kv_len: int | None,
    full_context: bool,
    workers: int,
    vllm: str | None,
    dcp_ranks: str | None,
    inject_fault: str | None,
    no_expect: bool,
    fmt: str,
    order: list[str],
    console: Console,
) -> None:
    """Run the pytest child (again after a lost device) while following the results; summarise; exit."""
    keys = set(order)
    try:
        results = _Results(out, backend, fault, keys)
        results.update()
    except ValueError as e:
        raise BadInput(f"--out {out}: {e}") from None
    log = out.with_suffix(".pytest.log")
    sink = _open_log(log)  # before the scratch folder and the progress bar: a refusal is one line
    started = time.time()
    # The child executes a release file (the vllm backend) and runs pytest: confined, in a scratch folder
    # (spec.realcode.executed.confine), which holds the copy of the cases file pytest collects.
    from spec.realcode.executed import confine

    env = confine.allowed_environment({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    from conformance.backends.vllm import DCP_ENV  # the vllm backend reads the DCP switches from here

    for name, value in (("dcp_ranks", dcp_ranks), ("inject_fault", inject_fault)):
        env.pop(DCP_ENV[name], None)
        if value:
            env[DCP_ENV[name]] = value
    with (  # the scratch folder goes on every way out, SIGINT too (after a SIGKILL, confine's watchdog)
        sink,
        tempfile.TemporaryDirectory(prefix="mla-conform-run-") as folder,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=fmt == "json",
        ) as progress,
    ):
        scratch = Path(folder)
        (scratch / "pytest.ini").write_text("[pytest]\n")
        copy = scratch / "cases.jsonl"
        shutil.copyfile(cases_path, copy)
        cmd = _pytest_command(
            backend, copy, out.resolve(), device, fault, kv_len, full_context, workers, vllm, scratch
        )
        task = progress.add_task(backend, total=len(keys), completed=results.done())
        for _ in range(MAX_RESTARTS):
            before = results.update()
            with confine.Child(cmd, cwd=scratch, env=env, device=device, stdout=sink, stderr=sink) as child:
                while child.poll() is None:
                    time.sleep(0.5)
                    progress.update(task, completed=results.update())
            done = results.update()
            progress.update(task, completed=done)
            if child.returncode != DEVICE_LOST_EXIT or done == before or done == len(keys):
                break
        sink.seek(max(0, os.fstat(sink.fileno()).st_size - 65536))  # its last line, for a failed child
        tail = sink.read().strip().splitlines()[-1:] or ["no output"]
    if child.returncode < 0:  # the child was killed: our harness failed, not the cases it had not finished
        _record_errors(cases_path, out, backend, device, fault, results, -child.returncode)
    records = [results.latest[k] for k in order if k in results.latest]
    if child.returncode not in (0, 1, DEVICE_LOST_EXIT) and not records:
        raise click.ClickException(f"pytest exited {child.returncode}: {tail[0]} (log: {log})")
    if not no_expect:
        from conformance.expect import judge

        records = judge(records, iter_cases(cases_path), fault, inject_fault)
    summary = summarise(records, since=started)
    summary.update(backend=backend, fault=fault, results=str(out))
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary, backend, Console(highlight=False))
        click.echo(f"results: {out}")
    missing = len(keys) - len(records)
    if missing:
        click.echo(f"mla-spec: {missing} case(s) have no result; rerun with --out {out} to resume", err=True)
    if not no_expect:
        from conformance.expect import exit_status

        for r in summary["surprises"]:
            click.echo(
                f"mla-spec: surprise: {r['key']} is {r['status']}, its class predicts {r['expected']}",
                err=True,
            )
        sys.exit(exit_status(records, missing))
    if any(r["status"] in FAILURES for r in records) or missing:
        sys.exit(EXIT_VIOLATED)
    # Every case skipped (a backend that cannot run here): nothing was compared, which is not a pass.
    sys.exit(EXIT_UNKNOWN if records and all(r["status"] == "SKIP" for r in records) else EXIT_OK)


def _open_log(log: Path) -> Any:
    """The pytest child's log beside ``--out``, opened for appending and reading without following a symlink:
    a link, a folder, a FIFO or a file with another name (a hard link) planted there is refused, since
    conform writes only files of its own."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(log, flags, 0o644)
    except OSError as e:
        raise _log_refused(log, "a symlink" if log.is_symlink() else e.strerror or str(e)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise _log_refused(log, "a hard link" if stat.S_ISREG(st.st_mode) else "not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a+", errors="replace")


def _log_refused(log: Path, what: str) -> BadInput:
    return BadInput(f"--out: its pytest log {log} is {what}; conform writes only files of its own")


def _record_errors(
    cases_path: Path, out: Path, backend: str, device: str, fault: str | None, results: _Results, signum: int
) -> None:
    """An ERROR record for each case the killed child had not finished (a resume runs them again)."""
    from conformance.runner import case_record

    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    results.update()
    for case in iter_cases(cases_path):
        key = case_key(case)
        if key in results.latest and results.latest[key]["status"] != "ERROR":
            continue
        record = case_record(case, backend, device, fault)
        record.update(
            status="ERROR",
            detail=f"the pytest child was killed by {name} before this case finished (our harness, "
            "not the backend); a rerun runs it again",
            t_case_s=0.0,
            finished_at=time.time(),
        )
        results.log.append(record)
    results.update()


if __name__ == "__main__":
    from conformance.cli.errors import OneLineErrors

    group = OneLineErrors(commands={"conform": conform_command})
    group.main(args=["conform", *sys.argv[1:]], prog_name="mla-spec")
