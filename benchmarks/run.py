"""Benchmarks behind docs/benchmarks.md: ``python -m benchmarks.run [--sweep]``.

* the full default ``mla-spec check`` (every revision x registry x invariant,
  counterexample classes included), wall time of the installed command,
  median of 5 runs;
* the numpy interpretation: shapes per second for route + AITER lookup + all
  invariants on a table of 10^6 random shapes, per revision;
* with ``--sweep``: the exhaustive box sweep per (revision, registry);
* with ``--realcode 0.27.1 0.28.0 ...``: per release, the time to lift all its
  gates into z3 and the real-function calls per second of the bounded check.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from mla_model.decision import decide
from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS
from mla_model.shape import FIELDS
from mla_model.vectorised import shape_arrays
from spec.proof.invariants import INVARIANTS


def random_columns(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """n random shapes drawn from each field's box, as a column table."""
    rng = np.random.default_rng(seed)
    cols = {}
    for spec in FIELDS:
        box = spec.box
        if spec.kind == "enum":
            cols[spec.name] = rng.integers(0, len(spec.values), n).astype(np.int8)
        elif spec.kind == "bool":
            cols[spec.name] = rng.integers(0, 2, n).astype(bool)
        else:
            cols[spec.name] = rng.choice(np.array(box, dtype=np.int64), n)
    return cols


def numpy_throughput(n: int = 1_000_000) -> dict[str, float]:
    view = shape_arrays(random_columns(n))
    registry = load_registry(REGISTRY_IDS[-1])
    out = {}
    for rid, revision in REVISIONS.items():
        start = time.perf_counter()
        d = decide(revision, registry, view)
        for inv in INVARIANTS:
            np.asarray(inv.holds(d))
        revision.is_valid(view, registry)
        out[rid] = n / (time.perf_counter() - start)
    return out


def check_wall_time(runs: int = 5) -> list[float]:
    exe = shutil.which("mla-spec")
    cmd = [exe, "check"] if exe else [sys.executable, "-m", "conformance", "check"]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time the exhaustive box sweeps")
    parser.add_argument(
        "--realcode", nargs="*", default=[], metavar="RELEASE", help="also time lifting and binding"
    )
    args = parser.parse_args()
    for release in args.realcode:
        from spec.realcode.bind import bounded_comparison, default_model
        from spec.realcode.revision import RealGates
        from spec.realcode.source import resolve

        source = resolve(release)
        start = time.perf_counter()
        lifted = RealGates(source, lifting=True).lift()
        seconds = time.perf_counter() - start
        rows = bounded_comparison(RealGates(source), default_model(source.label) or "vllm-0.34")
        rates = {r.function: r.real_calls_per_second for r in rows if r.checked}
        print(
            f"{source.label}: lifting {seconds:.2f} s ({lifted['paths']} paths); bounded real calls/s: "
            + ", ".join(f"{k} {v / 1e6:.2f} M" for k, v in rates.items())
        )
    times = check_wall_time()
    print(
        f"mla-spec check (default, all revisions x registries x invariants): "
        f"median {statistics.median(times):.2f} s of {[round(t, 2) for t in times]}"
    )
    for rid, rate in numpy_throughput().items():
        print(
            f"numpy interpretation, {rid}: {rate / 1e6:.2f} M shapes/s "
            "(route + lookup + 10 invariants + validity)"
        )
    if args.sweep:
        from spec.proof.bruteforce import sweep

        for rid in REVISIONS:
            for reg in REGISTRY_IDS:
                r = sweep(rid, reg, INVARIANTS)
                print(
                    f"box sweep {rid} x {reg}: {r.valid:,} valid of {r.shapes:,} shapes in {r.seconds:.1f} s "
                    f"({r.shapes / r.seconds / 1e6:.2f} M shapes/s)"
                )


if __name__ == "__main__":
    main()
