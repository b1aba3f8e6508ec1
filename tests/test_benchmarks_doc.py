"""docs/reference/benchmarks.md is what benchmarks/run.py measured, and what it measured still holds.

The page's generated part must be the script's rendering of the stored results
(docs/reference/results/benchmarks.json), so no figure on it is typed by hand.  Timings are compared as
a ratio of two measured in the same run (the calibration pair: the proofs of one revision against the
numpy interpretation of a table of random shapes), never as seconds, so a slower or busier machine passes
and a change that makes one side several times slower than the other fails.
"""

from __future__ import annotations

import json

from benchmarks import run as bench

# How far the calibration ratio may move before the stored figures are stale: more than machine noise
# (two CPU timings on a shared two-core machine), less than the several-fold change a regression makes.
TOLERANCE = 3.0


def stored() -> dict:
    return json.loads(bench.RESULTS.read_text())


def test_the_page_is_the_scripts_rendering_of_the_stored_results():
    assert bench.documented_block() == bench.render(stored()), (
        "docs/reference/benchmarks.md differs from its results: run python -m benchmarks.run --write"
    )


def test_every_goal_has_a_measured_figure():
    assert set(bench.headline(stored())) == set(bench.GOALS)


def test_the_stored_ratios_are_the_stored_medians():
    c = stored()["check_vs_vllm_tests"]
    assert c["check_over_vllm_tests"] == c["check_wall_s"] / c["vllm_tests_wall_s"]
    cal = stored()["calibration"]
    assert cal["ratio"] == cal["proofs_cpu_s"] / cal["numpy_cpu_s"]
    h = stored()["hook"]
    assert h["check_file_over_check"] == h["check_file_wall_s"] / h["check_wall_s"]


def test_the_calibration_ratio_still_holds():
    then = stored()["calibration"]["ratio"]
    now = bench.calibration(repeat=3)["ratio"]
    assert then / TOLERANCE <= now <= then * TOLERANCE, (
        f"proofs / numpy CPU time is {now:.2f} now, {then:.2f} on the page: "
        "re-measure with python -m benchmarks.run --write"
    )
