"""A vLLM release's own DCP merge and collectives, read from its tree and executed (inside a harness child).

With decode context parallelism each rank attends over its round-robin KV
shard with every DCP-gathered query head; the MLA layer then merges the
ranks' partial outputs by their LSE.  Its default combine (``dcp_comm_backend``
``"ag_rs"``, vllm/config/parallel.py 0.34.0 L688) is ``cp_lse_ag_out_rs``
(vllm/v1/attention/ops/dcp.py 0.34.0 L471, 0.29.0 L275; chosen by
``MLADCPManager._init_combine``, 0.34.0 L1614): mask the LSE rows of empty
shards (``mask_dcp_empty_shards_``), all-gather the LSEs, rescale this rank's
output (``correct_attn_out``, a Triton kernel: ``_correct_attn_cp_out_kernel``
in 0.29.0, ``CorrectAttnCPOutKernel`` from 0.30.0), and reduce-scatter the
outputs over the heads.

:func:`load_merge` cuts those definitions out of the release's dcp.py (with
:func:`mla_spec_stub.release_defs`) and runs them unchanged.  The Triton
kernel runs where Triton can: natively on a GPU, in Triton's interpreter
(``TRITON_INTERPRET=1``) on a CPU.  Decision: the kernel is the release's
production merge, so it is what gets executed; the release's pure-torch
``_lse_weighted_combine`` (0.34.0 L535, "used for testing") is not used.
Without Triton the merge is refused (:class:`MergeUnavailable`), never
restated.  From 0.30.0 the kernel is launched through vLLM's JIT-warmup
wrapper: its runtime launch path (``kernel_launcher``, jit_warmup.py 0.34.0
L36-54; ``VllmTritonJitKernel.launch``/``_prepare_launch_kwargs``/
``_kernel_arg_names`` and ``_launch_binding_plan``, jit_warmup_triton_helper.py
0.34.0 L36-84, L301-372) is executed from the tree too; only its warmup and
compile-key tracing, which never run on a launch, are left out.

The release's rank-local merge of AITER's segmented-MLA partials,
``merge_mla_segments_triton`` with its ``_merge_mla_segments_kernel``
(vllm/v1/attention/ops/rocm_aiter_mla_merge.py, the same file in 0.29.0 to
0.34.0; reached by the SEGMENTED DCP verify, rocm_aiter_mla.py 0.34.0
L3268-3276), is cut out of that file the same way (:func:`load_segment_merge`)
and run in Triton as the DCP merge is; the ``LOGE2`` it reads is the release's
(vllm/triton_utils/__init__.py 0.34.0 L41).

The collectives are the release's ``DeviceCommunicatorBase.all_gather`` and
``reduce_scatter`` (vllm/distributed/device_communicators/
base_device_communicator.py 0.34.0 L269-333), executed over a ``dist`` that is
either ``torch.distributed`` (gloo, NCCL) or :class:`ThreadCollectives`, the
ranks of one process meeting at a barrier.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property, wraps
from typing import Any, Generic, TypeVar

import torch

DCP_FILE = "vllm/v1/attention/ops/dcp.py"
JIT_FILE = "vllm/model_executor/warmup/jit_warmup.py"
JIT_TRITON_FILE = "vllm/model_executor/warmup/jit_warmup_triton_helper.py"
SEGMENT_MERGE_FILE = "vllm/v1/attention/ops/rocm_aiter_mla_merge.py"
TRITON_UTILS_FILE = "vllm/triton_utils/__init__.py"
COMMUNICATOR_FILE = "vllm/distributed/device_communicators/base_device_communicator.py"
# The merge's definitions in dcp.py, in an order in which each is defined before it is read.
MERGE_NAMES = (
    "_validate_dcp_empty_shard_args",
    "mask_dcp_empty_shards_",
    "_correct_attn_cp_out_kernel",
    "CorrectAttnCPOutKernel",
    "CPTritonContext",
    "correct_attn_out",
    "_CORRECT_ATTN_CP_OUT_KERNEL",
    "_cp_lse_common",
    "cp_lse_ag_out_rs",
)


class MergeUnavailable(RuntimeError):
    """The release's merge cannot be executed here (no Triton, a release without DCP): one line."""


def triton_modules() -> tuple[Any, Any]:
    """Real Triton, interpreted where no GPU can launch it (the env knob is read at ``@triton.jit``)."""
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        raise MergeUnavailable(
            f"the release's DCP merge is a Triton kernel and Triton is not installed ({e}): "
            "pip install triton (the test extra pins it)"
        ) from None
    return triton, tl


def _defined(relpath: str) -> set[str]:
    """The top-level names ``relpath`` of the release defines (functions, classes, assignments)."""
    from mla_spec_stub import parsed_release_file

    _, tree = parsed_release_file(relpath)
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


K = TypeVar("K")


def _launch_base(namespace: dict[str, Any]) -> type:
    """``VllmTritonJitKernel`` with the release's runtime launch methods (warmup and tracing left out)."""
    from mla_spec_stub import class_method_defs, release_defs

    release_defs(JIT_TRITON_FILE, ("_LaunchBindingPlan", "_launch_binding_plan"), namespace)
    methods = class_method_defs(
        JIT_TRITON_FILE,
        "VllmTritonJitKernel",
        ("_kernel_arg_names", "_prepare_launch_kwargs", "launch"),
        namespace,
    )

    class VllmTritonJitKernel(Generic[K]):
        """The runtime half of vLLM's ``VllmTritonJitKernel``: never warming, inputs bound to kernel args."""

        bind_launch_inputs = True
        _warming = False
        _warming_compile_key = None
        _run_autotune = False

    for name, method in methods.items():
        setattr(VllmTritonJitKernel, name, method)
        if isinstance(method, cached_property):
            method.__set_name__(VllmTritonJitKernel, name)
    return VllmTritonJitKernel


@functools.cache
def load_merge() -> types.SimpleNamespace:
    """The release's ``cp_lse_ag_out_rs`` (and the names it reads), for the tree of ``STATE.tree``."""
    from mla_spec_stub import StubMissing, release_defs

    triton, tl = triton_modules()
    try:
        defined = _defined(DCP_FILE)
    except StubMissing as e:
        raise MergeUnavailable(f"the release has no DCP merge to execute: {e}") from None
    if "cp_lse_ag_out_rs" not in defined:
        raise MergeUnavailable(f"{DCP_FILE} of this release defines no cp_lse_ag_out_rs")
    namespace: dict[str, Any] = {
        "torch": torch,
        "triton": triton,
        "tl": tl,
        "dataclass": dataclass,
        "cache": cache,
        "cached_property": cached_property,
        "inspect": inspect,
        "wraps": wraps,
        "Callable": Callable,
        "Mapping": Mapping,
        "Any": Any,
        # annotation-only names (dcp.py imports them under TYPE_CHECKING or for warmup)
        "GroupCoordinator": Any,
        "LaunchSpec": Any,
    }
    if "CorrectAttnCPOutKernel" in defined:
        release_defs(JIT_FILE, ("kernel_launcher",), namespace)
        namespace["VllmTritonJitKernel"] = _launch_base(namespace)
    release_defs(DCP_FILE, tuple(n for n in MERGE_NAMES if n in defined), namespace)
    kernel_class = namespace.get("CorrectAttnCPOutKernel")
    for fn in (namespace.get("_correct_attn_cp_out_kernel"), getattr(kernel_class, "kernel", None)):
        _interpreter_constexprs(fn)
    return types.SimpleNamespace(**namespace)


@functools.cache
def load_segment_merge() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The release's ``merge_mla_segments_triton`` (and its kernel), for the tree of ``STATE.tree``."""
    from mla_spec_stub import StubMissing, release_defs

    triton, tl = triton_modules()
    namespace: dict[str, Any] = {"torch": torch, "triton": triton, "tl": tl}
    try:
        release_defs(TRITON_UTILS_FILE, ("LOGE2",), namespace)
        release_defs(
            SEGMENT_MERGE_FILE, ("_merge_mla_segments_kernel", "merge_mla_segments_triton"), namespace
        )
    except StubMissing as e:
        raise MergeUnavailable(f"the release has no segmented-MLA merge to execute: {e}") from None
    return namespace["merge_mla_segments_triton"]


def _interpreter_constexprs(fn: Any) -> None:
    """Give an interpreted kernel the ``constexprs`` a compiled one has (Triton's ``JITFunction``: the
    indices of its ``tl.constexpr`` parameters); vLLM's launch wrapper counts them (dcp.py 0.34.0 L357)."""
    if fn is None or hasattr(fn, "constexprs"):
        return
    params = inspect.signature(fn.fn).parameters.values()
    fn.constexprs = [i for i, p in enumerate(params) if "constexpr" in str(p.annotation)]


class Communicator:
    """vLLM's ``GroupCoordinator`` as the DCP merge uses it: ``world_size``, ``rank_in_group``, and the
    collectives ``all_gather``/``reduce_scatter``, which are its device communicator's (parallel_state.py
    0.34.0 ``GroupCoordinator.all_gather``/``reduce_scatter`` hand them to ``self.device_communicator``):
    here the release's ``DeviceCommunicatorBase`` methods, executed over ``dist``."""

    def __init__(self, world_size: int, rank: int, dist: Any, device_group: Any = None) -> None:
        from mla_spec_stub import class_method_defs

        self.world_size = world_size
        self.rank_in_group = rank
        self.device_group = device_group
        # The methods read ``dist.`` and ``torch.distributed.``: both resolve to ``dist`` here.
        namespace = {"torch": _TorchWithDistributed(dist), "dist": dist}
        methods = class_method_defs(
            COMMUNICATOR_FILE, "DeviceCommunicatorBase", ("all_gather", "reduce_scatter"), namespace
        )
        self._all_gather = methods["all_gather"]
        self._reduce_scatter = methods["reduce_scatter"]

    def all_gather(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return self._all_gather(self, input_, dim)

    def reduce_scatter(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return self._reduce_scatter(self, input_, dim)


class _TorchWithDistributed:
    """``torch``, except that ``torch.distributed`` is the collectives in use."""

    def __init__(self, dist: Any) -> None:
        self.distributed = dist

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


class ThreadCollectives:
    """``all_gather_into_tensor``/``reduce_scatter_tensor`` between the ranks of one process, one thread
    each.  The ranks run one at a time (:meth:`turn`); a collective hands the turn on while it waits at
    the barrier, so code that is not thread-safe (the Triton interpreter, the harness's recorder state)
    never runs in two ranks at once."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.barrier = threading.Barrier(world_size)
        self.lock = threading.Lock()
        self.slots: list[Any] = [None] * world_size

    def turn(self) -> Any:
        return self.lock

    def _exchange(self, rank: int, tensor: torch.Tensor) -> list[torch.Tensor]:
        self.slots[rank] = tensor
        self.lock.release()
        try:
            self.barrier.wait()
            gathered = list(self.slots)
            self.barrier.wait()  # every rank has read the slots before any writes the next ones
        finally:
            self.lock.acquire()
        return gathered

    def all_gather_into_tensor(self, output: torch.Tensor, input_: torch.Tensor, group: Any = None) -> None:
        parts = self._exchange(group.rank, input_)
        output.copy_(torch.cat([p.reshape(-1) for p in parts]).view(output.shape))

    def reduce_scatter_tensor(self, output: torch.Tensor, input_: torch.Tensor, group: Any = None) -> None:
        parts = self._exchange(group.rank, input_)
        total = parts[0].clone()
        for part in parts[1:]:  # summed in rank order, in the input's dtype
            total += part
        output.copy_(total.chunk(self.world_size)[group.rank])
