"""A release file whose gate loops, recurses or computes a huge number is stopped within --timeout and is
UNKNOWN (exit 3), in check (lifting) and in bind (the bounded comparison): never a hang, never a pass."""

from __future__ import annotations

import time

import pytest

from tests.cli import run

pytestmark = pytest.mark.network  # the 0.28.0 release file, edited

ANCHOR = "        m = AiterMLAHelper._AITER_MIN_MLA_HEADS\n"
NEXT = "        if num_heads >= m or max_qo_len != 1:\n"  # the two lines start use_gluon_decode's body
RUNAWAYS = {
    "loop": "        while True:\n            pass\n",
    "huge-power": "        m = m + 0 * (3 ** (10 ** 12))\n",
    "huge-shift": "        m = m + 0 * (1 << (10 ** 12))\n",
    "huge-repeat": "        m = m + 0 * len('A' * (10 ** 12))\n",
    "huge-range": "        m = m + 0 * len(list(range(10 ** 12)))\n",
    "recursion": "        AiterMLAHelper.use_gluon_decode(num_heads, max_qo_len, kv_cache_dtype)\n",
}


@pytest.fixture
def runaway_file(tmp_path):
    from spec.realcode.source import fetch_release

    text = fetch_release("0.28.0").read_text()
    assert text.count(ANCHOR + NEXT) == 1

    def make(kind: str):
        path = tmp_path / f"{kind}.py"
        path.write_text(text.replace(ANCHOR + NEXT, ANCHOR + RUNAWAYS[kind] + NEXT))
        return path

    return make


@pytest.mark.parametrize("kind", sorted(RUNAWAYS))
def test_check_stops_a_runaway_gate_and_reports_unknown(runaway_file, kind):
    start = time.perf_counter()
    r = run(
        "check", runaway_file(kind), "--registry", "aiter-0.1.20", "--invariant", "total", "--timeout", "2"
    )
    assert time.perf_counter() - start < 60
    assert r.returncode == 3, r.stdout + r.stderr
    flat = " ".join(r.stdout.split())
    assert "UNKNOWN" in flat
    assert {
        "loop": "ran past the 2 s limit",
        "recursion": "recurses past Python's limit",
        "huge-repeat": "repeat a str 1000000000000 times, past 1048576 items",
        "huge-range": "a range of 1000000000000 items, past 1048576",
    }.get(kind, "a number past 65536 bits") in flat


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
def test_bind_stops_a_looping_gate_in_the_bounded_comparison_and_exits_3(runaway_file):
    r = run(
        "bind", "--vllm", runaway_file("loop"), "--revision", "vllm-0.28", "--shapes", "0", "--timeout", "2"
    )
    assert r.returncode == 3, r.stdout + r.stderr
    flat = " ".join(r.stdout.split())
    assert "use_gluon_decode (bounded):" in flat and "ran past the 2 s limit" in flat


def test_plain_powers_repetitions_and_ranges_in_the_gates_still_compute():
    from spec.realcode.interpreter import MAX_INT_BITS, MAX_SEQUENCE, bounded_mul, bounded_pow, bounded_range
    from spec.realcode.sandbox import GateRunaway

    assert bounded_pow(2, 10) == 1024 and bounded_pow(576, -0.5) == 576**-0.5
    assert (
        bounded_mul("ab", 3) == "ababab" and bounded_mul(3, 4) == 12 and len(bounded_range(MAX_SEQUENCE)) > 0
    )
    for runaway in (lambda: bounded_pow(2, MAX_INT_BITS + 1), lambda: bounded_mul([0], MAX_SEQUENCE + 1)):
        with pytest.raises(GateRunaway):
            runaway()


def test_audit_stops_a_looping_gate_within_its_timeout_too(runaway_file):
    start = time.perf_counter()
    r = run("audit", runaway_file("loop"), "--executed", "0", "--invariant", "total", "--timeout", "2")
    assert time.perf_counter() - start < 30
    assert r.returncode == 3, r.stdout + r.stderr
