"""The AITER registries resolve requests as AITER does (sources §31-§43, checked at the tags)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from mla_model.registry import NO_KERNEL, REGISTRY_IDS, KernelRow, asm_lookup, load_registry, resolved_kernel
from mla_model.route import KernelRequest
from spec.proof.strategies import shapes


def lookup(reg_id, arch, q, kv, m, qlen, persistent, num_reqs=1, causal=True):
    reg = load_registry(reg_id)
    req = KernelRequest(q, kv, m, qlen, persistent, causal)
    a = asm_lookup(reg, arch, req, num_reqs)
    name = resolved_kernel(reg, arch, req, a)
    return a, None if name == NO_KERNEL else name


def test_decode_row_counts_match_the_csv_tables():
    for reg_id, gfx942, gfx950 in (("aiter-0.1.19", 22, 41), ("aiter-0.1.20", 22, 64)):
        rows = load_registry(reg_id).kernels
        assert sum(r.arch == "gfx942" for r in rows) == gfx942
        assert sum(r.arch == "gfx950" for r in rows) == gfx950
        assert all(isinstance(r, KernelRow) for r in rows)


@pytest.mark.parametrize("reg_id", ["aiter-0.1.19", "aiter-0.1.20"])
def test_block_n_keyerror_sets_match_sources_32(reg_id):
    keys = set(load_registry(reg_id).block_n_keys)
    missing = lambda m: {q for q in range(1, 40) if m * q not in keys}  # noqa: E731
    assert missing(16) == {5, 6, 7} | set(range(9, 16)) | set(range(17, 24)) | set(range(25, 32)) | set(
        range(33, 40)
    )
    assert missing(64) == {3, 5, 7} | set(range(9, 40))
    assert missing(128) == set(range(5, 40))


def test_fp8_16_heads_past_qlen_4_folds_onto_the_qh32_kernel_on_gfx950_only():
    a, name = lookup("aiter-0.1.19", "gfx950", "fp8", "fp8", 16, 5, True)
    assert (a.gqa, a.qseqlen) == (32, 4) and name == "mla_a8w8_qh32_qseqlen4_gqaratio32_ps"
    a, name = lookup("aiter-0.1.19", "gfx942", "fp8", "fp8", 16, 5, True)
    assert a.check_error and name is None


def test_bf16_persistent_16_heads_on_gfx950_use_the_qh64_kernel_below_qlen_8():
    for qlen, key in ((1, (64, 1)), (7, (64, 1)), (8, (32, 4))):
        a, name = lookup("aiter-0.1.20", "gfx950", "bf16", "bf16", 16, qlen, True)
        assert (a.gqa, a.qseqlen) == key and name is not None


def test_large_bf16_batches_drop_the_persistent_schedule_on_gfx950():
    a, _ = lookup("aiter-0.1.19", "gfx950", "bf16", "bf16", 16, 1, True, num_reqs=32)
    assert not a.persistent
    a, _ = lookup("aiter-0.1.19", "gfx950", "bf16", "bf16", 16, 1, True, num_reqs=31)
    assert a.persistent


def test_fp8_gqa32_qlen3_lands_on_16x4_by_the_head_fold_then_by_aiter_4521():
    # 0.1.19: m=32 at qlen 3 is not native, folds to 16 heads, qlen 3 normalises to 4.
    # 0.1.20: m=32 is native on gfx950, and override 4 (aiter #4521) maps (32, 3) to (16, 4).
    for reg_id in ("aiter-0.1.19", "aiter-0.1.20"):
        a, name = lookup(reg_id, "gfx950", "fp8", "fp8", 32, 3, True)
        assert (a.gqa, a.qseqlen) == (16, 4) and name is not None
    a, name = lookup("aiter-0.1.19", "gfx950", "fp8", "fp8", 32, 2, True)
    assert (a.gqa, a.qseqlen) == (32, 2) and name is not None  # row removed by #4521 in 0.1.20
    a, name = lookup("aiter-0.1.20", "gfx950", "fp8", "fp8", 32, 2, True)
    assert (a.gqa, a.qseqlen) == (16, 4) and name is not None


def test_causal_column_is_ignored_before_0_1_20_and_read_after():
    _, old = lookup("aiter-0.1.19", "gfx950", "fp8", "fp8", 16, 4, True, causal=False)
    _, new = lookup("aiter-0.1.20", "gfx950", "fp8", "fp8", 16, 4, True, causal=False)
    assert old is not None and new is not None and "msk0" in new and "msk0" not in old


def test_non_native_persistent_heads_outside_the_fold_set_assert():
    a, _ = lookup("aiter-0.1.19", "gfx942", "bf16", "bf16", 144, 1, True)
    assert a.fold_error


def test_gluon_limits_per_version():
    assert load_registry("aiter-0.1.19").gluon_max_heads == 16
    assert load_registry("aiter-0.1.20").gluon_max_heads == 96
    assert not load_registry("aiter-0.1.19").gluon_fp8_batched
    assert load_registry("aiter-0.1.20").gluon_fp8_batched


@pytest.mark.parametrize("registry_id", REGISTRY_IDS)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(shape=shapes())
def test_resolves_to_a_kernel_agrees_with_the_resolved_kernel(registry_id, shape):
    """``resolves_to`` (the rows of one name) is ``resolved_kernel(...) == name`` (the whole table), for every
    name on any step, whatever the revision routes."""
    from mla_model.decision import decide
    from mla_model.registry import kernel_names, resolves_to
    from mla_model.revisions import get_revision

    reg = load_registry(registry_id)
    d = decide(get_revision("vllm-0.34"), reg, shape)
    resolved = resolved_kernel(reg, shape.arch, d.route.request, d.asm)
    for name in kernel_names(reg)[:-1]:
        assert bool(resolves_to(reg, shape.arch, d.route.request, d.asm, name)) == (resolved == name), name
