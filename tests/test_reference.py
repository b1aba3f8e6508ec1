"""The float32 MLA decode reference: paged KV, causal verify windows, fp8 flavours, batched on CPU.

Checked against a deliberately plain per-request, per-row loop over a
contiguous KV, so the block-table gather, the window mask and the batching are
each tested by something that shares none of them.
"""

from __future__ import annotations

import math

import pytest
import torch

from mla_model.reference import (
    FP8_DTYPE_OF_ARCH,
    HEAD_DIM,
    V_HEAD_DIM,
    DecodeInputs,
    PagedKV,
    mla_decode,
    quantize_fp8,
    row_kv_lens,
)


def _paged(kv_rows: list[torch.Tensor], page: int, seed: int = 0) -> PagedKV:
    """Lay each request's contiguous KV rows out in shuffled pages of ``page`` tokens."""
    g = torch.Generator().manual_seed(seed)
    blocks = max(-(-len(r) // page) for r in kv_rows)
    table = torch.randperm(len(kv_rows) * blocks, generator=g).view(len(kv_rows), blocks).to(torch.int32)
    cache = torch.randn(len(kv_rows) * blocks, page, HEAD_DIM, generator=g)  # junk where no token lives
    for r, rows in enumerate(kv_rows):
        for t, row in enumerate(rows):
            cache[table[r, t // page], t % page] = row
    return PagedKV(cache, table, torch.tensor([len(r) for r in kv_rows]))


def _loop_reference(
    q: torch.Tensor, kv_rows: list[torch.Tensor], qlen: int, causal: bool, scale: float
) -> torch.Tensor:
    out = []
    for r, kv in enumerate(kv_rows):
        for t in range(qlen):
            seen = kv[: len(kv) - (qlen - 1) + t] if causal else kv
            for_row = q[r * qlen + t]  # [H, 576]
            p = torch.softmax(for_row @ seen.T * scale, dim=-1)
            out.append(p @ seen[:, :V_HEAD_DIM])
    return torch.stack(out)


@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_a_plain_loop_over_requests_and_rows(page, causal):
    g = torch.Generator().manual_seed(page)
    qlen, heads, lens = 3, 5, [7, 40, 3]
    kv_rows = [torch.randn(n, HEAD_DIM, generator=g) for n in lens]
    q = torch.randn(len(lens) * qlen, heads, HEAD_DIM, generator=g)
    inputs = DecodeInputs(q, _paged(kv_rows, page), qlen, causal)
    expected = _loop_reference(q, kv_rows, qlen, causal, inputs.sm_scale)
    torch.testing.assert_close(mla_decode(inputs), expected, atol=1e-5, rtol=1e-5)


def test_a_verify_row_does_not_see_tokens_past_its_window():
    """Row t of a Q-token block sees seq_len - (Q - 1) + t tokens: the last KV token moves only the last
    row."""
    g = torch.Generator().manual_seed(1)
    kv = torch.randn(10, HEAD_DIM, generator=g)
    q = torch.randn(4, 2, HEAD_DIM, generator=g)
    before = mla_decode(DecodeInputs(q, _paged([kv], 4), 4, True))
    kv[-1] += 5.0
    after = mla_decode(DecodeInputs(q, _paged([kv], 4), 4, True))
    assert torch.equal(before[:3], after[:3])
    assert not torch.allclose(before[3], after[3])
    assert row_kv_lens(torch.tensor([10]), 4, True).tolist() == [[7, 8, 9, 10]]


def test_fp8_flavour_follows_the_arch_and_reads_dequantised():
    assert FP8_DTYPE_OF_ARCH == {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
    g = torch.Generator().manual_seed(2)
    kv = torch.randn(33, HEAD_DIM, generator=g)
    q = torch.randn(1, 4, HEAD_DIM, generator=g)
    for arch, fp8 in FP8_DTYPE_OF_ARCH.items():
        quantised, scale = quantize_fp8(kv, fp8)
        assert quantised.dtype == fp8 and scale > 0 and math.isfinite(scale)
        dequantised = quantised.float() * scale
        assert (dequantised - kv).abs().max() <= kv.abs().max() / 8  # 3 mantissa bits
        paged = _paged([kv], 16)
        cache8, _ = quantize_fp8(paged.cache, fp8)
        from_fp8 = mla_decode(
            DecodeInputs(q, PagedKV(cache8, paged.block_table, paged.seq_lens, scale), 1, True)
        )
        from_dequantised = mla_decode(
            DecodeInputs(q, PagedKV(cache8.float() * scale, paged.block_table, paged.seq_lens), 1, True)
        )
        assert torch.equal(from_fp8, from_dequantised), arch


def test_the_same_dtype_reference_differs_by_bf16_rounding_only():
    g = torch.Generator().manual_seed(3)
    kv_rows = [torch.randn(50, HEAD_DIM, generator=g) for _ in range(2)]
    inputs = DecodeInputs(
        torch.randn(4, 16, HEAD_DIM, generator=g).to(torch.bfloat16), _paged(kv_rows, 16), 2, True
    )
    ref, low = mla_decode(inputs), mla_decode(inputs, torch.bfloat16)
    assert low.dtype == torch.bfloat16
    deviation = (ref - low.float()).abs().max().item()
    assert 0 < deviation < 0.05
