"""The ``aiter-triton`` backend: AITER's Triton MLA decode kernel on each case's data path.

On a GPU with amd-aiter installed the real kernel runs; elsewhere the backend
must skip with its reason.  The data path around the kernel (head padding by
vLLM's helpers, the per-row causal flatten, qlen padding, fp8 dequantisation,
the padded batch) is checked on CPU against a plain torch stand-in with the
kernel's calling convention.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conformance.backends import aiter_triton, load_backend
from conformance.runner import run_case
from mla_model.case import read_cases
from tests.params import regular_and_slow

GENERATED = Path(__file__).resolve().parent / "generated"


def _cases(revision_dir: str, n: int | None = None):
    cases = read_cases(GENERATED / revision_dir / "cases.jsonl")
    return cases[:n] if n else cases


def _stand_in(
    q,
    k_buffer,
    v_buffer,
    o,
    kv_indptr,
    kv_indices,
    k_pe_tokens,
    kv_lora_rank,
    rotary_dim,
    cos_sin_cache,
    positions,
    attn_logits,
    num_kv_splits,
    sm_scale,
    config=None,
    **_,
):
    """decode_attention_fwd_grouped_rope's contract in torch: row b attends
    kv_indices[indptr[b]:indptr[b+1]]."""
    kv = k_buffer.view(-1, k_buffer.shape[-1]).float()
    for b in range(q.shape[0]):
        rows = kv[kv_indices[kv_indptr[b] : kv_indptr[b + 1]].long()]
        if len(rows):
            p = torch.softmax(q[b].float() @ rows.T * sm_scale, dim=-1)
            o[b] = (p @ rows[:, :kv_lora_rank]).to(o.dtype)


def test_skips_with_its_reason_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    backend = load_backend("aiter-triton")
    assert "CUDA or ROCm GPU" in backend.unavailable("cpu")
    record = run_case(_cases("vllm_028", 1)[0], backend, "cpu", 16)
    assert record["status"] == "SKIP" and "CUDA or ROCm GPU" in record["detail"]


@pytest.mark.parametrize("revision_dir", regular_and_slow(["vllm_028", "vllm_034"], "vllm_028"))
def test_data_path_around_the_kernel_matches_the_reference(monkeypatch, revision_dir):
    monkeypatch.setattr(aiter_triton, "load_kernel", lambda: _stand_in)
    backend = aiter_triton.AiterTritonBackend()
    monkeypatch.setattr(backend, "unavailable", lambda device: None)
    cases = [c for c in _cases(revision_dir) if c.shape.num_reqs * c.shape.max_qo_len <= 16][:40]
    records = [run_case(c, backend, "cpu", 24) for c in cases]
    assert all(r["status"] == "PASS" for r in records), [
        (r["id"], r["detail"]) for r in records if r["status"] != "PASS"
    ]
    padded = [r["info"]["padding"] for r in records if "padding" in r["info"]]
    assert padded and all(p.startswith(("vLLM ", "model (")) for p in padded)
    assert any(r["qlen"] > 1 for r in records) and any(r["kv_dtype"] == "fp8" for r in records)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
def test_real_kernel_passes_on_the_gpu():
    backend = load_backend("aiter-triton")
    why = backend.unavailable("cuda")
    if why:
        pytest.skip(why)
    records = [run_case(c, backend, "cuda", 256) for c in _cases("vllm_034", 12)]
    assert all(r["status"] == "PASS" for r in records), [(r["id"], r["detail"]) for r in records]
