"""What the prover must find: the three #51011 faults before the fix, none of them after.

Each check asserts behaviour a maintainer would recognise from the PR: the
minimal shapes, the route they take and what breaks.
"""

from __future__ import annotations

import json

import pytest
import z3

from mla_model.registry import REGISTRY_IDS
from spec.proof.invariants import INVARIANT_BY_ID, INVARIANTS
from spec.proof.prover import PROVED, UNKNOWN, VIOLATED, check
from tests.cli import run

PRE_FIX = ("vllm-0.27", "main-pre-51011")


def result(revision, registry, invariant, **kw):
    return check(revision, registry, INVARIANT_BY_ID[invariant], **kw)


@pytest.mark.parametrize("registry", REGISTRY_IDS)
@pytest.mark.parametrize("revision", PRE_FIX)
def test_fp8_reaches_gluon_before_the_fix_at_divisor_heads_qlen_1_on_gfx950(revision, registry):
    r = result(revision, registry, "fp8-never-reaches-gluon")
    assert r.verdict == VIOLATED
    gfx950 = [c for c in r.counterexamples if c.shape.arch == "gfx950" and c.route["path"] == "gluon_decode"]
    assert gfx950, r.counterexamples
    s = gfx950[0].shape
    assert s.kv_cache_dtype == "fp8" and 16 % s.num_heads == 0 and s.max_qo_len == 1
    assert "kv_scale=1.0" in gfx950[0].symptom


@pytest.mark.parametrize("revision", PRE_FIX)
def test_whitelist_sizing_breaks_for_dspark_and_eagle_drafters_before_the_fix(revision):
    r = result(revision, "aiter-0.1.19", "metadata-covers-qlen")
    assert r.verdict == VIOLATED
    methods = {c.shape.spec_method for c in r.counterexamples}
    assert methods & {"dflash", "dspark"} and methods & {"eagle", "eagle3", "draft_model", "ngram"}
    assert not methods & {"mtp", "deepseek_mtp"}  # the whitelisted drafters are sized correctly
    for c in r.counterexamples:
        assert c.shape.max_qo_len > c.route["mtp_decode_qlen"] == 1


@pytest.mark.parametrize("revision", PRE_FIX)
def test_block_n_keyerror_before_the_fix_is_16_padded_heads_times_qlen_5(revision):
    r = result(revision, "aiter-0.1.19", "block-n-key-exists")
    assert r.verdict == VIOLATED
    first = r.counterexamples[0]
    assert (first.route["request"]["padded_heads"], first.shape.max_qo_len) == (16, 5)
    assert first.route["path"] == "asm_nonpersistent" and "get_block_n_fp8[16*5=80]" in first.symptom


@pytest.mark.parametrize("registry", REGISTRY_IDS)
def test_every_property_pr_51011_set_out_to_establish_is_proved_on_0_28(registry):
    for inv in INVARIANTS:
        if inv.pr_51011:
            assert result("vllm-0.28", registry, inv.id).verdict == PROVED, inv.id


@pytest.mark.parametrize("registry", REGISTRY_IDS)
def test_0_34_keeps_the_fix(registry):
    for inv in INVARIANTS:
        if inv.pr_51011:
            assert result("vllm-0.34", registry, inv.id).verdict == PROVED, inv.id


def test_gfx942_verify_past_qlen_4_has_no_asm_kernel_on_0_28_and_0_34_routes_it_to_triton():
    r = result("vllm-0.28", "aiter-0.1.20", "kernel-exists")
    gfx942 = [c for c in r.counterexamples if c.shape.arch == "gfx942" and c.shape.kv_cache_dtype == "auto"]
    assert gfx942 and gfx942[0].shape.max_qo_len == 5 and gfx942[0].shape.num_heads == 16
    r34 = result("vllm-0.34", "aiter-0.1.20", "kernel-exists")
    # at DCP 1 (under DCP the bundled tables lack gfx942's bf16 LSE kernels: dcp-lse-kernel)
    dcp1 = [c for c in r34.counterexamples if c.shape.dcp_world_size == 1]
    assert not [c for c in dcp1 if c.shape.arch == "gfx942" and c.shape.kv_cache_dtype == "auto"]


def test_every_counterexample_is_valid_and_violating_when_rerun_in_python():
    from mla_model.decision import decide
    from mla_model.registry import load_registry
    from mla_model.revisions import get_revision

    for revision in ("vllm-0.27", "vllm-0.28", "vllm-0.34"):
        for inv in INVARIANTS:
            r = check(revision, "aiter-0.1.19", inv, max_classes=3)
            rev, reg = get_revision(revision), load_registry("aiter-0.1.19")
            for c in r.counterexamples:
                assert rev.is_valid(c.shape, reg)
                assert not inv.holds(decide(rev, reg, c.shape))
                assert c.route == decide(rev, reg, c.shape).route.to_json()


def test_max_classes_cuts_enumeration_and_says_so():
    r = result("vllm-0.27", "aiter-0.1.19", "total", max_classes=2)
    assert r.verdict == VIOLATED and len(r.counterexamples) == 2 and not r.complete


@pytest.fixture
def solver_gives_up():
    """z3 answers unknown to every query: a resource limit of one step, z3's deterministic timeout.

    A 1 ms wall-clock timeout is not reliable (a fast machine can find a model in time); the resource
    limit runs out on every machine, in this process and in the worker a command forks.
    """
    before = z3.get_param("rlimit")
    z3.set_param("rlimit", 1)
    yield
    z3.set_param("rlimit", before)


def test_a_timeout_is_unknown_never_proved(solver_gives_up):
    """'total' on 0.34 is violated; when z3 gives up before it can say so, the verdict is exactly UNKNOWN."""
    r = result("vllm-0.34", "aiter-0.1.20", "total")
    assert r.verdict == UNKNOWN, r.verdict
    assert r.reason.startswith("z3: ") and r.reason != "z3: "
    assert not r.counterexamples and r.classes == 0 and not r.complete


def test_an_unknown_verdict_exits_3(solver_gives_up):
    out = run(
        "check",
        "--revision",
        "vllm-0.34",
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "total",
        "--format",
        "json",
    )
    assert out.returncode == 3, out.stdout + out.stderr
    (r,) = json.loads(out.stdout)["results"]
    assert r["verdict"] == "UNKNOWN" and r["reason"] and not r["counterexamples"]


@pytest.mark.parametrize(
    "revision_id",
    [
        "vllm-0.27",
        "main-pre-51011",
        "vllm-0.28",
        "vllm-0.29",
        "vllm-0.30",
        "vllm-0.31",
        "vllm-0.33",
        "vllm-0.34",
    ],
)
def test_the_gluon_kv_bound_is_proved_exactly_where_vllm_checks_the_cache_size(revision_id, registry):
    """vLLM refuses Gluon above 2 GiB per layer from 0.31.0 on; earlier revisions let it read out of range."""
    r = result(revision_id, registry, "gluon-kv-in-bounds")
    guarded = revision_id in ("vllm-0.31", "vllm-0.33", "vllm-0.34")
    assert r.verdict == (PROVED if guarded else VIOLATED)
    assert all(c.shape.kv_cache_bytes > 2**31 for c in r.counterexamples)


def test_kimi_k3_tp8_fp8_lands_on_the_known_wrong_non_persistent_path_before_51011_only():
    """The GSM8K measurement of #51011: 12 heads per rank (not a divisor of 16: never Gluon decode), fp8 KV,
    gfx950, a one-token decode step: padded ASM without persistent metadata before the fix."""
    from mla_model.decision import decide
    from mla_model.registry import load_registry
    from mla_model.revisions import REVISIONS
    from mla_model.shape import Shape
    from spec.proof.invariants import INVARIANT_BY_ID

    inv, reg = INVARIANT_BY_ID["no-known-wrong-kernel"], load_registry("aiter-0.1.20")
    kimi = Shape(arch="gfx950", kv_cache_dtype="fp8", num_heads=12, max_qo_len=1)
    before, after = (decide(REVISIONS[r], reg, kimi) for r in ("main-pre-51011", "vllm-0.28"))
    assert before.route.path == "asm_nonpersistent" and not inv.holds(before)
    assert "non-persistent fp8 ASM decode" in inv.describe(before, reg)
    assert after.route.path == "asm_persistent" and inv.holds(after)


@pytest.mark.slow
def test_the_full_check_reports_what_each_revision_alone_reports(monkeypatch):
    """The default check runs neighbouring revisions in chains, each starting from the last one's smallest
    counterexamples (spec.proof.check_all); a revision checked alone starts from nothing.  The guesses
    change how long it takes, never what it reports: every verdict, class count and smallest shape."""
    from mla_model.revisions import REVISIONS
    from spec.proof.check_all import check_all

    invariants = [inv.id for inv in INVARIANTS]
    monkeypatch.setattr("spec.proof.check_all.os.cpu_count", lambda: 2)  # chains, whatever the machine

    def report(results):
        return [{k: v for k, v in r.to_json().items() if k != "seconds"} for r in results]

    together = report(check_all(list(REVISIONS), REGISTRY_IDS, invariants, None, 30.0))
    alone = [
        row for rev in REVISIONS for row in report(check_all([rev], REGISTRY_IDS, invariants, None, 30.0))
    ]
    assert together == alone
