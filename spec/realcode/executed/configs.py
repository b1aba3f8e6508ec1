"""What vLLM hands the AITER MLA backend for one Shape: configs, the batch, the impl, the layer.

Runs inside the harness child, after the stubs are installed.  Values follow
how vLLM builds them (cited per function); where the Shape does not decide a
value, the harness option of the same name does (``max_num_seqs``,
``max_model_len``, ``block_size``, ``kv_len``, ``kv_scale``, ``q_scale``).
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from typing import Any

import torch

from mla_model.derived import PARALLEL_DRAFTING_METHODS
from mla_model.shape import FP8_KV_CACHE_DTYPES, GIB, Shape
from spec.realcode.executed.harness import DEFAULTS

KV_LORA_RANK, ROPE_DIM, NOPE_DIM, V_DIM = 512, 64, 128, 128
HEAD_SIZE = KV_LORA_RANK + ROPE_DIM
# A record-only query's random values per head, on its first token (configs.batch): more than the words
# child.head_map looks a head up by (HEAD_KEY int64 words: 32 fp8 or 16 bf16 values), so heads differ.
TAGGED = 64
LAYER = "model.layers.0.self_attn.attn"  # the one attention layer the builder is built for


def option(options: dict[str, Any], name: str) -> Any:
    if name == "max_model_len" and name not in options:
        # vLLM never schedules a sequence past max_model_len: by default it grows with kv_len (plus the
        # batch's 12-token spread of lengths and a verify block), so a long --kv-len stays a possible step.
        return max(DEFAULTS[name], int(option(options, "kv_len")) + 64)
    return options.get(name, DEFAULTS[name])


def fp8_dtype(shape: Shape) -> torch.dtype:
    """current_platform.fp8_dtype(): e4m3fnuz on gfx942, e4m3fn on gfx950 (vllm/platforms/rocm.py)."""
    return torch.float8_e4m3fnuz if shape.arch == "gfx942" else torch.float8_e4m3fn


class _CudagraphMode:
    def __init__(self, full: bool) -> None:
        self.full = full

    def has_full_cudagraphs(self) -> bool:
        return self.full


def speculative_config(shape: Shape) -> Any:
    """SpeculativeConfig as the engine leaves it (vllm/config/speculative.py).

    ``parallel_drafting`` is set for dflash/dspark in ``__post_init__``
    (0.28.0 L1046-1047); ``max_num_new_slots_for_drafting`` and the methods it
    calls are the release's own where its ``SpeculativeConfig`` defines them
    (:mod:`mla_spec_stub.speculative`).
    """
    if shape.spec_method == "none":
        return None
    from mla_spec_stub.speculative import SpeculativeConfig

    return SpeculativeConfig(
        method=shape.spec_method,
        num_speculative_tokens=shape.num_spec_tokens,
        parallel_drafting=shape.spec_method in PARALLEL_DRAFTING_METHODS,
    )


def num_gpu_blocks(shape: Shape, page_size_bytes: int) -> int:
    """KV cache blocks per layer for ``shape.kv_cache_bytes``.

    From 0.31.0 the builder sizes a layer's cache as ``num_gpu_blocks *
    kv_cache_spec.page_size_bytes`` (rocm_aiter_mla.py 0.31.0 L719-723, 0.34.0
    L1226-1230) and keeps Gluon only up to ``1 << 31`` bytes
    (``_GLUON_MAX_KV_CACHE_BYTES``).  A page is ``576 * block_size * itemsize``
    bytes, so not every byte count is a whole number of pages: the count is
    rounded toward the side of 2 GiB the shape is on (down at or below, up
    above), so the realised cache stays on the shape's side of that bound.
    """
    blocks = shape.kv_cache_bytes / page_size_bytes
    return math.floor(blocks) if shape.kv_cache_bytes <= 2 * GIB else math.ceil(blocks)


def full_cudagraphs(shape: Shape) -> bool:
    """Whether the harness runs this shape with full cudagraphs: half the shapes, by a stable hash of it.

    No gate of the model reads the cudagraph mode (it sizes buffers, it does not route), so it is not a Shape
    field.  The release's code does read it; running half the shapes each way lets the executed differential
    show any routing that depended on it.
    """
    return zlib.crc32(json.dumps(shape.to_json(), sort_keys=True).encode()) % 2 == 1


def vllm_config(shape: Shape, options: dict[str, Any]) -> tuple[Any, Any]:
    """The engine's configs for one shape, and the layer's AttentionSpec.

    The config is also made the current one (``vllm.config._current``), as
    vLLM's ``set_current_vllm_config`` does while it builds the attention
    backends; ``get_dcp_group`` reads its DCP size from there.
    """
    import vllm.config
    from mla_spec_stub import Bag
    from vllm.v1.kv_cache_interface import AttentionSpec

    fp8 = shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES
    model_dtype = torch.float16 if shape.kv_cache_dtype == "float16" else torch.bfloat16
    block_size = option(options, "block_size")
    spec = AttentionSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=HEAD_SIZE,
        dtype=torch.uint8 if fp8 else model_dtype,
        non_causal_multi_token_decode=not shape.causal,
    )
    layer = Bag(
        "layer",
        q_lora_rank=1536,
        kv_lora_rank=KV_LORA_RANK,
        qk_nope_head_dim=NOPE_DIM,
        qk_rope_head_dim=ROPE_DIM,
        v_head_dim=V_DIM,
    )
    config = vllm.config.VllmConfig(
        model_config=Bag(
            "model_config",
            dtype=model_dtype,
            max_model_len=option(options, "max_model_len"),
            num_heads_per_rank=shape.num_heads,
            get_head_size=lambda: HEAD_SIZE,
        ),
        scheduler_config=Bag(
            "scheduler_config", max_num_seqs=option(options, "max_num_seqs"), max_num_batched_tokens=8192
        ),
        cache_config=Bag(
            "cache_config",
            cache_dtype=shape.kv_cache_dtype,
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks(shape, spec.page_size_bytes),
        ),
        parallel_config=Bag(
            "parallel_config",
            decode_context_parallel_size=shape.dcp_world_size,
            cp_kv_cache_interleave_size=1,
            prefill_context_parallel_size=1,
        ),
        compilation_config=Bag(
            "compilation_config",
            cudagraph_mode=_CudagraphMode(full_cudagraphs(shape)),
            static_forward_context={LAYER: layer},
        ),
        speculative_config=speculative_config(shape),
        # VllmConfig.use_v2_model_runner (0.31.0 vllm/config/vllm.py L701-760): V2 unless the env knob says
        # otherwise, Triton is missing, V2 lacks a feature, or the ROCm architecture is DeepseekV32/V4 or
        # GlmMoeDsa; the harness takes that default, and the option stands for the exceptions.
        use_v2_model_runner=bool(options.get("use_v2_model_runner", True)),
    )
    vllm.config._current = config
    return config, spec


@dataclass
class Batch:
    """A uniform decode batch: R requests of Q query tokens each, KV of ``kv_lens[r]`` tokens (query too)."""

    common: Any
    q: torch.Tensor  # [R*Q, H, 576], the dtype the kernel is handed (fp8 already quantised by q_scale)
    q_true: torch.Tensor | None  # float32 logical query (None in a record-only batch)
    kv_cache: torch.Tensor  # [pages, block_size, 576] in the cache dtype
    kv_true: torch.Tensor | None  # float32 logical latent KV, one row per token slot (None: record-only)
    kv_lens: list[int]
    block_table: torch.Tensor

    @property
    def record_only(self) -> bool:
        """Made with ``values=False``: no kernel computes on it (see :func:`batch`)."""
        return self.q_true is None


def quantisation(shape: Shape, options: dict[str, Any]) -> tuple[torch.dtype, float, torch.dtype, float]:
    """``(kv_dtype, kv_scale, q_dtype, q_scale)``: the stored dtypes of the cache and the query handed to
    ``forward_mqa``, and the scales that dequantise them (1.0 where not fp8; the harness options'
    ``kv_scale``/``q_scale`` where fp8, as the layer's ``_k_scale``/``_q_scale`` hold them)."""
    fp8 = shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES
    kv_scale = float(option(options, "kv_scale")) if fp8 else 1.0
    half = torch.float16 if shape.kv_cache_dtype == "float16" else torch.bfloat16
    q_fp8 = shape.q_dtype == "fp8"
    q_scale = float(option(options, "q_scale")) if q_fp8 else 1.0
    return (
        fp8_dtype(shape) if fp8 else half,
        kv_scale,
        fp8_dtype(shape) if q_fp8 else torch.bfloat16,
        q_scale,
    )


def batch(
    shape: Shape, options: dict[str, Any], gen: torch.Generator, device: torch.device, values: bool = True
) -> Batch:
    """The CommonAttentionMetadata of a decode-only step (vllm/v1/attention/backend.py) and its tensors.

    ``values=False`` makes a record-only batch, for a run where no kernel computes (the executed
    differential): nothing reads the KV cache, so it is zero, and the query is random only on the first
    :data:`TAGGED` values of each head of its first token, which tell the kernel's heads apart
    (``child.head_map``); both are made in their stored dtype at once, and ``q_true``/``kv_true`` are
    None.  Drawing and converting every value was most of that run's time per shape."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    R, Q, H = shape.num_reqs, shape.max_qo_len, shape.num_heads
    block = option(options, "block_size")
    base = max(int(option(options, "kv_len")), Q)
    kv_lens = [base + (r * 7) % 13 for r in range(R)]
    pages_per_req = [math.ceil(n / block) for n in kv_lens]
    total_pages = sum(pages_per_req) + 1
    perm = torch.randperm(total_pages, generator=gen)  # pages scattered over the cache
    width = max(pages_per_req)
    table = torch.zeros(R, width, dtype=torch.int32)
    # Request r's pages are the next pages_per_req[r] of the permutation, from column 0.
    lens = torch.tensor(pages_per_req)
    rows = torch.repeat_interleave(torch.arange(R), lens)
    cols = torch.arange(int(lens.sum())) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
    table[rows, cols] = perm[: int(lens.sum())].to(torch.int32)
    kv_dtype, kv_scale, q_dtype, q_scale = quantisation(shape, options)
    kv_true: torch.Tensor | None = None
    q_true: torch.Tensor | None = None
    if values:
        stored = (torch.randn(total_pages * block, HEAD_SIZE, generator=gen) * 0.5 / kv_scale).to(kv_dtype)
        kv_true = stored.float() * kv_scale  # the logical values are what the cache really holds
        q = (torch.randn(R * Q, H, HEAD_SIZE, generator=gen) / q_scale).to(q_dtype)
        q_true = q.float() * q_scale
    else:
        stored = torch.zeros(total_pages * block, HEAD_SIZE, dtype=kv_dtype)
        q = torch.zeros(R * Q, H, HEAD_SIZE, dtype=q_dtype)
        q[0, :, :TAGGED] = (torch.randn(H, TAGGED, generator=gen) / q_scale).to(q_dtype)
    cache = stored.view(total_pages, block, HEAD_SIZE)
    qsl = torch.arange(0, (R + 1) * Q, Q, dtype=torch.int32)
    seq_lens = torch.tensor(kv_lens, dtype=torch.int32)
    common = CommonAttentionMetadata(
        query_start_loc=qsl.to(device),
        query_start_loc_cpu=qsl,
        seq_lens=seq_lens.to(device),
        num_reqs=R,
        num_actual_tokens=R * Q,
        max_query_len=Q,
        max_seq_len=max(kv_lens),
        block_table_tensor=table.to(device),
        slot_mapping=torch.zeros(R * Q, dtype=torch.int64, device=device),
        causal=shape.causal,
        seq_lens_cpu=seq_lens,
    )
    return Batch(common, q.to(device), q_true, cache.to(device), kv_true, kv_lens, table)


def dcp_rank_inputs(batch: Batch, world: int, rank: int, options: dict[str, Any]) -> tuple[Any, Any]:
    """One DCP rank's KV cache and CommonAttentionMetadata, cut from a global batch as vLLM lays them out.

    vLLM shards the KV round robin (token ``t`` on rank ``t % world``, ``cp_kv_cache_interleave_size`` 1;
    rocm_aiter_mla.py 0.34.0 L570-590): the rank's cache holds its local tokens (local token ``j`` of a
    request is global token ``j * world + rank``, at block-table column ``j // block_size``, as vLLM's slot
    mapping puts it), and its metadata carries ``dcp_local_seq_lens`` from the release's
    ``get_dcp_local_seq_lens``.  The block table is ``cdiv(max_model_len, block_size)`` wide, as the
    worker's is (KVCacheSpec.max_num_blocks_per_req, vllm/v1/kv_cache_interface.py 0.34.0 L279-289): DCP
    verify's row view relies on it (rocm_aiter_mla.py 0.34.0 L1793-1797).  The query is the global batch's:
    every rank decodes all DCP-gathered heads.
    """
    import dataclasses

    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens

    cache = batch.kv_cache.clone()  # rows the rank does not hold keep other tokens' values
    block = cache.shape[1]
    flat_src, flat_dst = batch.kv_cache.view(-1, cache.shape[-1]), cache.view(-1, cache.shape[-1])
    table = batch.block_table.long()
    src, dst = [], []
    for b, length in enumerate(batch.kv_lens):
        local = torch.arange(len(range(rank, length, world)))
        pos = local * world + rank
        src.append(table[b, pos // block] * block + pos % block)
        dst.append(table[b, local // block] * block + local % block)
    flat_dst[torch.cat(dst).to(cache.device)] = flat_src[torch.cat(src).to(cache.device)]
    common = batch.common
    width = -(-int(option(options, "max_model_len")) // block)
    table_wide = common.block_table_tensor.new_zeros(table.shape[0], max(width, table.shape[1]))
    table_wide[:, : table.shape[1]] = common.block_table_tensor
    local_lens = get_dcp_local_seq_lens(common.seq_lens, world, rank, 1)
    common = dataclasses.replace(
        common,
        block_table_tensor=table_wide,
        dcp_local_seq_lens=local_lens,
        dcp_local_seq_lens_cpu=local_lens.cpu(),
    )
    return cache, common


def impl_args(shape: Shape) -> dict[str, Any]:
    """AiterMLAImpl's constructor arguments as MLAAttention passes them (heads per rank, the cache dtype)."""
    return dict(
        num_heads=shape.num_heads,
        head_size=HEAD_SIZE,
        scale=1.0 / math.sqrt(NOPE_DIM + ROPE_DIM),
        num_kv_heads=1,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype=shape.kv_cache_dtype,
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=None,
        q_lora_rank=1536,
        kv_lora_rank=KV_LORA_RANK,
        qk_nope_head_dim=NOPE_DIM,
        qk_rope_head_dim=ROPE_DIM,
        qk_head_dim=NOPE_DIM + ROPE_DIM,
        v_head_dim=V_DIM,
        kv_b_proj=None,
    )


def layer(shape: Shape, options: dict[str, Any], device: torch.device) -> Any:
    """The attention layer's scales (vllm/model_executor/layers/attention: ``_q_scale``, ``_k_scale``
    tensors)."""
    _, kv_scale, _, q_scale = quantisation(shape, options)
    from mla_spec_stub import Bag

    t = lambda v: torch.tensor([v], dtype=torch.float32, device=device)  # noqa: E731
    return Bag(
        "layer",
        _q_scale=t(q_scale),
        _k_scale=t(kv_scale),
        _v_scale=t(kv_scale),
        _q_scale_float=q_scale,
        _k_scale_float=kv_scale,
        _v_scale_float=kv_scale,
    )
