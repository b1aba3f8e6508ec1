"""Scales on the route (issue 13 items 1 and 3): which kernel leaves V without the cache's scale, and where
vLLM 0.34.0 multiplies it back (sources §57), in the model and in the executed release."""

from __future__ import annotations

import dataclasses

import pytest

from mla_model.decision import decide
from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.shape import Shape


def _verify(arch: str, qlen: int, **kw) -> Shape:
    return Shape(
        arch=arch,
        kv_cache_dtype="fp8",
        num_heads=16,
        max_qo_len=qlen,
        spec_method="mtp",
        num_spec_tokens=3,
        **kw,
    )


@pytest.mark.parametrize("registry", ["aiter-0.1.19", "aiter-0.1.20"])
def test_gfx942_fp8_verify_at_qlen_3_and_4_lands_on_the_kernel_that_drops_the_v_scale(registry):
    reg = load_registry(registry)
    for qlen, dropped in ((1, False), (2, False), (3, True), (4, True)):
        d = decide(get_revision("vllm-0.33"), reg, _verify("gfx942", qlen))
        assert d.route.path == "asm_persistent"
        assert bool(d.v_scale_dropped) == dropped, qlen
    assert not decide(get_revision("vllm-0.33"), reg, _verify("gfx950", 3)).v_scale_dropped
    assert not decide(get_revision("vllm-0.33"), reg, _verify("gfx942", 3, q_dtype="bf16")).v_scale_dropped


def test_only_0_34_rescales_and_only_where_its_probe_finds_the_drop():
    reg = load_registry("aiter-0.1.20")
    for revision in ("vllm-0.28", "vllm-0.31", "vllm-0.33"):
        assert not decide(get_revision(revision), reg, _verify("gfx942", 3)).route.v_scale_fix
    r034 = get_revision("vllm-0.34")
    assert [bool(decide(r034, reg, _verify("gfx942", q)).route.v_scale_fix) for q in (1, 2, 3, 4)] == [
        False,
        False,
        True,
        True,
    ]
    assert not decide(r034, reg, _verify("gfx950", 3)).route.v_scale_fix
    # The probe asks with an fp8 query whatever the step's: a bf16 query over the fp8 cache is rescaled too.
    assert decide(r034, reg, _verify("gfx942", 3, q_dtype="bf16")).route.v_scale_fix


@pytest.mark.network
@pytest.mark.slow
def test_the_executed_0_34_0_builder_sets_fp8_v_scale_fix_exactly_where_the_model_does():
    from spec.realcode.executed.harness import execute, release_code

    shapes = [
        *(_verify("gfx942", q) for q in (2, 3, 4)),
        _verify("gfx950", 3),
        _verify("gfx942", 3, q_dtype="bf16"),
        _verify("gfx942", 3, num_reqs=2),
    ]
    rows = execute(release_code("0.34.0"), shapes)
    reg, r034 = load_registry("aiter-0.1.20"), get_revision("vllm-0.34")
    seen = [row["decode"]["fp8_v_scale_fix"] for row in rows]
    assert seen == [bool(decide(r034, reg, s).route.v_scale_fix) for s in shapes]
    assert seen == [False, True, True, False, True, True]
    (old,) = execute(release_code("0.33.0"), [_verify("gfx942", 3)])
    assert old["decode"]["fp8_v_scale_fix"] is False  # no such field before 0.34.0


@pytest.mark.parametrize("registry", ["aiter-0.1.19", "aiter-0.1.20"])
def test_a_probe_that_asks_with_the_step_s_own_query_proves_kv_scale_applied_on_0_34(registry, monkeypatch):
    """The invariant can hold: 0.34.0's correction with the probe asking about the kernel the step really
    runs (its own query dtype) is proved; the shipped probe (always an fp8 query) is refuted."""
    from mla_model.logic import all_of
    from mla_model.registry import asm_lookup, v_scale_dropped
    from mla_model.revisions import dcp_era
    from mla_model.route import KernelRequest
    from spec.proof.invariants import INVARIANT_BY_ID
    from spec.proof.prover import PROVED, VIOLATED, check

    inv = INVARIANT_BY_ID["kv-scale-applied"]
    assert check("vllm-0.34", registry, inv).verdict == VIOLATED

    def own_query_probe(s, reg, m, fp8, persistent):
        q = s.max_qo_len
        req = KernelRequest(s.q_dtype, "fp8", m, q, True, True)
        found = v_scale_dropped(reg, s.arch, req, asm_lookup(reg, s.arch, req, s.num_reqs))
        return all_of(fp8, s.dcp_world_size == 1, persistent, q >= 2, q <= 4, found)

    monkeypatch.setattr(dcp_era, "fp8_v_scale_fix", own_query_probe)
    fixed = dataclasses.replace(get_revision("vllm-0.34"), id="vllm-0.34-own-query-probe")
    assert check(fixed, registry, inv).verdict == PROVED


@pytest.mark.parametrize(
    "revision, args, scales",
    [
        ("vllm-0.33", ("--arch", "gfx942", "--q-dtype", "fp8", "--max-qo-len", "3"), (True, True, 0)),
        ("vllm-0.34", ("--arch", "gfx942", "--q-dtype", "fp8", "--max-qo-len", "3"), (True, True, 1)),
        ("vllm-0.34", ("--arch", "gfx942", "--q-dtype", "bf16", "--max-qo-len", "3"), (True, True, 2)),
        (
            "vllm-0.27",
            ("--arch", "gfx950", "--q-dtype", "bf16", "--num-heads", "4", "--max-qo-len", "1"),
            None,
        ),
    ],
)
def test_explain_shows_the_scales_the_kernel_gets_and_applies(revision, args, scales):
    import json

    from spec.proof.invariants import INVARIANT_BY_ID
    from tests.cli import run

    shape = ("--kv-cache-dtype", "fp8", "--spec-method", "mtp", "--num-spec-tokens", "2")
    if "--num-heads" not in args:
        shape += ("--num-heads", "16")
    out = run("explain", "--revision", revision, *shape, *args, "--format", "json")
    invariants = json.loads(out.stdout)["invariants"]
    broken = any(not v["holds"] and INVARIANT_BY_ID[i].level != "warning" for i, v in invariants.items())
    assert out.returncode == (1 if broken else 0), out.stderr  # explain exits 1 on a broken invariant
    got = json.loads(out.stdout)["scales"]
    if scales is None:  # Gluon: no query scale, kv_scale=1.0 (0.27 sends 4 fp8 heads to Gluon decode)
        assert got == {
            "q_scale_passed": False,
            "kv_scale_passed": False,
            "kv_scale_on_scores": False,
            "kv_scale_on_v_times": 0,
        }
    else:
        q, kv, v = scales
        assert (got["q_scale_passed"], got["kv_scale_passed"], got["kv_scale_on_v_times"]) == (q, kv, v)


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_the_executed_releases_output_follows_the_v_scale_the_kernel_drops_and_0_34_puts_back():
    """The vllm backend: the release's real forward_mqa over a stand-in kernel that, as the registry lists
    it, reads V without the cache's scale.  0.33.0 returns that output (MISMATCH against the reference),
    0.34.0 multiplies it back (PASS), and 0.34.0 rescales a bf16 query's output the kernel already scaled
    (MISMATCH)."""
    from conformance.backends.vllm import REPLAY, judge
    from spec.realcode.executed.harness import execute, release_code

    options = {"replay": REPLAY, "device": "cpu", "kv_len": 16}
    fp8_q, bf16_q = _verify("gfx942", 3), _verify("gfx942", 3, q_dtype="bf16")
    (old,) = execute(release_code("0.33.0"), [fp8_q], options=options)
    new = execute(release_code("0.34.0"), [fp8_q, bf16_q], options=options)
    assert judge(old)["status"] == "MISMATCH"
    assert [judge(row)["status"] for row in new] == ["PASS", "MISMATCH"]
