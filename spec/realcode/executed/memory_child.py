"""A harness child that measures the persistent decode buffers: the release's builder over AITER's sizing.

Run as ``python -m spec.realcode.executed.memory_child`` (:mod:`spec.analyses.memory` does this).  It
reads one JSON request on stdin, ``{"file", "tree", "registry", "aiter": {"label", "attention", "mla"},
"shapes": [...], "options": {"max_num_seqs": N, ...}}``, and writes one JSON line per shape, then
``{"done": true}``; a harness fault is one ``{"fatal": "..."}`` line and exit 2.

Per shape, both sides run for real:

* **vLLM's**: the release's ``AiterMLAMetadataBuilder.__init__`` (imported over the stubs exactly as
  :mod:`spec.realcode.executed.child` does), with ``scheduler_config.max_num_seqs`` the option.  It calls
  ``aiter.get_mla_metadata_info_v1`` once (0.27-0.33) or once per qlen up to ``_mtp_decode_qlen``
  (0.34.0, merged by its ``_max_mla_metadata_info``) and allocates its six buffers from the answers;
* **AITER's**: that call is answered by AITER's own ``get_mla_metadata_info_v1``
  (:mod:`spec.realcode.aiter_sizing`), so the buffers the builder holds have AITER's sizes; each is read
  back from the builder (shape, dtype, bytes).  Then AITER's ``mla_decode_fwd`` runs once on meta tensors
  with those buffers, ``max_num_seqs`` requests of ``_mtp_decode_qlen`` tokens (the largest step the
  scheduler can hand decode) and the builder's heads and dtypes: every tensor it allocates (the partial
  outputs and LSEs per split that ``mla_reduce_v1`` folds, the final LSE) is the reduce scratch.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

# The six buffers the builder keeps, as rocm_aiter_mla.py names them (0.27.1 L311-329, 0.34.0 L1275-1293);
# a release without one of them is reported, never guessed at.
BUFFERS = (
    "_mla_work_meta_data",
    "_mla_work_indptr",
    "_mla_work_info_set",
    "_mla_reduce_indptr",
    "_mla_reduce_final_map",
    "_mla_reduce_partial_map",
)
_MLA_DECODE_BUFFERS = dict(
    zip(
        BUFFERS,
        (
            "work_meta_data",
            "work_indptr",
            "work_info_set",
            "reduce_indptr",
            "reduce_final_map",
            "reduce_partial_map",
        ),
    )
)


def _tensor_json(t: Any) -> dict[str, Any]:
    return {
        "shape": list(t.shape),
        "dtype": str(t.dtype).replace("torch.", ""),
        "bytes": t.numel() * t.element_size(),
    }


class Sizer:
    """AITER's functions for one arch, each loaded once with the allocation record it writes to."""

    def __init__(self, aiter: dict[str, str]) -> None:
        self.aiter = aiter
        self.loaded: dict[tuple[str, str], tuple[Any, Any]] = {}

    def function(self, which: str, name: str, arch: str) -> tuple[Any, Any]:
        """``(record, fn)``: AITER's ``name`` from its ``which`` file (attention or mla), its record
        emptied."""
        from aiter import dtypes  # the harness's stub: the dtype objects vLLM passes

        from spec.realcode import aiter_sizing

        key = (name, arch)
        if key not in self.loaded:
            record = aiter_sizing.Allocations()
            self.loaded[key] = (
                record,
                aiter_sizing.load(Path(self.aiter[which]), name, arch, dtypes, record),
            )
        record, fn = self.loaded[key]
        record.tensors.clear()
        return record, fn


def measure(module: Any, shape: Any, registry: Any, options: dict[str, Any], sizer: Sizer) -> dict[str, Any]:
    import aiter
    import mla_spec_stub
    import torch

    from spec.realcode.executed import configs
    from spec.realcode.executed.child import clear_caches

    st = mla_spec_stub.STATE
    st.arch, st.asm_padding_mode, st.gluon_build = shape.arch, shape.asm_padding_mode, shape.gluon_build
    st.registry, st.calls, st.events, st.kernel = registry, [], [], None
    clear_caches(module)
    out: dict[str, Any] = {"shape": shape.to_json(), "sizing": [], "buffers": None, "scratch": None}
    recorder = aiter.get_mla_metadata_info_v1
    seen: list[tuple[tuple, dict]] = []

    def sizing(*args: Any, **kwargs: Any) -> Any:
        recorder(*args, **kwargs)  # the harness's record of the call, as vLLM made it
        seen.append((args, kwargs))
        _, fn = sizer.function("attention", "get_mla_metadata_info_v1", shape.arch)
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            out["aiter_error"] = f"AITER's get_mla_metadata_info_v1 raised {type(e).__name__}: {e}"[:300]
            raise

    aiter.get_mla_metadata_info_v1 = sizing
    try:
        vllm_config, kv_spec = configs.vllm_config(shape, options)
        builder = module.AiterMLAMetadataBuilder(kv_spec, [configs.LAYER], vllm_config, torch.device("meta"))
    except Exception as e:  # noqa: BLE001  (vLLM or AITER refusing the shape: reported, not fatal)
        from spec.realcode.executed.child import stub_fault

        if stub_fault(e):
            raise
        out["error"] = out.get("aiter_error") or f"the builder raised {type(e).__name__}: {e}"[:300]
        return out
    finally:
        aiter.get_mla_metadata_info_v1 = recorder
        out["sizing"] = [e["sizing"] for e in st.events if "sizing" in e]
    out["threshold"] = builder.reorder_batch_threshold
    out["mtp_decode_qlen"] = getattr(builder, "_mtp_decode_qlen", None)
    missing = [b for b in BUFFERS if not isinstance(getattr(builder, b, None), torch.Tensor)]
    if missing:
        out["error"] = f"the release's builder keeps no {missing[0]}"
        return out
    out["buffers"] = {b: _tensor_json(getattr(builder, b)) for b in BUFFERS}
    if not seen:
        return out
    args, kwargs = max(seen, key=lambda c: int(c[0][1]))  # the largest qlen the buffers were sized for
    out["scratch"] = scratch(builder, shape, args, int(options["max_num_seqs"]), sizer)
    return out


def scratch(builder: Any, shape: Any, sizing_args: tuple, max_num_seqs: int, sizer: Sizer) -> dict[str, Any]:
    """AITER's ``mla_decode_fwd`` on meta tensors: the largest decode step with the builder's buffers."""
    import torch

    from spec.realcode.executed import configs

    _, qlen, heads, q_dtype, kv_dtype = sizing_args[:5]
    rows = max_num_seqs * int(qlen)
    meta = torch.device("meta")
    try:
        record, fn = sizer.function("mla", "mla_decode_fwd", shape.arch)
    except Exception as e:  # noqa: BLE001  (AITER's file without the function, or unreadable)
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    out_dtype = getattr(builder, "decode_attn_out_dtype", torch.bfloat16)
    args = {
        "q": torch.empty(rows, heads, configs.HEAD_SIZE, dtype=q_dtype, device=meta),
        "kv_buffer": torch.empty(rows, 1, 1, configs.HEAD_SIZE, dtype=kv_dtype, device=meta),
        "o": torch.empty(rows, heads, configs.KV_LORA_RANK, dtype=out_dtype, device=meta),
        "qo_indptr": torch.empty(max_num_seqs + 1, dtype=torch.int32, device=meta),
        "kv_indptr": torch.empty(max_num_seqs + 1, dtype=torch.int32, device=meta),
        "kv_indices": torch.empty(rows, dtype=torch.int32, device=meta),
        "kv_last_page_lens": torch.empty(max_num_seqs, dtype=torch.int32, device=meta),
        "max_seqlen_q": int(qlen),
        "sm_scale": configs.HEAD_SIZE**-0.5,
        "q_scale": torch.empty(1, dtype=torch.float32, device=meta),
        "kv_scale": torch.empty(1, dtype=torch.float32, device=meta),
        **{
            name: torch.empty_like(getattr(builder, attr), device="meta")
            for attr, name in _MLA_DECODE_BUFFERS.items()
        },
    }
    accepted = inspect.signature(fn).parameters
    try:
        fn(**{k: v for k, v in args.items() if k in accepted})
    except Exception as e:  # noqa: BLE001  (AITER refusing the step: reported with its message)
        return {"error": f"AITER's mla_decode_fwd raised {type(e).__name__}: {e}"[:300], "rows": rows}
    return {
        "rows": rows,
        "qlen": int(qlen),
        "heads": int(heads),
        "tensors": record.tensors,
        "bytes": record.bytes,
    }


def _fatal(message: str) -> None:
    print(json.dumps({"fatal": message}))
    sys.exit(2)


def main() -> None:
    from mla_model.registry import load_registry
    from mla_model.shape import Shape
    from spec.realcode.executed import confine
    from spec.realcode.executed.child import STUBS, install, loaded_torch

    request = json.loads(sys.stdin.read())
    file = Path(request["file"]).resolve()
    sys.path.insert(0, str(STUBS))
    loaded_torch()  # beats: the --timeout of the release's import starts here (confine)
    try:
        module = install(file, Path(request["tree"]) if request.get("tree") else None)
    except Exception as e:  # noqa: BLE001  (the release will not import over the stubs)
        _fatal(f"cannot import {file.name} over the stubs: {type(e).__name__}: {e}")
    confine.beat()
    registry, sizer = load_registry(request["registry"]), Sizer(request["aiter"])
    for data in request["shapes"]:
        try:
            row = measure(module, Shape.from_json(data), registry, dict(request.get("options") or {}), sizer)
        except Exception as e:  # noqa: BLE001  (a stub fault: the harness, not the release)
            _fatal(f"{type(e).__name__}: {e} (shape {data})")
        print(json.dumps(row))
        confine.beat()
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
