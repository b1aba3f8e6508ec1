"""pytest plugin: replay conformance cases on a backend (the ``pytest11`` entry point ``mla_spec``).

    pytest --mla-backend aiter-triton --mla-cases cases.jsonl --mla-results results.jsonl [-n GPUS]

Each line of the cases file becomes a test, judged as ``mla-spec conform`` judges it
(:mod:`conformance.expect`): a status its case's class predicts passes (PASS) or is an expected
failure (xfail: a predicted MISMATCH, NAN, CRASH or NO_KERNEL); any other status fails, naming the
predicted one (a PASS where a MISMATCH was predicted is a detection lost); ERROR (the harness
failed) fails; SKIP skips.  ``--mla-no-expect`` gives the raw rule: PASS passes, NO_KERNEL is an
expected failure, MISMATCH, NAN, CRASH and ERROR fail.  ``--mla-results`` streams one JSON
line per case and skips the cases it already holds (an ERROR, our harness failing, runs again), so
rerunning the same command resumes; the file opens with the run's settings, and a run with other
settings, or while another run holds its lock, is a usage error (:mod:`conformance.results_file`).
An xdist worker that dies (a signal) while running a case leaves an ERROR record for it.  Under
pytest-xdist each worker takes one GPU (``--mla-device cuda``: worker ``gwN``
uses GPU ``N``); a device error that leaves the CUDA context unusable ends
the worker, which xdist replaces.

The plugin is loaded by every pytest run of this project: it imports nothing
heavy here and does nothing unless ``--mla-backend`` or ``--mla-cases`` is
given.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

_SETTINGS = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mla-spec", "mla-spec conformance replay")
    group.addoption(
        "--mla-backend",
        metavar="NAME",
        help="backend to replay the cases on: model, aiter-triton, vllm",
    )
    group.addoption(
        "--mla-cases", metavar="FILE", help="cases JSONL file (mla-spec cases); each line becomes a test"
    )
    group.addoption(
        "--mla-device",
        default="auto",
        metavar="DEV",
        help="auto (CUDA when present), cpu, cuda or cuda:N (default: auto)",
    )
    group.addoption(
        "--mla-results",
        metavar="FILE",
        help="stream one JSON line per case here; cases already in it are skipped (resume)",
    )
    group.addoption(
        "--mla-fault", metavar="NAME", help="model backend only: inject a documented failure mode"
    )
    group.addoption(
        "--mla-kv-len",
        type=int,
        default=None,
        metavar="N",
        help="context tokens per request, drawn from [1, N] (default 256)",
    )
    group.addoption(
        "--mla-full-context",
        action="store_true",
        help="every request holds exactly --mla-kv-len context tokens (for timing)",
    )
    group.addoption(
        "--mla-no-expect",
        action="store_true",
        help="raw statuses: do not judge each against the status its case's class predicts",
    )
    group.addoption(
        "--mla-vllm",
        metavar="RELEASE",
        help="vllm backend: the vLLM release (0.28.0), tree or rocm_aiter_mla.py whose real decode "
        "path runs (default: each case's revision's release)",
    )


def _active(config: pytest.Config) -> bool:
    return bool(config.getoption("--mla-backend") or config.getoption("--mla-cases"))


def pytest_configure(config: pytest.Config) -> None:
    if not _active(config):
        return
    from conformance.backends import BACKENDS, FAULT_BACKENDS
    from mla_model.case import iter_cases, stale_cases

    backend, cases = config.getoption("--mla-backend"), config.getoption("--mla-cases")
    if not backend or not cases:
        raise pytest.UsageError("--mla-backend and --mla-cases go together")
    if backend not in BACKENDS:
        raise pytest.UsageError(f"unknown --mla-backend {backend!r}; known: {', '.join(BACKENDS)}")
    fault = config.getoption("--mla-fault")
    if fault is not None:
        from mla_model.emulation import FAULTS

        if fault not in FAULTS:
            raise pytest.UsageError(f"unknown --mla-fault {fault!r}; known: {', '.join(FAULTS)}")
        if backend not in FAULT_BACKENDS:
            raise pytest.UsageError(
                f"--mla-fault is a switch of the {', '.join(FAULT_BACKENDS)} backend only"
            )
    path = Path(cases)
    if not path.is_file():
        raise pytest.UsageError(f"--mla-cases {cases}: no such file")
    checked = _checked_by_parent(config, config.getoption("--mla-results"))
    stale: list[str] = []
    try:  # one case at a time: nothing of the file is kept (collection reads it again, see CasesFile)
        for case in iter_cases(path):
            stale += [] if checked else stale_cases([case])
    except ValueError as e:
        raise pytest.UsageError(f"--mla-cases {e}") from None
    except KeyError as e:  # a case of a revision or registry that mla-spec does not know (as conform says)
        raise pytest.UsageError(f"--mla-cases {cases}: {e.args[0]}") from None
    if stale:  # replaying a route the model no longer takes would pass or fail the wrong thing
        raise pytest.UsageError(
            f"--mla-cases {cases}: {len(stale)} case(s) no longer have their pinned route "
            f"(first: {stale[0]}); regenerate them with mla-spec cases"
        )
    vllm = config.getoption("--mla-vllm")
    if vllm is not None and backend != "vllm":
        raise pytest.UsageError("--mla-vllm is a switch of the vllm backend only")
    kv_len = config.getoption("--mla-kv-len")
    if kv_len is not None and kv_len < 1:
        raise pytest.UsageError("--mla-kv-len must be at least 1")
    results = config.getoption("--mla-results")
    config.stash[_SETTINGS] = {
        "backend": backend,
        "path": path.resolve(),
        "fault": fault,
        "kv_len": kv_len,
        "full_context": config.getoption("--mla-full-context"),
        "device": config.getoption("--mla-device"),
        "results": results,
        "writer": _writer(config, Path(results), path) if results else None,
        "done": None,
        "vllm": vllm,
        "configured": False,
        "no_expect": config.getoption("--mla-no-expect"),
    }
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [str(path)]  # collect the cases, not the project's test paths


def _writer(config: pytest.Config, results: Path, cases: Path) -> Any:
    """Who this process writes the results file as: the run (it takes the file's lock and checks its
    settings), or a child of the run holding it (mla-spec conform, the xdist controller), which stops
    writing once that run is gone."""
    from conformance import results_file
    from conformance.backends.vllm import DCP_ENV

    if _xdist_worker(config):
        return results_file.Writer(results, None)
    settings = results_file.run_settings(
        config.getoption("--mla-backend"),
        config.getoption("--mla-device"),
        config.getoption("--mla-fault"),
        config.getoption("--mla-kv-len"),
        config.getoption("--mla-full-context"),
        config.getoption("--mla-vllm"),
        os.environ.get(DCP_ENV["dcp_ranks"]) or None,
        os.environ.get(DCP_ENV["inject_fault"]) or None,
    )
    try:
        results.parent.mkdir(parents=True, exist_ok=True)
        return results_file.Writer(
            results, results_file.open_results(results, settings, cases, "--mla-results")
        )
    except results_file.Locked as e:
        holder = results_file.lock_holder(results)
        if holder is None or _is_ancestor(holder):
            return results_file.Writer(results, None)  # the run that launched this pytest holds it
        raise pytest.UsageError(str(e)) from None
    except (results_file.Refused, OSError) as e:
        raise pytest.UsageError(str(e)) from None


def _xdist_worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (``gw0``...), None outside xdist.  Read from the config xdist gives its
    workers, not from ``PYTEST_XDIST_WORKER``: a pytest started inside an xdist worker (a test of this
    plugin, say) inherits that variable without being a worker."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def _checked_by_parent(config: pytest.Config, results: str | None) -> bool:
    """Whether the run that launched this pytest (conform, or the xdist controller) checked the cases already:
    it holds the results file's lock.  Its checks are not repeated (a million cases take minutes)."""
    if not results:
        return False
    if _xdist_worker(config):
        return True
    from conformance import results_file

    holder = results_file.lock_holder(Path(results))
    return holder is not None and _is_ancestor(holder)


def _is_ancestor(pid: int) -> bool:
    """Whether ``pid`` is this process's parent, or its parent's, and so on (from /proc)."""
    current = os.getppid()
    while current > 1:
        if current == pid:
            return True
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError:
            return False
        current = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def pytest_unconfigure(config: pytest.Config) -> None:
    settings = config.stash.get(_SETTINGS, None)
    writer = settings and settings["writer"]
    if writer is not None and writer.owner_fd is not None:
        os.close(writer.owner_fd)  # the lock goes with it
        writer.owner_fd = None


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: Any, sched: Any) -> None:
    """xdist: a worker died running ``crashitem`` (a signal, an abort): our harness failed, not the case, so
    the case gets an ERROR record and a resume runs it again (xdist starts a fresh worker for the rest)."""
    config = getattr(sched, "config", None)
    settings = config.stash.get(_SETTINGS, None) if config is not None else None
    if settings is None or settings["writer"] is None:
        return
    from conformance import runner
    from conformance.backends import case_key
    from mla_model.case import iter_cases

    key = crashitem.rsplit("::", 1)[-1]
    case = next((c for c in iter_cases(settings["path"]) if case_key(c) == key), None)
    if case is None:
        return
    record = runner.case_record(case, settings["backend"], settings["device"], settings["fault"])
    detail = f"the pytest worker running it died ({report.longrepr})".splitlines()[0][:500]
    record.update(status="ERROR", detail=detail, t_case_s=0.0, finished_at=time.time())
    log = runner.ResultsLog(settings["results"])
    settings["writer"].write(lambda: log.append(record))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Any:
    settings = parent.config.stash.get(_SETTINGS, None)
    if settings is not None and file_path.resolve() == settings["path"]:
        return CasesFile.from_parent(parent, path=file_path)
    return None


class CasesFile(pytest.File):
    """The cases file, read one case at a time.

    Memory: pytest collects every item before the first one runs (``session.items`` is a list; xdist
    schedules workers by index into it), so one :class:`CaseItem` per case is the floor.  What we add is
    kept to the key and where the case's line starts: no :class:`~mla_model.case.Case` stays in memory,
    each is read again from its line when it runs (tests/test_input_bounds.py counts them).  Measured
    with ``--collect-only`` on 5,000 and 50,000 cases (2026-12-04): peak RSS 62 and 136 MB, about 1.6 KB
    a case, pytest's item; with every Case kept it was 79 and 307 MB, 5.1 KB a case.  So a million cases
    still take about 1.6 GB in each process that collects them (each xdist worker does).  The vllm
    backend holds the cases still to do: it batches them into its child processes."""

    def collect(self) -> Any:
        from conformance.backends import case_key
        from mla_model.case import located_cases

        for line, offset, case in located_cases(self.path):
            yield CaseItem.from_parent(self, name=case_key(case), line=line, offset=offset)


class CaseItem(pytest.Item):
    def __init__(self, *, line: int, offset: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.line, self.offset = line, offset

    def case(self) -> Any:
        """This item's case, read from its line of the cases file (not kept: see :class:`CasesFile`)."""
        from conformance.backends import case_key
        from mla_model.case import case_at

        case = case_at(self.path, self.offset, self.line)
        if case_key(case) != self.name:
            raise ValueError(f"{self.path}:{self.line}: now holds {case_key(case)}, not {self.name}")
        return case

    def runtest(self) -> None:
        from conformance import runner
        from conformance.backends import DEVICE_LOST_EXIT, case_key, load_backend

        settings = self.config.stash[_SETTINGS]
        case = self.case()
        log = runner.ResultsLog(settings["results"]) if settings["results"] else None
        if log is not None and settings["done"] is None:
            settings["done"] = log.done(settings["backend"], settings["fault"])
        if log is not None and self.name in settings["done"]:
            pytest.skip(f"already recorded in {log.path}")
        worker = _xdist_worker(self.config) or ""
        device = runner.resolve_device(
            settings["device"], int(worker[2:]) if worker.startswith("gw") else None
        )
        kv_len = settings["kv_len"] or runner.DEFAULT_KV_LEN
        backend = load_backend(settings["backend"])
        if hasattr(backend, "configure") and not settings["configured"]:
            # Batching backends (vllm) run the cases still to do in chunks, one process per chunk.
            from mla_model.case import iter_cases

            done = settings["done"] or set()
            backend.configure(
                release=settings["vllm"],
                cases=(c for c in iter_cases(settings["path"]) if case_key(c) not in done),
            )
            settings["configured"] = True
        record = runner.run_case(case, backend, device, kv_len, settings["fault"], settings["full_context"])
        self.user_properties.append(("mla_status", record["status"]))
        if log is not None:
            settings["writer"].write(lambda: log.append(record))
        if record.get("device_lost"):
            os._exit(DEVICE_LOST_EXIT)  # the CUDA context is gone; a fresh process resumes
        status, detail = record["status"], record["detail"]
        if status == "SKIP":
            pytest.skip(detail)
        if settings["no_expect"]:
            if status == "NO_KERNEL":
                pytest.xfail(f"NO_KERNEL: {detail}")
            if status != "PASS":
                raise CaseFailed(f"({case.origin}): {status}: {detail}")
            return
        from conformance.backends.vllm import DCP_ENV
        from conformance.expect import predicted, verdict_of

        expected = predicted(case, settings["fault"], os.environ.get(DCP_ENV["inject_fault"]))
        if verdict_of(expected, status) != "expected":
            raise CaseFailed(f"({case.origin}): {status}, its class predicts {expected}: {detail}")
        if status != "PASS":
            pytest.xfail(f"{status} (predicted): {detail}")

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        """The case's line for its own outcomes (a surprise, a predicted failure); a traceback for anything
        else.  pytest formats a traceback for an xfail too, parsing every source file on the stack: 0.5 s
        a case on the CPU (vllm-0.27's 77 predicted failures: 39 of the run's 58 s), so never for ours."""
        if isinstance(excinfo.value, (CaseFailed, pytest.xfail.Exception)):
            return f"{self.name} {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> Any:
        return self.path, None, self.name


class CaseFailed(Exception):
    """A status other than the predicted one (with ``--mla-no-expect``: a MISMATCH, NAN, CRASH or ERROR)."""


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line of verdict counts (read off the reports, so xdist workers' cases count too)."""
    if _SETTINGS not in config.stash:
        return
    from conformance.backends import STATUSES

    tally: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            status = dict(getattr(report, "user_properties", ())).get("mla_status")
            if status is not None and report.when == "call":
                tally[status] = tally.get(status, 0) + 1
    if tally:
        counts = ", ".join(f"{tally[s]} {s}" for s in STATUSES if s in tally)
        terminalreporter.write_line(f"mla-spec {config.stash[_SETTINGS]['backend']}: {counts}")
