"""The GPU acceptance run: ``python -m benchmarks.gpu`` on one GPU (an H200), in at most 6 minutes.

It runs, on ``--device`` (``cuda`` by default):

* the ``vllm`` backend on the committed cases of 0.27.1, 0.28.0 and 0.34.0 (:data:`RELEASES`), through
  ``python -m conformance.cli.conform`` (its DCP cases with simulated ranks), each twice: the first run
  compiles every Triton kernel it meets (the record says how many cache files there were before), the
  rerun finds them compiled, as every run after a machine's first does; the throughput goal is the
  rerun's, the first run's rate is recorded beside it, and the rerun must give the same statuses;
* the ``aiter-triton`` backend on one revision's cases (:data:`AITER_TRITON`), where amd-aiter imports;
* the DCP replay (:func:`conformance.dcp_numbers.measure`) of 0.34.0, every route at dcp 2, 4 and 8,
  simulated ranks, clean and with the ``drop-rank-lse`` fault;
* vllm-0.28's drop-in module through ``python -m conformance.vllm_shim --device`` on 0.28.0 and 0.27.1
  (:func:`run_drop_in`): its numeric part, built with the release's own test utilities, on the GPU;

and writes ``--out`` (docs/results/gpu-acceptance.json): the commit, the digest of every source file on
the GPU path (:data:`GPU_PATH`, the one list; tests/test_gpu_acceptance_record.py recomputes it on the
CPU and fails when the path changed since the recorded run), each release's statuses against the ones
its cases' classes predict (:mod:`conformance.expect`), cases per minute, kernel and reference time
(device time by CUDA events, the fastest of 3 runs after the one that gave the result, so no compile is
counted: :func:`conformance.backends.vllm_replay.kernel_ms`),
the DCP verdicts, and the acceptance checks of issue 25.  Exit 0 when every check holds, 1 otherwise.

The release trees come from the mla-spec cache ($XDG_CACHE_HOME/mla-spec/vllm/<release>/tree); a GPU
machine without internet gets them from ``python -m benchmarks.gpu --pack DIR`` run where the cache is
filled (docs/how-to/run-the-gpu-replay.md gives the whole device recipe).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "docs" / "results" / "gpu-acceptance.json"
RERUN = "python -m benchmarks.gpu (on one H200; docs/how-to/run-the-gpu-replay.md, 'The GPU acceptance run')"

# Every file whose change could alter a GPU result (globs from the repository root): the backends, the
# runner and its verdicts, conform and the pytest plugin that drive them, the executing harness (child,
# configs, stubs, recorder), the real-code loader, the DCP replay and merge, the model's reference
# numerics, routes, failures and registry data the recorder and the expectations read, the committed
# cases this run replays, and this script.
GPU_PATH: tuple[str, ...] = (
    "benchmarks/gpu.py",
    "conformance/__init__.py",
    "conformance/backends/*.py",
    "conformance/cli/conform.py",
    "conformance/dcp_merge.py",
    "conformance/dcp_numbers.py",
    "conformance/dcp_replay.py",
    "conformance/drop_in.py",
    "conformance/expect.py",
    "conformance/pytest_plugin.py",
    "conformance/runner.py",
    "conformance/vllm_module.py",
    "conformance/vllm_shim.py",
    "spec/realcode/__init__.py",
    "spec/realcode/extract.py",
    "spec/realcode/sandbox.py",
    "spec/realcode/source.py",
    "spec/realcode/executed/**/*.py",
    "mla_model/case.py",
    "mla_model/decision.py",
    "mla_model/derived.py",
    "mla_model/emulation.py",
    "mla_model/failures.py",
    "mla_model/logic.py",
    "mla_model/reference.py",
    "mla_model/registry.py",
    "mla_model/route.py",
    "mla_model/shape.py",
    "mla_model/revisions/*.py",
    "mla_model/registry_data/**/*",
    "tests/generated/vllm_027/cases.jsonl",
    "tests/generated/vllm_028/cases.jsonl",
    "tests/generated/vllm_034/cases.jsonl",
)
RELEASES = (("0.27.1", "vllm_027"), ("0.28.0", "vllm_028"), ("0.34.0", "vllm_034"))
AITER_TRITON = "vllm_028"
DCP_RELEASE, DCP_SIZES = "0.34.0", (2, 4, 8)
DCP_KV_LEN, DCP_BLOCK = 256, 16
DROP_IN = ("vllm-0.28", "vllm_028", ("0.28.0", "0.27.1"))  # the module, its cases, the releases it runs on
GOAL_CASES_PER_MINUTE = 1000
# 0.27.1's fp8 -> Gluon counterexamples: Gluon reads the fp8 cache with kv_scale=1.0 (sources §41).
FP8_GLUON_CAUSE = "gluon_kv_scale"


# --- the GPU path's digest ------------------------------------------------------------------------


def gpu_path_files(root: Path = ROOT, patterns: tuple[str, ...] = GPU_PATH) -> list[str]:
    """The files :data:`GPU_PATH` names under ``root``, sorted, without caches."""
    found = {
        p.relative_to(root).as_posix()
        for pattern in patterns
        for p in root.glob(pattern)
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    return sorted(found)


def gpu_path_digest(root: Path = ROOT, patterns: tuple[str, ...] = GPU_PATH) -> dict[str, Any]:
    """sha256 of each GPU-path file and one digest over the (path, sha256) list."""
    files = {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in gpu_path_files(root, patterns)}
    whole = hashlib.sha256("".join(f"{f} {h}\n" for f, h in files.items()).encode()).hexdigest()
    return {"digest": whole, "files": files}


def changed_files(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """The files added, removed or edited between two ``files`` maps."""
    return sorted(f for f in set(recorded) | set(now) if recorded.get(f) != now.get(f))


# --- the runs -------------------------------------------------------------------------------------


def conform(backend: str, cases: Path, out: Path, device: str, vllm: str | None = None) -> dict[str, Any]:
    """One ``conform`` run (judged by its cases' predictions, as here): its JSON summary, exit status and
    wall time."""
    cmd = [sys.executable, "-m", "conformance.cli.conform", "--backend", backend, "--cases", str(cases)]
    cmd += ["--out", str(out), "--device", device, "--format", "json"]
    if vllm:
        cmd += ["--vllm", vllm]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.time() - started
    try:
        summary = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        summary = {"error": f"conform exited {proc.returncode}: {tail}"}
    return {"summary": summary, "exit": proc.returncode, "wall_s": round(wall, 2)}


def judged_release(cases_file: Path, results: Path) -> dict[str, Any]:
    """The run's statuses against the predicted ones: counts, surprises, and the fp8 -> Gluon cases."""
    from conformance.backends import case_key
    from conformance.expect import judge
    from conformance.runner import ResultsLog
    from mla_model.case import read_cases

    cases = read_cases(cases_file)
    latest = {r["key"]: r for r in ResultsLog(results).records()} if results.exists() else {}
    records = judge([latest[k] for k in (case_key(c) for c in cases) if k in latest], cases)
    by_key = {case_key(c): c for c in cases}
    counts: dict[str, dict[str, int]] = {}
    for r in records:
        row = counts.setdefault(r["expected"], {})
        row[r["status"]] = row.get(r["status"], 0) + 1
    fp8_gluon = [r for r in records if by_key[r["key"]].expected_outcome.get("cause") == FP8_GLUON_CAUSE]
    return {
        "cases": len(cases),
        "results": len(records),
        "statuses": _count(r["status"] for r in records),
        "expected_vs_got": counts,
        "as_expected": sum(r["verdict"] == "expected" for r in records),
        "surprises": [
            {k: r.get(k) for k in ("key", "status", "expected", "detail")}
            for r in records
            if r["verdict"] in ("surprise", "error")
        ],
        "skipped": [{k: r.get(k) for k in ("key", "detail")} for r in records if r["verdict"] == "unknown"],
        "errors": sum(r["status"] == "ERROR" for r in records),
        "fp8_gluon": {"cases": len(fp8_gluon), "passed": sum(r["status"] == "PASS" for r in fp8_gluon)},
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def run_dcp(device: str) -> dict[str, Any]:
    from conformance.dcp_numbers import measure

    started = time.time()
    rows = measure([DCP_RELEASE], list(DCP_SIZES), "simulated", device, DCP_KV_LEN, "aiter-0.1.20", DCP_BLOCK)
    return {
        "release": DCP_RELEASE,
        "ranks": "simulated",
        "kv_len": DCP_KV_LEN,
        "block_size": DCP_BLOCK,
        "wall_s": round(time.time() - started, 2),
        "rows": rows,
    }


def run_drop_in(device: str, workdir: Path) -> dict[str, Any]:
    """vllm-0.28's drop-in module (rendered from its committed cases, as ``cases --style vllm`` writes it)
    through ``python -m conformance.vllm_shim --device DEVICE`` on 0.28.0 and on 0.27.1: its numeric part
    on the stand-in kernels there, and the numeric cases 0.27's model sends into the fp8 -> Gluon class.
    Each run's output is kept in ``WORKDIR/drop-in-RELEASE.log``."""
    from conformance.vllm_module import numeric_cases, render_vllm_module
    from mla_model.case import expected_outcome, read_cases
    from mla_model.registry import load_registry
    from mla_model.revisions import get_revision

    revision, folder, releases = DROP_IN
    cases = read_cases(ROOT / "tests" / "generated" / folder / "cases.jsonl")
    module = workdir / "test_rocm_aiter_mla_mlaspec_routing.py"
    module.write_text(render_vllm_module(revision, cases[0].registry, cases))
    before = get_revision("vllm-0.27")
    wrong = sorted(
        f"test_numeric_matches_float32_reference[{c.id}]"
        for c in numeric_cases(revision, cases)
        if expected_outcome(before, load_registry(c.registry), c.shape).get("cause") == FP8_GLUON_CAUSE
    )
    record: dict[str, Any] = {"revision": revision, "fp8_gluon_on_0.27.1": wrong}
    for release in releases:
        started = time.time()
        argv = ["--vllm", release, "--device", device, module.name, "-q", "--tb=line", "-rfp"]
        proc = subprocess.run(
            [sys.executable, "-m", "conformance.vllm_shim", *argv],
            capture_output=True,
            text=True,
            cwd=workdir,
        )
        ids = {
            kind: sorted(
                line.split("::", 1)[1].split(" - ", 1)[0].strip()
                for line in proc.stdout.splitlines()
                if line.startswith(kind)
            )
            for kind in ("PASSED", "FAILED")
        }
        (workdir / f"drop-in-{release}.log").write_text(proc.stdout + proc.stderr)
        record[release] = {
            "exit": proc.returncode,
            "passed": len(ids["PASSED"]),
            "failed": len(ids["FAILED"]),
            "numeric_passed": [i for i in ids["PASSED"] if i.startswith("test_numeric")],
            "numeric_failed": [i for i in ids["FAILED"] if i.startswith("test_numeric")],
            "summary": ((proc.stdout + proc.stderr).strip().splitlines() or [""])[-1],
            "wall_s": round(time.time() - started, 2),
        }
    return record


def _commit(given: str | None) -> str | None:
    if given:
        return given
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    except OSError:
        return None
    return out.stdout.strip() or None


def _device_name(device: str) -> str:
    try:
        import torch

        if device.startswith("cuda") and torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}"
        return f"{device}; torch {torch.__version__}"
    except Exception as e:  # noqa: BLE001 - only the record's label
        return f"{device} ({type(e).__name__})"


def acceptance(record: dict[str, Any]) -> dict[str, bool]:
    """Issue 25's acceptance, each a check of the record."""
    vllm = record["vllm"]
    timing = record["vllm_timing"]
    dcp_rows = record["dcp"]["rows"]
    drop_in = record["drop_in"]
    return {
        "0.27.1: no fp8 -> Gluon counterexample PASSes": vllm["0.27.1"]["fp8_gluon"]["passed"] == 0
        and vllm["0.27.1"]["fp8_gluon"]["cases"] > 0,
        "0.28.0: every status the expected one (no surprise, no SKIP)": not vllm["0.28.0"]["surprises"]
        and not vllm["0.28.0"]["skipped"]
        and vllm["0.28.0"]["results"] == vllm["0.28.0"]["cases"],
        "0.34.0: every status the expected one (no surprise, no SKIP)": not vllm["0.34.0"]["surprises"]
        and not vllm["0.34.0"]["skipped"]
        and vllm["0.34.0"]["results"] == vllm["0.34.0"]["cases"],
        "0 ERROR": sum(v["errors"] for v in vllm.values()) + record["aiter_triton"].get("errors", 0) == 0,
        "DCP: every clean run PASSes": bool(dcp_rows) and all(r["clean"] == "PASS" for r in dcp_rows),
        "DCP: every faulty run is a MISMATCH": bool(dcp_rows)
        and all(r["fault"] == "MISMATCH" for r in dcp_rows),
        f"vllm backend >= {GOAL_CASES_PER_MINUTE} cases/min (a rerun: Triton kernels compiled)": (
            timing["cases_per_minute"] or 0
        )
        >= GOAL_CASES_PER_MINUTE,
        "a rerun gives the same statuses": all(v["rerun"]["same_statuses"] for v in vllm.values()),
        "kernel time <= reference time (medians)": timing["median_kernel_ms"] is not None
        and timing["median_kernel_ms"] <= timing["median_reference_ms"],
        "drop-in module: passes on 0.28.0, its numeric part included": drop_in["0.28.0"]["exit"] == 0
        and bool(drop_in["0.28.0"]["numeric_passed"])
        and not drop_in["0.28.0"]["numeric_failed"],
        "drop-in module: 0.27.1's fp8 -> Gluon numeric case fails": bool(drop_in["fp8_gluon_on_0.27.1"])
        and set(drop_in["fp8_gluon_on_0.27.1"]) <= set(drop_in["0.27.1"]["numeric_failed"]),
    }


def run(device: str, commit: str | None, workdir: Path) -> dict[str, Any]:
    started = time.time()
    record: dict[str, Any] = {
        "command": "python -m benchmarks.gpu",
        "commit": _commit(commit),
        "device": _device_name(device),
        "gpu_path": gpu_path_digest(),
        "triton_cache_files_at_start": _triton_cache_files(),  # 0: every Triton kernel compiled in this run
        "vllm": {},
    }
    spans = {"first": 0.0, "rerun": 0.0}
    cases_run, kernel, reference = 0, [], []
    for release, folder in RELEASES:
        cases_file = ROOT / "tests" / "generated" / folder / "cases.jsonl"
        out = workdir / f"vllm-{release}.jsonl"
        ran = conform("vllm", cases_file, out, device, release)
        # The same cases again into a fresh file, the release's Triton kernels (and the stand-in's) now
        # compiled: the throughput of every run after a machine's first, and a check that a rerun gives
        # the same statuses.
        again = conform("vllm", cases_file, workdir / f"vllm-{release}-rerun.jsonl", device, release)
        summary = ran["summary"]
        judged = judged_release(cases_file, out)
        rejudged = judged_release(cases_file, workdir / f"vllm-{release}-rerun.jsonl")
        judged.update(
            cases_per_minute=summary.get("cases_per_minute"),
            median_kernel_ms=summary.get("median_kernel_ms"),
            median_reference_ms=summary.get("median_reference_ms"),
            wall_s=ran["wall_s"],
            conform_exit=ran["exit"],
            rerun={
                "cases_per_minute": again["summary"].get("cases_per_minute"),
                "wall_s": again["wall_s"],
                "conform_exit": again["exit"],
                "same_statuses": rejudged["statuses"] == judged["statuses"]
                and rejudged["surprises"] == judged["surprises"],
            },
        )
        for name, run_ in (("first run", ran), ("rerun", again)):
            if "error" in run_["summary"]:
                judged[f"error ({name})"] = run_["summary"]["error"]
        record["vllm"][release] = judged
        rate, rerun_rate = summary.get("cases_per_minute") or 0, again["summary"].get("cases_per_minute") or 0
        print(
            f"vllm {release}: {judged['statuses']} ({len(judged['surprises'])} surprise(s)), "
            f"{rate:.0f} cases/min, rerun {rerun_rate:.0f} cases/min",
            flush=True,
        )
        if rate and rerun_rate:
            spans["first"] += judged["results"] / rate
            spans["rerun"] += judged["results"] / rerun_rate
            cases_run += judged["results"]
        timed = [r for r in _records(out) if "t_kernel_ms" in r and "t_reference_ms" in r]
        kernel += [r["t_kernel_ms"] for r in timed]
        reference += [r["t_reference_ms"] for r in timed]
    record["vllm_timing"] = {
        "cases": cases_run,
        "cases_per_minute": round(cases_run / spans["rerun"], 1) if spans["rerun"] else None,
        "cases_per_minute_first_run": round(cases_run / spans["first"], 1) if spans["first"] else None,
        "median_kernel_ms": _median(kernel),
        "median_reference_ms": _median(reference),
    }
    cases_file = ROOT / "tests" / "generated" / AITER_TRITON / "cases.jsonl"
    out = workdir / "aiter-triton.jsonl"
    ran = conform("aiter-triton", cases_file, out, device)
    triton = judged_release(cases_file, out)
    triton.update(
        cases_file=cases_file.relative_to(ROOT).as_posix(),
        cases_per_minute=ran["summary"].get("cases_per_minute"),
        median_kernel_ms=ran["summary"].get("median_kernel_ms"),
        median_reference_ms=ran["summary"].get("median_reference_ms"),
        wall_s=ran["wall_s"],
    )
    record["aiter_triton"] = triton
    print(f"aiter-triton {AITER_TRITON}: {triton['statuses']}, {ran['wall_s']} s", flush=True)
    record["dcp"] = run_dcp(device)
    for r in record["dcp"]["rows"]:
        print(f"dcp {r['dcp']} {r['route']}: taken {r['taken']}, clean {r['clean']}, fault {r['fault']}")
    record["drop_in"] = run_drop_in(device, workdir)
    for release in DROP_IN[2]:
        got = record["drop_in"][release]
        print(f"drop-in on {release}: {got['summary']}; numeric failed {got['numeric_failed']}", flush=True)
    record["acceptance"] = acceptance(record)
    record["met"] = all(record["acceptance"].values())
    record["wall_s"] = round(time.time() - started, 1)
    return record


def _triton_cache_files() -> int:
    folder = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def _records(path: Path) -> list[dict[str, Any]]:
    from conformance.runner import ResultsLog

    return list(ResultsLog(path).records()) if path.exists() else []


def _median(values: list[float]) -> float | None:
    import statistics

    return round(statistics.median(values), 4) if values else None


# --- carrying the release trees -------------------------------------------------------------------

# The Python files of a vLLM release tree the harness, its stubs and the DCP merge read (globs; every
# ``vllm/...py`` path they name, and the speculators' per-method configs, lie in them; the rest of the tree
# is never opened: measured with an open() audit hook over the CPU runs of the three releases).
TREE_PARTS = (
    "tests/v1/attention/utils.py",
    "vllm/*.py",
    "vllm/config/*.py",
    "vllm/distributed/device_communicators/*.py",
    "vllm/model_executor/warmup/*.py",
    "vllm/triton_utils/*.py",
    "vllm/utils/*.py",
    "vllm/v1/*.py",
    "vllm/v1/attention/**/*.py",
    "vllm/v1/worker/gpu/spec_decode/**/*.py",
)


def pack(dest: Path, releases: tuple[str, ...] = tuple(r for r, _ in RELEASES)) -> Path:
    """``dest``/vllm-trees.tar.xz: the cached trees' Python sources of ``releases``, as XDG_CACHE_HOME
    expects them (``mla-spec/vllm/<release>/tree/...``); unpack with ``tar -C CACHE -xJf``."""
    from spec.realcode.source import cache_dir

    base = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "vllm-trees.tar.xz"
    with tarfile.open(target, "w:xz", preset=6) as tar:
        for release in releases:
            tree = base / release / "tree"
            if not tree.is_dir():
                raise SystemExit(
                    f"mla-spec: no cached tree for {release} at {tree}: run mla-spec audit --vllm {release}"
                )
            for p in sorted(
                {p for part in TREE_PARTS for p in tree.glob(part) if "__pycache__" not in p.parts}
            ):
                tar.add(p, arcname=f"mla-spec/vllm/{release}/tree/{p.relative_to(tree).as_posix()}")
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=RECORD)
    parser.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse HEAD)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the results files in this folder")
    parser.add_argument(
        "--pack", type=Path, default=None, metavar="DIR", help="write DIR/vllm-trees.tar.xz only"
    )
    args = parser.parse_args(argv)
    if args.pack is not None:
        print(pack(args.pack))
        return
    with tempfile.TemporaryDirectory(prefix="mla-gpu-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        record = run(args.device, args.commit, workdir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    for check, ok in record["acceptance"].items():
        print(f"{'ok  ' if ok else 'FAIL'} {check}")
    print(f"{args.out}: {record['wall_s']} s")
    sys.exit(0 if record["met"] else 1)


if __name__ == "__main__":
    main()
