"""Stub ``vllm.model_executor.layers.attention.mla_attention``: the MLA base classes, decode-only.

Restates what the AITER MLA subclasses inherit (vllm/model_executor/layers/
attention/mla_attention.py, 0.27.0-0.34.0):

* ``MLACommonMetadataBuilder.__init__`` sets ``num_heads`` (heads per rank),
  ``dcp_world_size``, ``compilation_config``, ``model_config``, ``device``,
  ``page_size``, and calls the release's own
  ``_init_reorder_batch_threshold(reorder_batch_threshold, supports_spec_decode,
  supports_dcp_with_varlen)`` with ``supports_spec_decode = query_len_support
  != SINGLE_ONLY`` (0.28.0 L2165).
* ``build`` on a decode-only batch: every request is a decode; it calls
  ``_build_decode`` with the arguments of 0.28.0 L2335-2343 (with DCP, the
  rank's local seq_lens and the total as ``dcp_tot_seq_lens_device``, 0.34.0
  L2889-2902; plus
  ``max_query_len = min(max_query_len, reorder_batch_threshold)`` where the
  release's signature takes it, 0.34.0 L2913) and wraps the result in
  ``metadata_cls`` (L2345-2360).  Non-causal decode raises as L2244 does when
  the builder does not support it.
* From 0.33.0 the builder also reads ``mla_dims`` (an ``MLADims`` of the
  layer's dims), ``q_data_type`` (the model dtype: prefill query quantisation
  is off by default, ``determine_prefill_query_data_type`` 0.34.0 L2562-2604)
  and, 0.34.0, ``_prefill_backend`` (a clone of the layer's prefill backend,
  L2708; the harness's is the plain :class:`PrefillBackend`).
* ``MLACommonImpl.__init__`` keeps the MLA dims and the kv cache dtype, and
  the DCP world size and rank ``AttentionImpl.__new__`` sets from
  ``get_dcp_group()`` (vllm/v1/attention/backend.py 0.29.0 L837-858, 0.34.0
  L831-856; read by AiterMLAImpl from 0.29.0, e.g. L1429).
* ``get_dcp_group``/``get_tp_group`` are module names here as in 0.34.0
  (L228-231, imported from parallel_state), where its shipped DCP tests patch
  them.
* ``init_mla_context_partial``/``accumulate_mla_context_chunk`` (imported
  0.33.0 L19; chunked-prefill context, 0.34.0 L3029/L3056) are prefill-only:
  reaching one is a harness fault.
"""

import enum
import inspect
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from mla_spec_stub import prefill_only, strict

from vllm.distributed.parallel_state import get_dcp_group, get_tp_group
from vllm.v1.attention.backend import AttentionMetadataBuilder

__getattr__ = strict("vllm.model_executor.layers.attention.mla_attention")


class QueryLenSupport(enum.Enum):
    SINGLE_ONLY = "single_only"
    UNIFORM = "uniform"
    VARLEN = "varlen"


@dataclass
class MLADims:
    q_lora_rank: Any
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class PrefillBackend:
    """The layer's default MLA prefill backend as the builder sees it: cloned, never run on decode."""

    def clone(self) -> "PrefillBackend":
        return PrefillBackend()


init_mla_context_partial = prefill_only(what="helper", name="init_mla_context_partial")
accumulate_mla_context_chunk = prefill_only(what="helper", name="accumulate_mla_context_chunk")


class MLACommonBackend:
    accept_output_buffer = True

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size in cls.get_supported_head_sizes()

    @classmethod
    def supports_non_causal(cls) -> bool:
        return False


@dataclass
class MLACommonDecodeMetadata:
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    dcp_tot_seq_lens: Any


@dataclass
class MLACommonPrefillMetadata:
    block_table: Any = None


D = TypeVar("D", bound=MLACommonDecodeMetadata)


@dataclass
class MLACommonMetadata(Generic[D]):
    num_reqs: int
    max_query_len: int
    max_seq_len: int
    num_actual_tokens: int
    query_start_loc: torch.Tensor
    slot_mapping: torch.Tensor
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    causal: bool = True
    head_dim: Any = None
    prefill: Any = None
    decode: Any = None


M = TypeVar("M")


class MLACommonMetadataBuilder(AttentionMetadataBuilder, Generic[M]):
    query_len_support = QueryLenSupport.SINGLE_ONLY
    reorder_batch_threshold = 1
    supports_non_causal_multi_token_decode = False

    def __init__(
        self,
        kv_cache_spec,
        layer_names,
        vllm_config,
        device,
        metadata_cls=None,
        supports_dcp_with_varlen: bool = False,
    ):
        self.metadata_cls = metadata_cls if metadata_cls is not None else MLACommonMetadata
        self.kv_cache_spec = kv_cache_spec
        self.layer_names = layer_names
        self.model_config = vllm_config.model_config
        self.compilation_config = vllm_config.compilation_config
        self.vllm_config = vllm_config
        self.device = device
        self.non_causal_multi_token_decode = getattr(kv_cache_spec, "non_causal_multi_token_decode", False)
        self.num_heads = self.model_config.num_heads_per_rank
        layer = self.compilation_config.static_forward_context[layer_names[0]]
        self.mla_dims = MLADims(
            layer.q_lora_rank,
            layer.kv_lora_rank,
            layer.qk_nope_head_dim,
            layer.qk_rope_head_dim,
            layer.v_head_dim,
        )
        self.q_data_type = self.model_config.dtype
        self._prefill_backend = PrefillBackend()
        self.dcp_world_size = vllm_config.parallel_config.decode_context_parallel_size
        self.cp_kv_cache_interleave_size = vllm_config.parallel_config.cp_kv_cache_interleave_size
        self.dcp_local_block_size = self.cp_kv_cache_interleave_size
        self.dcp_virtual_block_size = self.dcp_local_block_size * self.dcp_world_size
        self.page_size = kv_cache_spec.block_size
        self.use_pcp = False
        supports_spec_decode = self.query_len_support != QueryLenSupport.SINGLE_ONLY
        self._init_reorder_batch_threshold(
            self.reorder_batch_threshold, supports_spec_decode, supports_dcp_with_varlen
        )

    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False):
        m = common_attn_metadata
        if m.causal is False and not (
            self.supports_non_causal_multi_token_decode and self.non_causal_multi_token_decode
        ):
            raise ValueError("Non-causal multi-token MLA requires an explicitly supported attention group.")
        num_decodes, num_decode_tokens = m.num_reqs, m.num_actual_tokens
        seq_lens, max_seq_len, dcp_tot_seq_lens = m.seq_lens[:num_decodes], m.max_seq_len, None
        if self.dcp_world_size > 1:
            seq_lens, max_seq_len = self._dcp_local(m)
            dcp_tot_seq_lens = m.seq_lens[:num_decodes]
        args = dict(
            block_table_tensor=m.block_table_tensor[:num_decodes, ...],
            seq_lens_device=seq_lens,
            max_seq_len=max_seq_len,
            query_start_loc_cpu=m.query_start_loc_cpu[: num_decodes + 1],
            query_start_loc_device=m.query_start_loc[: num_decodes + 1],
            num_decode_tokens=num_decode_tokens,
            max_query_len=min(m.max_query_len, self.reorder_batch_threshold),
            dcp_tot_seq_lens_device=dcp_tot_seq_lens,
        )
        accepted = inspect.signature(self._build_decode).parameters
        decode = self._build_decode(**{k: v for k, v in args.items() if k in accepted})
        return self.metadata_cls(
            num_reqs=m.num_reqs,
            max_query_len=m.max_query_len,
            max_seq_len=max_seq_len,
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=m.query_start_loc,
            slot_mapping=m.slot_mapping,
            head_dim=576,
            num_decodes=num_decodes,
            num_decode_tokens=num_decode_tokens,
            num_prefills=0,
            causal=m.causal is not False,
            prefill=None,
            decode=decode,
        )

    def _dcp_local(self, m) -> tuple[torch.Tensor, int]:
        """This DCP rank's decode seq_lens and max_seq_len (0.34.0 L2889-2902, 0.29.0 L2486-2497).

        The decode lengths become ``common_attn_metadata.dcp_local_seq_lens`` (the
        tokens this rank holds; the total goes to ``_build_decode`` as
        ``dcp_tot_seq_lens_device``), and ``max_seq_len`` becomes
        ``ceil(L / (N * I)) * I``.  Where the caller did not set the local lengths
        (vLLM's model runner always does), they are the release's own
        ``get_dcp_local_seq_lens`` for the group's rank, as the runner computes them.
        """
        local = m.dcp_local_seq_lens
        if local is None:
            from vllm.distributed import get_dcp_group
            from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens

            local = get_dcp_local_seq_lens(
                m.seq_lens,
                self.dcp_world_size,
                get_dcp_group().rank_in_group,
                self.cp_kv_cache_interleave_size,
            )
        parts = self.dcp_world_size * self.cp_kv_cache_interleave_size
        max_seq_len = (m.max_seq_len + parts - 1) // parts * self.cp_kv_cache_interleave_size
        return local[: m.num_reqs], max_seq_len


class MLACommonImpl(Generic[M]):
    def __init__(
        self,
        num_heads,
        head_size,
        scale,
        num_kv_heads,
        alibi_slopes,
        sliding_window,
        kv_cache_dtype,
        logits_soft_cap,
        attn_type,
        kv_sharing_target_layer_name,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        qk_head_dim=192,
        v_head_dim=128,
        kv_b_proj=None,
        indexer=None,
        q_pad_num_heads=None,
        **extra,
    ):
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.q_lora_rank = q_lora_rank
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.qk_head_dim = qk_head_dim
        self.v_head_dim = v_head_dim
        self.kv_b_proj = kv_b_proj
        self.q_pad_num_heads = q_pad_num_heads
        self.dcp_world_size = get_dcp_group().world_size
        self.dcp_rank = get_dcp_group().rank_in_group
        self.need_to_return_lse_for_decode = self.dcp_world_size > 1
