"""DCP replay: one decode step of a vLLM release with decode context parallelism, every rank executed.

With ``dcp_world_size = N > 1`` vLLM shards the KV cache round robin (token
``t`` on rank ``t % N``, ``cp_kv_cache_interleave_size`` 1; rocm_aiter_mla.py
0.34.0 L570-590), all-gathers the query heads over the DCP group (decode
heads = heads x N: ``MLADCPManager._gather_query``, vllm/v1/attention/ops/
dcp.py 0.34.0 L1676-1680), runs the backend's ``forward_mqa`` on every rank
over its shard with ``return_lse``, and merges the ranks' partial outputs by
their LSE (the MLA layer, vllm/model_executor/layers/attention/
mla_attention.py 0.34.0 L1165-1215, 0.29.0 L971-1001: ``dcp_manager.combine``
with the decode ``seq_lens`` and ``query_start_loc``).

:func:`run_rank` does one rank's part with the release's own code: the
query gather and the merge (:mod:`conformance.dcp_merge`), the builder and
``forward_mqa`` (the harness, :mod:`spec.realcode.executed`), the kernel a
stand-in (:mod:`conformance.backends.vllm_replay`) that returns the true LSE
of the shard it was given.  Each rank's inputs are cut from one global batch
as vLLM lays them out: its KV cache holds its local tokens (local token ``j``
of a request is global token ``j * N + rank``, at block-table column
``j // block_size``, as vLLM's slot mapping puts it), its metadata has
``dcp_local_seq_lens`` from the release's ``get_dcp_local_seq_lens``, and its
query holds its own heads.  The same :func:`run_rank` runs

* ``simulated``: the N ranks as threads of one process, one at a time,
  meeting in the collectives (:class:`conformance.dcp_merge.ThreadCollectives`);
* ``gloo`` / ``nccl``: the N ranks as processes under ``torch.distributed``
  (NCCL: one GPU per rank).

The merged output (every rank's heads) is judged against the float32
reference over the whole, unsplit KV with the runner's
:func:`conformance.runner.classify`.

Fault injection (``inject_fault="drop-rank-lse"``): the last rank's LSE is
replaced by ``-inf`` before the merge, as if its shard were dropped; the merge
then weights the other shards only, and the verdict must be MISMATCH.

Run as ``python -m conformance.dcp_replay`` (by :func:`execute`): one JSON
request on stdin (the harness child's format), one JSON row per shape on
stdout (rank 0 only), then ``{"done": true}``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import sys
import tempfile
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

FAULTS = ("drop-rank-lse",)
RANKS = ("simulated", "gloo", "nccl")
MODULE = "conformance.dcp_replay"
REPLAY = "conformance.backends.vllm_replay"


# --- one rank -------------------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    """What every rank of one step shares: the release module, the shape, the global batch."""

    module: Any
    shape: Any  # num_heads: heads per rank
    registry: Any
    options: dict[str, Any]
    batch: Any  # the global batch, query with the gathered heads (num_heads x N)
    device: Any

    @property
    def world(self) -> int:
        return int(self.shape.dcp_world_size)


def prepare(module: Any, shape: Any, registry: Any, options: dict[str, Any], seed: int, device: Any) -> Step:
    """The global batch every rank cuts its part from (the same in every process for the same seed)."""
    import torch

    from spec.realcode.executed import configs

    gathered = dataclasses.replace(shape, num_heads=shape.num_heads * shape.dcp_world_size)
    gen = torch.Generator().manual_seed(seed)
    return Step(module, shape, registry, options, configs.batch(gathered, options, gen, device), device)


def local_inputs(step: Step, rank: int) -> tuple[Any, Any, Any]:
    """Rank ``rank``'s query heads, KV cache and CommonAttentionMetadata (:func:`dcp_rank_inputs`)."""
    from spec.realcode.executed.configs import dcp_rank_inputs

    cache, common = dcp_rank_inputs(step.batch, step.world, rank, step.options)
    heads = step.shape.num_heads
    q = step.batch.q[:, rank * heads : (rank + 1) * heads].contiguous()
    return q, cache, common


def forward_rank(step: Step, rank: int, group: Any, fault: str | None) -> dict[str, Any]:
    """One rank up to the merge: gather the query heads, build the metadata, ``forward_mqa`` (with LSE).

    The record holds the stage reached and the outcome (as a harness row does), the rank's calls, and,
    when ``forward_mqa`` ran, its ``attn_out``/``lse`` and the merge's ``seq_lens``/``query_start_loc``.
    """
    import mla_spec_stub
    import torch

    from conformance.backends.vllm_replay import kernel
    from spec.realcode.executed import configs
    from spec.realcode.executed.child import clear_caches

    shape, st = step.shape, mla_spec_stub.STATE
    q_local, cache, common = local_inputs(step, rank)
    out: dict[str, Any] = {"rank": rank, "stage": "init"}
    q = group.all_gather(q_local, dim=1)  # MLADCPManager._gather_query (dcp.py 0.34.0 L1676-1680)
    st.arch, st.asm_padding_mode, st.gluon_build = shape.arch, shape.asm_padding_mode, shape.gluon_build
    st.registry, st.calls, st.events, st.kernel, st.dcp_rank = step.registry, [], [], kernel, rank
    st.device = step.device  # where the release's workspace scratch is allocated
    clear_caches(step.module)
    try:
        vllm_config, kv_spec = configs.vllm_config(shape, step.options)
        builder = step.module.AiterMLAMetadataBuilder(kv_spec, [configs.LAYER], vllm_config, step.device)
        out["threshold"] = builder.reorder_batch_threshold
        out["valid_heads"] = bool(step.module.AiterMLAHelper.is_valid_num_heads(shape.num_heads))
        if not out["valid_heads"] or not 1 <= shape.max_qo_len <= (builder.reorder_batch_threshold or 1):
            out.update(stage="refused", outcome="refused")
            return out
        out["stage"] = "build"
        metadata = builder.build(0, common)
        decode = metadata.decode
        route = getattr(decode, "dcp_route", None)
        out["decode"] = {"max_qo_len": int(decode.max_qo_len), "dcp_route": getattr(route, "name", None)}
        out["stage"] = "forward"
        impl = step.module.AiterMLAImpl(**configs.impl_args(shape))
        attn_out, lse = impl.forward_mqa(q, cache, metadata, configs.layer(shape, step.options, step.device))
    except Exception as e:  # noqa: BLE001  (classified as the harness child does)
        if isinstance(e, mla_spec_stub.StandInFault) or stub_fault(e):
            out.update(outcome="harness_fault", error=f"{type(e).__name__}: {e}"[:300])
            return out
        raised = next((c["raised"] for c in st.calls if "raised" in c), None)
        out.update(
            outcome=f"aiter:{raised}" if raised else "vllm_raises", error=f"{type(e).__name__}: {e}"[:300]
        )
        return out
    finally:
        out["calls"] = [{**{k: v for k, v in c.items() if k != "tensors"}, "rank": rank} for c in st.calls]
    if lse is None:
        out.update(outcome="vllm_raises", error="forward_mqa returned no LSE under DCP")
        return out
    if fault == "drop-rank-lse" and rank == step.world - 1:
        lse = torch.full_like(lse, float("-inf"))  # this rank's shard dropped from the merge
        out["fault"] = fault
    out.update(outcome="ran", lse_base_on_e=bool(impl.lse_base_on_e))
    out["_merge"] = (attn_out, lse, decode.seq_lens, metadata.query_start_loc[: common.num_reqs + 1])
    return out


def merge_rank(record: dict[str, Any], group: Any) -> None:
    """The layer's combine (mla_attention.py 0.34.0 L1170-1215) with the release's ``cp_lse_ag_out_rs``:
    the rank's merged output for its own heads, into ``record["output"]``."""
    from conformance.dcp_merge import load_merge

    attn_out, lse, seq_lens, qsl = record.pop("_merge")
    merge = load_merge()
    started = time.perf_counter()
    record["output"] = merge.cp_lse_ag_out_rs(
        attn_out, lse, group, is_lse_base_on_e=record["lse_base_on_e"], seq_lens=seq_lens, query_start_loc=qsl
    )
    record.update(stage="done", t_merge_ms=(time.perf_counter() - started) * 1e3)


def stub_fault(e: BaseException) -> bool:
    from spec.realcode.executed.child import stub_fault as is_stub_fault

    return is_stub_fault(e)


# --- the ranks together ---------------------------------------------------------------------


def run_simulated(step: Step, fault: str | None) -> list[dict[str, Any]]:
    """The ranks as threads of this process, one running at a time (the collectives hand the turn on)."""
    from conformance.dcp_merge import Communicator, ThreadCollectives

    coll = ThreadCollectives(step.world)
    records: list[Any] = [None] * step.world

    def body(rank: int) -> None:
        group = Communicator(step.world, rank, coll, types.SimpleNamespace(rank=rank))
        with coll.turn():
            try:
                records[rank] = forward_rank(step, rank, group, fault)
                if records[rank]["outcome"] != "ran":
                    coll.barrier.abort()  # the others stop in the merge's all-gather
                    return
                merge_rank(records[rank], group)
            except threading.BrokenBarrierError:
                records[rank] = {**(records[rank] or {}), "rank": rank, "outcome": "aborted"}
                records[rank].pop("_merge", None)
            except Exception as e:  # noqa: BLE001  (the harness's own fault, reported on the row)
                records[rank] = {
                    "rank": rank,
                    "outcome": "harness_fault",
                    "error": f"{type(e).__name__}: {e}",
                }
                coll.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(step.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def run_distributed(step: Step, fault: str | None) -> list[dict[str, Any]] | None:
    """This process's rank under torch.distributed; rank 0 gets every rank's record (outputs gathered).

    The ranks merge only when every one of them ran ``forward_mqa`` (agreed through the harness's own
    ``all_gather_object``), so one rank's refusal never leaves the others waiting in a collective."""
    import torch
    import torch.distributed as dist

    from conformance.dcp_merge import Communicator

    rank = dist.get_rank()
    group = Communicator(step.world, rank, dist)
    try:
        record = forward_rank(step, rank, group, fault)
    except Exception as e:  # noqa: BLE001
        record = {"rank": rank, "outcome": "harness_fault", "error": f"{type(e).__name__}: {e}"}
    outcomes: list[Any] = [None] * step.world
    dist.all_gather_object(outcomes, record.get("outcome"))
    if all(o == "ran" for o in outcomes):
        merge_rank(record, group)
    record.pop("_merge", None)
    output = record.pop("output", None)
    records: list[Any] = [None] * step.world
    dist.all_gather_object(records, record)  # the harness's own bookkeeping, not vLLM's collectives
    if output is not None:
        parts = [torch.empty_like(output) for _ in range(step.world)]
        dist.all_gather(parts, output.contiguous())
        for r, part in zip(records, parts):
            r["output"] = part
    return records if rank == 0 else None


# --- the verdict ----------------------------------------------------------------------------


def row(step: Step, records: list[dict[str, Any]], ranks: str) -> dict[str, Any]:
    """The step's harness row (:func:`conformance.backends.vllm.judge` reads it)."""
    import torch

    from conformance.backends.vllm_replay import reference
    from conformance.runner import classify

    shape = step.shape
    first = next((r for r in records if r.get("outcome") not in ("ran", "aborted")), records[0])
    for r in records:
        r.pop("_merge", None)
    out: dict[str, Any] = {
        "shape": shape.to_json(),
        "ranks": ranks,
        "stage": first.get("stage"),
        "outcome": first.get("outcome"),
        "threshold": first.get("threshold"),
        "valid_heads": first.get("valid_heads", True),
        "decode": first.get("decode"),
        "calls": [c for r in records for c in r.get("calls", [])],
        "dcp_routes": sorted({(r.get("decode") or {}).get("dcp_route") or "-" for r in records}),
    }
    for key in ("error", "fault"):
        if any(key in r for r in records):
            out[key] = next(r[key] for r in records if key in r)
    if not all("output" in r for r in records):
        return out
    merged = torch.cat([r["output"].float() for r in records], dim=1)  # rank r holds heads r*H..(r+1)*H-1
    gathered = dataclasses.replace(shape, num_heads=shape.num_heads * step.world)
    ref, ref_lowp, _, _ = reference(gathered, step.batch, merged.device)
    verdict = classify(merged, ref, ref_lowp)
    verdict["max_abs_err"] = float((merged - ref).abs().nan_to_num(float("inf")).max())
    verdict["t_merge_ms"] = max(float(r.get("t_merge_ms", 0.0)) for r in records)
    out["verdict"] = verdict
    return out


# --- the child process ----------------------------------------------------------------------


def main() -> None:
    import torch

    from mla_model.registry import load_registry
    from mla_model.shape import Shape
    from spec.realcode.executed.child import STUBS, cuda_started, fork_workers, install

    request = json.loads(sys.stdin.read())
    options = dict(request.get("options") or {})
    ranks = options.get("dcp_ranks", "simulated")
    sys.path.insert(0, str(STUBS))
    distributed = ranks in ("gloo", "nccl")
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device(options.get("device", "cpu"))
    if distributed:
        import torch.distributed as dist

        if ranks == "nccl":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
        world = int(os.environ["WORLD_SIZE"])
        dist.init_process_group(ranks, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    try:
        module = install(
            Path(request["file"]).resolve(), Path(request["tree"]) if request.get("tree") else None
        )
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"fatal": f"cannot import the release over the stubs: {type(e).__name__}: {e}"}))
        sys.exit(2)
    registry = load_registry(request["registry"])
    fault = options.get("inject_fault")
    shapes, seed = request["shapes"], int(request.get("seed", 0))

    def run_slice(a: int, b: int, out: Any) -> bool:
        for i in range(a, b):
            step = prepare(module, Shape.from_json(shapes[i]), registry, options, seed + i, device)
            started = time.time()
            records = run_distributed(step, fault) if distributed else run_simulated(step, fault)
            if records is not None:
                result = row(step, records, ranks)
                result["t_step_s"] = time.time() - started
                out.write(json.dumps(result, default=_plain) + "\n")
                out.flush()
        return True

    workers = min(int(request.get("workers", 1)), len(shapes))
    if distributed or workers < 2 or cuda_started():
        run_slice(0, len(shapes), sys.stdout)
    elif not fork_workers(len(shapes), workers, run_slice):
        sys.exit(2)
    if distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"done": True}))


def _plain(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else str(x)


# --- the parent side ------------------------------------------------------------------------


def execute(
    code: Any,
    shapes: list[Any],
    registry_id: str,
    options: dict[str, Any],
    seed: int = 0,
    timeout: float = 1800,
) -> list[dict[str, Any]]:
    """One row per shape, each run with its ``dcp_world_size`` ranks as ``options["dcp_ranks"]`` says."""
    from spec.realcode.executed.harness import HarnessError, child_env, read_rows, run_module, worker_count

    ranks = options.get("dcp_ranks", "simulated")
    if ranks not in RANKS:
        raise HarnessError(f"dcp_ranks {ranks!r}: one of {', '.join(RANKS)}")
    if ranks == "simulated":
        groups = [list(range(len(shapes)))]
    else:  # one process group per world size
        by_world: dict[int, list[int]] = {}
        for i, s in enumerate(shapes):
            by_world.setdefault(s.dcp_world_size, []).append(i)
        groups = list(by_world.values())
    rows: list[Any] = [None] * len(shapes)
    for idx in groups:
        request = {
            "file": str(code.file),
            "tree": str(code.tree) if code.tree else None,
            "registry": registry_id,
            "shapes": [shapes[i].to_json() for i in idx],
            "options": options,
            "seed": seed,
            # simulated ranks: one process forks workers after importing torch and the release
            "workers": worker_count(len(idx), str(options.get("device", "cpu")))
            if ranks == "simulated"
            else 1,
        }
        env = child_env()
        with tempfile.TemporaryDirectory(prefix="mla-spec-dcp-") as scratch:
            if ranks == "simulated":
                device = str(options.get("device", "cpu"))  # no RLIMIT_AS on a GPU (confine)
                procs = [run_module(MODULE, request, scratch, env, timeout, device)]
            else:
                procs = _launch_ranks(request, scratch, env, shapes[idx[0]].dcp_world_size, timeout)
        got = read_rows(procs[0].stdout, [p.stderr for p in procs], code.label, "the DCP replay")
        for n, (i, r) in enumerate(zip(idx, got)):
            r["_seed"] = seed + n
            rows[i] = r
    return rows


def _launch_ranks(
    request: dict[str, Any], cwd: str, env: dict[str, str], world: int, timeout: float
) -> list[Any]:
    """``world`` rank processes of :data:`MODULE` on one rendezvous, each confined
    (:mod:`spec.realcode.executed.confine`); their completed runs, rank order."""
    from spec.realcode.executed import confine

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    payload = json.dumps(request)
    device = str(request["options"].get("device", "cpu"))

    def rank(r: int) -> Any:
        rank_env = {**env, "RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1"}
        rank_env["MASTER_PORT"] = str(port)
        argv = [sys.executable, "-m", MODULE]
        return confine.run(argv, input=payload, cwd=cwd, env=rank_env, timeout=timeout, device=device)

    with ThreadPoolExecutor(world) as pool:  # every rank started at once: each waits for the others
        return list(pool.map(rank, range(world)))


if __name__ == "__main__":
    main()
