"""The ``aiter-triton`` backend: AITER's own Triton MLA decode kernel, on every case's data path.

The kernel is ``decode_attention_fwd_grouped_rope`` of
``aiter/ops/triton/mla_decode_rope.py`` in the ``amd-aiter`` wheel
(0.1.7.post2.dev18, the one on PyPI): absorbed MLA (576/512) over page-size-1
KV indices, split-KV stage 1 plus a log-sum-exp stage 2, one query row per
batch entry, bf16 operands.  It runs on CUDA and ROCm GPUs; the ASM and Gluon
kernels the routes name do not, so this backend replays each case's *data
path* on it:

* the query padded to the route's kernel head count on ASM routes, by vLLM's
  own ``AiterMLAHelper.get_mla_padded_q`` / ``get_mla_unpadded_o`` loaded from
  the case's vLLM release by the real-code loader (``spec.realcode``; the
  release's ``rocm_aiter_mla.py`` must be in the mla-spec cache), else the
  model's (:func:`mla_model.emulation.pad_heads`); the record says which;
* multi-token verify as one batch entry per query row over its causal window,
  as vLLM 0.28.0's Gluon verify flatten builds it (``forward_mqa``
  L1253-1288; sources §14), and qlen padding as the route asks;
* fp8 (query and KV) dequantised to bf16 before the launch: this kernel takes
  neither fp8 operands nor scales;
* the split count the routed AITER kernel would use where the route has one
  (:mod:`mla_model.emulation`), else get_meta_param's occupancy choice.

Importing it: ``aiter/__init__.py`` loads ROCm-only extensions, so ``aiter``,
``aiter.ops`` and ``aiter.ops.triton`` are registered as plain namespace
modules over the installed folders before the kernel module is imported, and
the launch config carries only options NVIDIA's Triton backend knows
(BLOCK_N, BLOCK_H, num_warps, num_stages; the wheel's MI300X/MI350X JSON adds
waves_per_eu, matrix_instr_nonkdim and kpack).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import torch

from mla_model import emulation
from mla_model.emulation import NoKernel
from mla_model.reference import HEAD_DIM, KV_LORA_RANK, V_HEAD_DIM, row_kv_lens
from mla_model.route import ASM_PATHS, GLUON_PATHS

# Launch options for stage 1 (grouped heads x KV blocks) and stage 2 (the split reduce).
CONFIG = {
    "fwd_grouped_kernel_stage1_rope": {"BLOCK_N": 32, "BLOCK_H": 16, "num_warps": 4, "num_stages": 2},
    "fwd_kernel_stage2": {"num_warps": 4, "num_stages": 2},
}
TIMED_RUNS = 3


@lru_cache(maxsize=1)
def load_kernel() -> Callable[..., Any]:
    """``decode_attention_fwd_grouped_rope`` from the installed amd-aiter, not running aiter's __init__."""
    if "aiter" not in sys.modules:
        spec = importlib.util.find_spec("aiter")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("amd-aiter is not installed (pip install amd-aiter)")
        root = Path(list(spec.submodule_search_locations)[0])
        for name, folder in (
            ("aiter", root),
            ("aiter.ops", root / "ops"),
            ("aiter.ops.triton", root / "ops" / "triton"),
        ):
            module = types.ModuleType(name)
            module.__path__ = [str(folder)]
            sys.modules[name] = module
    from aiter.ops.triton.mla_decode_rope import decode_attention_fwd_grouped_rope

    return decode_attention_fwd_grouped_rope


# --- head padding: vLLM's helpers where we have the release, else the model's -----------------


@cache
def vllm_padding(revision: str) -> tuple[Any, str]:
    """The loaded gate code of the case's vLLM release (or None) and a label saying whose padding runs."""
    from mla_model.revisions import RELEASE_OF_REVISION
    from spec.realcode.extract import extract
    from spec.realcode.source import RELATIVE_PATH, SourceError, cache_dir, resolve

    try:  # the real-code sandbox imports z3 (for the lifter), which a GPU machine may lack
        from spec.realcode.sandbox import LoadedCode
    except ImportError as e:
        return None, f"model (the real-code loader cannot be imported here: {e})"
    release = RELEASE_OF_REVISION.get(revision)
    if release is None:
        return None, f"model (no vLLM release is the gate code of {revision})"
    if not (cache_dir() / release / "tree" / RELATIVE_PATH).is_file():
        return None, f"model (vLLM {release}'s rocm_aiter_mla.py is not in {cache_dir()})"
    try:
        return LoadedCode(extract(resolve(release))), f"vLLM {release} AiterMLAHelper"
    except SourceError as e:
        return None, f"model ({e})"


def _pad(
    revision: str, q: torch.Tensor, heads: int, m: int, padding: str
) -> tuple[torch.Tensor, Callable, str]:
    code, label = vllm_padding(revision)
    if code is None:
        return (
            emulation.pad_heads(q, heads, m, padding),
            lambda o: emulation.unpad_heads(o, heads, m, padding),
            label,
        )
    return (
        code.call("get_mla_padded_q", num_heads=heads, q=q),
        lambda o: code.call("get_mla_unpadded_o", num_heads=heads, o=o),
        label,
    )


# --- the backend ----------------------------------------------------------------------------


def _splits(decision: Any, registry: Any, num_reqs: int, total_kv: int, heads: int, qlen: int) -> int:
    route, arch = decision.route, decision.shape.arch
    if route.path in GLUON_PATHS:
        return emulation.gluon_num_kv_splits(num_reqs, qlen, heads)
    if route.path == "asm_nonpersistent":
        try:
            return emulation.asm_num_kv_splits(
                registry, arch, num_reqs, total_kv, heads, qlen, route.request.q_dtype
            )
        except NoKernel:
            pass  # AITER has no split count here; the Triton kernel still runs the shape
    if route.path == "triton_verify":
        return 1
    return emulation.occupancy_num_kv_splits(emulation.CU_NUM[arch], num_reqs, total_kv)


class AiterTritonBackend:
    name = "aiter-triton"

    def unavailable(self, device: str) -> str | None:
        if not device.startswith("cuda"):
            return f"needs a CUDA or ROCm GPU (device is {device})"
        try:
            load_kernel()
        except ImportError as e:
            return f"cannot import AITER's Triton MLA decode kernel: {e}"
        return None

    def run(self, case: Any, decision: Any, registry: Any, inputs: Any, watch: Any, fault: str | None) -> Any:
        kernel = load_kernel()
        route = decision.route
        R, Q, H = inputs.num_reqs, inputs.qlen, inputs.num_heads
        q = (inputs.q.to(torch.float32) * inputs.q_scale).to(torch.bfloat16)
        kv = inputs.kv
        k_buffer = (kv.cache.to(torch.float32) * kv.scale).to(torch.bfloat16).view(-1, 1, HEAD_DIM)
        info: dict[str, Any] = {}
        unpad: Callable[[torch.Tensor], torch.Tensor] = lambda o: o  # noqa: E731
        qk = Q
        if route.path in ASM_PATHS:
            qk = int(route.request.kernel_qlen)
            q = emulation.pad_qlen(q, R, Q, qk)
            q, unpad, info["padding"] = _pad(
                case.revision, q, H, int(route.request.padded_heads), route.head_padding
            )
        heads = q.shape[1]
        rows = row_kv_lens(kv.seq_lens, qk, inputs.causal).reshape(-1)  # one batch entry per query row
        slots = kv.slots()
        visible = torch.arange(slots.shape[1], device=slots.device)[None, None, :] < rows.view(R, qk, 1)
        kv_indices = slots[:, None, :].expand(-1, qk, -1)[visible].to(torch.int32)
        # The batch size is a Triton constexpr: pad the rows to a power of two with empty rows (as full
        # cudagraphs pad a batch with seq_len-0 requests), so launch shapes, and compiles, are few.
        n = R * qk
        padded = 1 << (n - 1).bit_length()
        q = torch.cat([q, q.new_zeros(padded - n, heads, HEAD_DIM)])
        kv_indptr = torch.zeros(padded + 1, dtype=torch.int32, device=q.device)
        kv_indptr[1 : n + 1] = torch.cumsum(rows, 0)
        kv_indptr[n + 1 :] = kv_indptr[n]
        splits = _splits(decision, registry, R, int(kv.seq_lens.sum()), heads, qk)
        logits = torch.empty(padded, heads, splits, KV_LORA_RANK + 1, dtype=torch.float32, device=q.device)

        def launch(o: torch.Tensor) -> None:
            grouped_rope_decode(
                kernel, q, k_buffer, o, kv_indptr, kv_indices, logits, splits, inputs.sm_scale
            )

        out = torch.full((padded, heads, V_HEAD_DIM), float("nan"), dtype=torch.bfloat16, device=q.device)
        launch(out)  # checked run (compiles on first use of this launch shape)
        scratch = torch.empty_like(out)
        watch.best("kernel", lambda: launch(scratch), TIMED_RUNS)
        out = emulation.unpad_qlen(out[:n], R, Q, qk)
        info.update(
            splits=splits,
            kernel_heads=heads,
            kernel_rows=n,
            launch_rows=padded,
            kv_bytes_read=int(rows.sum()) * HEAD_DIM * k_buffer.element_size(),
        )
        return unpad(out), info


BACKEND = AiterTritonBackend()


def grouped_rope_decode(
    kernel: Callable[..., Any],
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    o: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    logits: torch.Tensor,
    splits: int,
    sm_scale: float,
) -> None:
    """One launch of AITER's ``decode_attention_fwd_grouped_rope`` on paged rows of the latent cache: V is the
    first 512 columns of K, no rope split, no logit cap, the split-KV partials in ``logits``."""
    config = {k: dict(v) for k, v in CONFIG.items()}  # the wrapper writes BLOCK_C/BLOCK_R into it
    v_buffer, rope = k_buffer[..., :V_HEAD_DIM], (None, KV_LORA_RANK, 0, None, None)  # no rope split, no cap
    kernel(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, *rope, logits, splits, sm_scale, config=config)
