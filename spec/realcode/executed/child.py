"""The harness child: import a release's rocm_aiter_mla.py over the stubs and run one decode step per shape.

Run as ``python -m spec.realcode.executed.child`` in a scratch working
directory (:mod:`spec.realcode.executed.harness` does this).  It reads one
JSON request on stdin, ``{"file", "tree", "registry", "shapes": [...],
"options": {...}}``, and writes one JSON line per shape on stdout, then a
final ``{"done": true}`` line.  A harness fault (a name the stubs lack, a
release that will not import) is one ``{"fatal": "..."}`` line and exit 2.
It beats (:func:`confine.beat`) once torch is loaded, once the release is
imported and after each shape, so the parent's ``--timeout`` bounds the
release's import and each shape; forked workers die with this process.

``vllm`` and ``aiter`` resolve only to the stubs: :class:`StubsOnly` sits
first on ``sys.meta_path`` and answers every ``vllm.*``/``aiter.*`` import
from the stubs folder or refuses it by name, so an installed vLLM or AITER is
never reached.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spec.realcode.executed import confine

STUBS = Path(__file__).resolve().parent / "stubs"
STUBBED_ROOTS = ("vllm", "aiter", "mla_spec_stub")
MODULE = "vllm.v1.attention.backends.mla.rocm_aiter_mla"
HEAD_KEY = 4  # leading words that look a query head up (:func:`head_map`)


class StubsOnly(importlib.abc.MetaPathFinder):
    """Resolve ``vllm``/``aiter`` from the stubs folder only; refuse what is not there, by name."""

    def __init__(self, release_file: Path) -> None:
        self.release_file = release_file
        self.missing: set[str] = set()  # names the stubs folder has no module for (it does not change)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        root = fullname.split(".")[0]
        if root not in STUBBED_ROOTS:
            return None
        if fullname == MODULE:
            return importlib.util.spec_from_file_location(fullname, self.release_file)
        spec = None
        if fullname not in self.missing:  # a release probing an optional AITER name asks per shape
            parts = fullname.split(".")
            spec = importlib.machinery.PathFinder.find_spec(fullname, [str(STUBS.joinpath(*parts[:-1]))])
        if spec is None:
            self.missing.add(fullname)
            raise ModuleNotFoundError(
                f"the release imports {fullname}, which the harness does not stub", name=fullname
            )
        return spec


def install(release_file: Path, tree: Path | None) -> Any:
    """Put the guard in place, point the stubs at the release tree, and import the release module."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("vllm", "aiter")]:
        del sys.modules[name]
    sys.meta_path.insert(0, StubsOnly(release_file))
    import mla_spec_stub

    mla_spec_stub.STATE.tree = tree
    mla_spec_stub.cpu_torch_shims()
    module = importlib.import_module(MODULE)
    if hasattr(module, "_aiter_fp8_mla_decode_drops_v_scale"):  # 0.34.0's probe measures AITER on a GPU
        from mla_spec_stub import recorder

        module._aiter_fp8_mla_decode_drops_v_scale = recorder.drops_v_scale  # type: ignore[attr-defined]
    return module


def clear_caches(module: Any) -> None:
    """Every lru_cache in the release module (arch and build probes), and the Gluon import, per shape."""
    for target in _cached_functions(module):
        target.cache_clear()
    global _MODULES_SEEN
    if len(sys.modules) != _MODULES_SEEN:  # something was imported since: a Gluon module, maybe
        for name in [n for n in sys.modules if n.startswith("aiter.ops.triton.gluon")]:
            if name != "aiter.ops.triton.gluon":
                del sys.modules[name]
        _MODULES_SEEN = len(sys.modules)


_MODULES_SEEN = -1
_CACHED: dict[int, tuple[Any, list[Any]]] = {}


def _cached_functions(module: Any) -> list[Any]:
    """The release module's functions and class attributes with a ``cache_clear``, found once per module."""
    hit = _CACHED.get(id(module))
    if hit is not None and hit[0] is module:
        return hit[1]
    found = []
    for value in list(vars(module).values()):
        targets = [value]
        if isinstance(value, type):
            targets = [getattr(value, n, None) for n in vars(value)]
        found += [t for t in targets if hasattr(t, "cache_clear")]
    _CACHED[id(module)] = (module, found)
    return found


def _error_where(tb: Any, release_file: Path) -> str:
    """The release's innermost frame in a traceback, as ``function:line``."""
    where = ""
    for frame, lineno in traceback.walk_tb(tb):
        if _resolved(frame.f_code.co_filename) == release_file:
            where = f"{frame.f_code.co_name}:{lineno}"
    return where


@functools.cache
def _resolved(filename: str) -> Path:
    return Path(filename).resolve()


def stub_fault(e: BaseException) -> bool:
    """A name the stubs lack (raised directly, or as ``from stub import name``): the harness's fault."""
    import mla_spec_stub

    if isinstance(e, mla_spec_stub.StubMissing) or "harness does not stub" in str(e):
        return True
    return (
        isinstance(e, ImportError)
        and (e.name or "").split(".")[0] in STUBBED_ROOTS
        and "cannot import name" in str(e)
    )


def head_map(original: Any, padded: Any, rest_zero: bool = False) -> list[int]:
    """For each head the kernel sees, the index of the query head it is a copy of (-1: none).

    A copied head holds exactly its source's bits, so heads are matched bit for bit (values, where the
    kernel's query has another dtype than vLLM's: every query dtype the harness makes is exact in
    fp32): each padded head is looked up by its first :data:`HEAD_KEY` words of the first token, which
    tell apart the heads of a random query, and the match is confirmed over the whole head, all heads
    in one comparison.  Where those words match more than one head (equal heads), the lowest whose
    whole head is equal is the source.  ``rest_zero`` says the original is zero past its first token
    (a record-only batch, ``configs.batch``): a head is then a copy where its first token is and the rest
    of it is zero, which one pass over the padded query confirms.
    """
    import torch

    if original.dtype != padded.dtype:
        original, padded = original.float(), padded.float()
    a, b = _words(original), _words(padded)
    by_key: dict[tuple, list[int]] = {}
    for i, k in enumerate(a[0, :, :HEAD_KEY].tolist()):
        by_key.setdefault(tuple(k), []).append(i)
    found = [by_key.get(tuple(k), []) for k in b[0, :, :HEAD_KEY].tolist()]
    first = torch.tensor([c[0] if c else 0 for c in found], dtype=torch.long, device=a.device)
    if rest_zero:
        differs = ((a[0].index_select(0, first) != b[0]).any(dim=1) | b[1:].any(dim=2).any(dim=0)).tolist()
    else:
        differs = (a.index_select(1, first) != b).any(dim=2).any(dim=0).tolist()
    out = []
    for i, (cands, diff) in enumerate(zip(found, differs)):
        if cands and not diff:
            out.append(cands[0])
        else:
            out.append(next((j for j in cands[1:] if torch.equal(a[:, j], b[:, i])), -1))
    return out


def _words(t: Any) -> Any:
    """``t``'s bits as integers, eight bytes a word where a head's row divides into words (fewer
    elements to compare), else one integer per element."""
    import torch

    t = t.contiguous()
    if t.shape[-1] * t.element_size() % 8 == 0:
        return t.view(torch.int64)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


class Step:
    """One decode step of the release for one Shape: builder, build, forward_mqa."""

    def __init__(self, module: Any, release_file: Path, options: dict[str, Any]) -> None:
        self.module = module
        self.release_file = release_file
        self.options = options
        # A replay module (options["replay"], e.g. the conformance backend's) supplies the kernel that
        # fills each recorded call's output, kernel(entry, call), and judges the step's output,
        # verdict(shape, batch, output, row, options) -> dict.  Without one, calls are only recorded.
        name = options.get("replay")
        self.replay = importlib.import_module(name) if name else None

    def enter(self, shape: Any, registry: Any) -> Any:
        """Make the stubs answer for ``shape`` (arch, Gluon build, small-head mode, the registry, the
        replay's kernel), with no call or event recorded yet and the release's caches cleared; the device."""
        import mla_spec_stub
        import torch

        st = mla_spec_stub.STATE
        st.arch, st.asm_padding_mode, st.gluon_build = shape.arch, shape.asm_padding_mode, shape.gluon_build
        # Fault injection for the harness's own tests: the arch probes answer this arch whatever the shape's.
        st.arch = self.options.get("probe_arch", st.arch)
        st.registry, st.calls, st.events = registry, [], []
        st.kernel = self.replay.kernel if self.replay else None
        st.timer = getattr(self.replay, "kernel_ms", None)
        clear_caches(self.module)
        st.device = torch.device(self.options.get("device", "cpu"))
        return st.device

    def run(self, shape: Any, registry: Any, seed: int) -> dict[str, Any]:
        import mla_spec_stub
        import torch

        from spec.realcode.executed import configs

        st = mla_spec_stub.STATE
        device = self.enter(shape, registry)
        out: dict[str, Any] = {"shape": shape.to_json(), "stage": "init"}
        try:
            vllm_config, kv_spec = configs.vllm_config(shape, self.options)
            builder = self.module.AiterMLAMetadataBuilder(kv_spec, [configs.LAYER], vllm_config, device)
            out["threshold"] = builder.reorder_batch_threshold
            out["mtp_decode_qlen"] = getattr(builder, "_mtp_decode_qlen", None)
            # The buffers cover the largest qlen any sizing call asked for (0.34.0 sizes per qlen and
            # keeps the per-dimension maximum, _max_mla_metadata_info L113-124).
            sizings = [e["sizing"] for e in st.events if "sizing" in e]
            out["sizing"] = max(sizings, key=lambda z: z["max_seqlen_qo"]) if sizings else None
            helper = self.module.AiterMLAHelper
            out["valid_heads"] = bool(helper.is_valid_num_heads(shape.num_heads))
            out["admitted"] = 1 <= shape.max_qo_len <= (builder.reorder_batch_threshold or 1)
            if not (out["valid_heads"] and out["admitted"]):
                out["stage"] = "refused"
                return out
            out["stage"] = "build"
            gen = torch.Generator().manual_seed(seed)
            # Under DCP (0.29 on) this is rank 0: the query holds every DCP-gathered head (the MLA layer's
            # all-gather), the cache and metadata the rank's round-robin shard (configs.dcp_rank_inputs).
            dcp = shape.dcp_world_size if hasattr(self.module.AiterMLAImpl, "_decode_num_heads") else 1
            batch = configs.batch(
                shape.replace(num_heads=shape.num_heads * dcp) if dcp > 1 else shape,
                self.options,
                gen,
                device,
                values=self.replay is not None,  # a record-only run computes nothing
            )
            out["_batch"] = batch
            cache, common = (
                configs.dcp_rank_inputs(batch, dcp, 0, self.options)
                if dcp > 1
                else (batch.kv_cache, batch.common)
            )
            metadata = builder.build(0, common)
            decode = metadata.decode
            out["decode"] = {
                "max_qo_len": int(decode.max_qo_len),
                "use_gluon_decode": bool(decode.use_gluon_decode),
                "has_persistent_metadata": bool(getattr(decode, "has_persistent_metadata", False)),
                "fp8_v_scale_fix": bool(getattr(decode, "fp8_v_scale_fix", False)),
            }
            out["metadata"] = next((e["metadata"] for e in st.events if "metadata" in e), None)
            out["stage"] = "forward"
            impl = self.module.AiterMLAImpl(**configs.impl_args(shape))
            layer = configs.layer(shape, self.options, device)
            q = batch.q
            result = impl.forward_mqa(q, cache, metadata, layer)
            out["stage"] = "done"
            out["outcome"] = "ran"
            o = result[0] if isinstance(result, tuple) else result
            out["output_shape"] = list(o.shape)
            if dcp > 1 and (not isinstance(result, tuple) or result[1] is None):
                # the MLA layer's DCP merge asserts the LSE (mla_attention.py 0.34.0 L1170-1171)
                out["outcome"] = "vllm_raises"
                out["error"] = "AssertionError: forward_mqa returned no LSE, which the DCP merge asserts"
                out["where"] = "MLAAttention forward"  # its DCP merge (mla_attention.py)
            elif self.replay and dcp == 1:  # a DCP step's output is one rank's part: conformance.dcp_replay
                out["verdict"] = self.replay.verdict(shape, batch, o, out, self.options)
        except Exception as e:  # noqa: BLE001  (classified below; stub faults re-raised)
            if stub_fault(e):
                raise
            if isinstance(e, mla_spec_stub.StandInFault):
                out["outcome"] = "harness_fault"
                out["error"] = str(e)[:300]
                return out
            raised = next((c["raised"] for c in st.calls if "raised" in c), None)
            out["outcome"] = f"aiter:{raised}" if raised else "vllm_raises"
            out["error"] = f"{type(e).__name__}: {e}"[:300]
            out["where"] = _error_where(e.__traceback__, self.release_file)
        finally:
            out["calls"] = [self._call_json(c, out) for c in st.calls]
            out["log"] = [e for e in st.events if "log" in e]
        return out

    @staticmethod
    def _call_json(call: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        plain = {k: v for k, v in call.items() if k != "tensors"}
        tensors = call.get("tensors") or {}
        batch = out.get("_batch")
        q = tensors.get("q", tensors.get("q_nope"))
        if batch is not None and q is not None and q.dim() == 3 and q.shape[0] == batch.q.shape[0]:
            plain["head_map"] = head_map(batch.q[..., : q.shape[-1]], q, rest_zero=batch.record_only)
        return plain


def main() -> None:
    request = json.loads(sys.stdin.read())
    release_file = Path(request["file"]).resolve()
    tree = Path(request["tree"]) if request.get("tree") else None
    sys.path.insert(0, str(STUBS))
    loaded_torch()
    try:
        module = install(release_file, tree)
    except Exception as e:  # noqa: BLE001
        print(
            json.dumps(
                {"fatal": f"cannot import {release_file.name} over the stubs: {type(e).__name__}: {e}"}
            )
        )
        sys.exit(2)
    confine.beat()
    from mla_model.registry import load_registry

    registry = load_registry(request["registry"])
    options = dict(request.get("options") or {})
    step = Step(module, release_file, options)
    if not run_all(
        step, registry, request["shapes"], int(request.get("seed", 0)), int(request.get("workers", 1))
    ):
        sys.exit(2)
    print(json.dumps({"done": True}))


def run_all(step: Step, registry: Any, shapes: list[dict[str, Any]], seed: int, workers: int) -> bool:
    """Every shape's JSON line on stdout, split over up to ``workers`` forked processes while CUDA has not
    started here; False after a stub fault (its ``fatal`` line printed)."""
    workers = min(workers, len(shapes))
    if workers > 1 and not cuda_started():
        return run_forked(step, registry, shapes, seed, workers)
    return run_shapes(step, registry, shapes, seed, sys.stdout)


def loaded_torch() -> None:
    """Import torch (if it is there), then beat: the time limit on the release's import starts after it."""
    try:
        import torch  # noqa: F401
    except ImportError:  # the release's own import says so, in its fatal line
        pass
    confine.beat()


def cuda_started() -> bool:
    """Whether this process has a CUDA context (the release's import or a stub touched the GPU): a
    worker forked from it could not use the GPU, so its shapes run here, one after another."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def run_shapes(step: Step, registry: Any, shapes: list[dict[str, Any]], seed: int, out: Any) -> bool:
    """One JSON line per shape on ``out``, shape ``i`` seeded ``seed + i``; False after a stub fault (its
    ``fatal`` line written)."""
    from mla_model.shape import Shape

    for i, data in enumerate(shapes):
        try:
            row = step.run(Shape.from_json(data), registry, seed=seed + i)
        except Exception as e:  # noqa: BLE001  (a stub fault: the harness, not the release)
            out.write(json.dumps({"fatal": f"{type(e).__name__}: {e} (shape {data})"}) + "\n")
            return False
        row.pop("_batch", None)
        out.write(json.dumps(row, default=_plain) + "\n")
        confine.beat()
    return True


def run_forked(step: Step, registry: Any, shapes: list[dict[str, Any]], seed: int, workers: int) -> bool:
    """The shapes split over ``workers`` processes forked from this one (:func:`fork_workers`); shape ``i``
    is seeded ``seed + i`` whichever worker runs it."""
    return fork_workers(
        len(shapes), workers, lambda a, b, out: run_shapes(step, registry, shapes[a:b], seed + a, out)
    )


def fork_workers(count: int, workers: int, run_slice: Callable[[int, int, Any], bool]) -> bool:
    """Shapes ``0 .. count - 1`` split over ``workers`` processes forked from this one, so torch and the
    release are imported once, not once per worker: ``run_slice(a, b, out)`` writes the JSON lines of shapes
    ``a .. b - 1`` to ``out`` (a file in the scratch working directory), and the lines are printed here in
    order.  False where a worker met a stub fault (its ``fatal`` line printed) or stopped."""
    bounds = [count * w // workers for w in range(workers + 1)]
    parts = [Path(f"part-{w}.jsonl") for w in range(workers)]
    sys.stdout.flush()
    pids, parent = [], os.getpid()
    for w, (a, b) in enumerate(zip(bounds, bounds[1:])):
        pid = os.fork()
        if pid == 0:  # the worker: its slice, then out (never back into the parent's code or exit handlers)
            status = 2
            try:
                confine.die_with_parent(parent)
                with parts[w].open("w") as out:
                    status = 0 if run_slice(a, b, out) else 2
            finally:
                os._exit(status)
        pids.append(pid)
    statuses = [os.waitpid(pid, 0)[1] for pid in pids]
    for w, status in enumerate(statuses):
        lines = parts[w].read_text().splitlines() if parts[w].exists() else []
        if status != 0:  # a stub fault ends its worker's file with the fatal line; anything else: say so
            stopped = {"fatal": f"the worker for shapes {bounds[w]}..{bounds[w + 1] - 1} stopped ({status})"}
            print(lines[-1] if lines and lines[-1].startswith('{"fatal"') else json.dumps(stopped))
            return False
        sys.stdout.write("".join(line + "\n" for line in lines))
    return True


def _plain(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if hasattr(x, "item"):
        return x.item()
    return str(x)


if __name__ == "__main__":
    main()
