"""Stub ``vllm.v1.attention.backend``: the types the backend imports, and the release's own threshold code.

``AttentionMetadataBuilder._init_reorder_batch_threshold`` and, where the
release has it, ``max_decode_query_len`` are the release's definitions from
its ``vllm/v1/attention/backend.py``, executed unchanged: the scheduler's
reorder_batch_threshold, and so ``_mtp_decode_qlen``, come from the release.
The enum, dataclass and marker types restate the release's declarations
(``AttentionCGSupport``, ``CommonAttentionMetadata``, ``MultipleOf``).
"""

import ast as _ast
import enum
from abc import ABC
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from mla_spec_stub import STATE, class_method_defs, release_defs, strict

__getattr__ = strict("vllm.v1.attention.backend")

from vllm.v1.kv_cache_interface import AttentionSpec  # noqa: E402  (read by the release's threshold code)


class AttentionCGSupport(enum.Enum):
    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


class MultipleOf:
    base: int

    def __init__(self, base: int):
        self.base = base


class AttentionLayer:
    """Annotation only: the harness passes its own layer object (``_q_scale``, ``_k_scale``, ...)."""


@dataclass
class CommonAttentionMetadata:
    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: torch.Tensor
    slot_mapping: torch.Tensor
    causal: Any = True
    dcp_local_seq_lens: Any = None
    dcp_local_seq_lens_cpu: Any = None
    seq_lens_cpu: Any = None
    # What the release's tests/v1/attention/utils.py create_common_attn_metadata also passes (0.27.1-0.34.0),
    # and 0.34.0's renamed DCP field: declared by the releases, read by nothing the harness runs.
    seq_lens_cpu_upper_bound: Any = None
    dcp_local_seq_lens_cpu_upper_bound: Any = None
    _seq_lens_cpu: Any = None
    _num_computed_tokens_cpu: Any = None


class AttentionMetadataBuilder(ABC):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER
    reorder_batch_threshold: Any = None


def _load() -> None:
    relpath = "vllm/v1/attention/backend.py"
    defined = {getattr(n, "name", None) for n in _ast.parse((STATE.tree / relpath).read_text()).body}
    if "max_decode_query_len" in defined:
        release_defs(relpath, ("max_decode_query_len",), globals())
    methods = class_method_defs(
        relpath, "AttentionMetadataBuilder", ("_init_reorder_batch_threshold",), globals()
    )
    AttentionMetadataBuilder._init_reorder_batch_threshold = methods["_init_reorder_batch_threshold"]


_load()
