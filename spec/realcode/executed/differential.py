"""Model vs executed code: the model revision's Route against what the release really did, shape by shape.

For each shape the harness (:mod:`.harness`) runs the release's builder,
``build`` and ``forward_mqa`` and records the AITER calls.  Every field below
is read from that record alone (nothing is taken from the model) and compared
with the model's answer for the same shape:

========================  ===========================================================
field                     executed side
========================  ===========================================================
``validity``              heads accepted by the release's ``is_valid_num_heads`` and
                          ``max_qo_len <= reorder_batch_threshold`` of the real builder
``mtp_decode_qlen``       the builder's ``_mtp_decode_qlen``
``metadata_qlen``         ``max_seqlen_qo`` the persistent buffers were sized for
``path``                  the entry point called (Gluon decode/verify, Triton verify,
                          ASM with or without vLLM's work metadata)
``outcome``               ran / the failure AITER raises / vLLM raises
``persistent_metadata``   whether the builder built vLLM's persistent work metadata
                          (``has_persistent_metadata``), on any path
``padded_heads``          heads of the query the ASM kernel got
``output_heads``          heads of the output buffer vLLM gave the ASM kernel
``head_padding``          how those heads map to the query's (none, repeat_interleave, tile)
``kernel_qlen``           ``max_seqlen_q`` passed to the ASM kernel
``kernel``                the code object that request resolves to in the registry
``q_dtype``/``kv_dtype``  dtypes the kernel got
``kv_scale``              whether the cache's KV scale reached the kernel
``v_scale_fix``           whether vLLM rescales the ASM output by k_scale (0.34.0's
                          ``fp8_v_scale_fix``; its AITER probe answered by the registry)
``gluon_rows``            batch rows the Gluon kernel got is one
========================  ===========================================================
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mla_model.decision import decide
from mla_model.derived import MAX_MLA_QUERY_HEADS
from mla_model.failures import FAILURES, NONE, failure_kind
from mla_model.registry import NO_KERNEL, Registry, load_registry, resolved_kernel
from mla_model.revisions.base import Revision
from mla_model.shape import (
    ARCHS,
    ASM_PADDING_MODES,
    DCP_WORLD_SIZES,
    FP8_KV_CACHE_DTYPES,
    GIB,
    KV_CACHE_DTYPES,
    SPEC_METHODS,
    Shape,
)
from spec.realcode.executed.harness import DEFAULTS, ReleaseCode, execute

# The model's failure kind -> the outcome the executed step must show.  A missing Gluon build makes
# vLLM itself raise (``_get_mla_gluon``: "requires an AITER build with the small-head Gluon MLA kernel").
# The harness records "vllm_raises" for anything vLLM raises, "aiter:<kind>" for what AITER raises.
EXPECTED_OUTCOME = {NONE: "ran", **{f.kind: "vllm_raises" for f in FAILURES if f.where == "vllm"}}


@dataclass
class Disagreement:
    field: str
    shape: dict[str, Any]
    executed: Any
    model: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "shape": self.shape, "executed": self.executed, "model": self.model}


@dataclass
class Differential:
    release: str
    revision: str
    registry: str
    shapes: int = 0
    valid: int = 0
    seconds: float = 0.0
    compared: dict[str, int] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    shapes_by_dcp: dict[int, int] = field(default_factory=dict)  # shapes run per dcp_world_size

    def to_json(self, limit: int = 20) -> dict[str, Any]:
        by_field: dict[str, int] = {}
        for d in self.disagreements:
            by_field[d.field] = by_field.get(d.field, 0) + 1
        return {
            "shapes": self.shapes,
            "valid": self.valid,
            "seconds": round(self.seconds, 2),
            "shapes_per_second": round(self.shapes / self.seconds, 1) if self.seconds else None,
            "shapes_by_dcp": {str(k): v for k, v in sorted(self.shapes_by_dcp.items())},
            "compared": self.compared,
            "disagreements_by_field": by_field,
            "disagreements": [d.to_json() for d in self.disagreements[:limit]],
        }


def observed(row: dict[str, Any]) -> dict[str, Any]:
    """The routing facts of one executed step, read from its record only."""
    out: dict[str, Any] = {
        "validity": bool(row.get("valid_heads") and row.get("admitted")),
        "mtp_decode_qlen": row.get("mtp_decode_qlen"),
    }
    if not out["validity"]:
        return out
    sizing = row.get("sizing")
    out["metadata_qlen"] = sizing["max_seqlen_qo"] if sizing else None
    out["outcome"] = _outcome(row)
    if row.get("decode") is not None:
        out["persistent_metadata"] = row["decode"]["has_persistent_metadata"]
    calls = row.get("calls") or []
    if not calls:
        return out
    call = calls[0]
    entry = call["entry"]
    if entry == "mla_gluon":
        out["path"] = "gluon_decode" if (row.get("decode") or {}).get("use_gluon_decode") else "gluon_verify"
        out["gluon_rows"] = call["num_rows"] == 1
        out["kv_scale"] = call["kv_scale"]
    elif entry == "decode_attention_fwd_verify":
        out["path"] = "triton_verify"
    elif entry == "decode_attention_fwd":  # vLLM's split-KV decode: the gfx942 DCP row view (0.33.0 on)
        out["path"] = "triton_dcp_verify"
    elif entry == "segmented_mla_decode_fwd":  # AITER's segmented MLA: the DCP row view
        out["path"] = "segmented_dcp_verify"
    elif entry == "mla_decode_fwd":
        out["path"] = "asm_persistent" if call["persistent"] else "asm_nonpersistent"
        out["padded_heads"] = call["q_shape"][1]
        out["output_heads"] = call["o_shape"][1]
        out["kernel_qlen"] = call["max_seqlen_q"]
        out["q_dtype"], out["kv_dtype"] = call["q_dtype"], call["kv_dtype"]
        out["kv_scale"] = call["kv_scale"]
        out["v_scale_fix"] = bool((row.get("decode") or {}).get("fp8_v_scale_fix", False))
        out["lse"] = bool(call.get("return_lse", False))
        out["cprr"] = "g_kv_indptr" in call.get("extra", ())
        if "head_map" in call:
            out["head_padding"] = padding_kind(call["head_map"])
        if "kernel" in call:
            out["kernel"] = call["kernel"]
    return out


def _outcome(row: dict[str, Any]) -> str:
    outcome = row.get("outcome", "ran")
    return outcome.split(":", 1)[1] if outcome.startswith("aiter:") else outcome


def padding_kind(head_map: list[int]) -> str:
    """none / repeat_interleave / tile / other, from which query head each kernel head copies."""
    m = len(head_map)
    h = max(head_map) + 1 if head_map and min(head_map) >= 0 else 0
    if h and head_map == list(range(m)):
        return "none"
    if h and m % h == 0 and head_map == [i // (m // h) for i in range(m)]:
        return "repeat_interleave"
    if h and head_map == [i % h for i in range(m)]:
        return "tile"
    return "other"


def expected(revision: Revision, reg: Registry, shape: Shape, options: dict[str, Any]) -> dict[str, Any]:
    """The same facts as the model states them, for the fields :func:`observed` reports."""
    valid = bool(revision.is_valid(shape, reg))
    d = decide(revision, reg, shape)
    r = d.route
    out: dict[str, Any] = {"validity": valid, "mtp_decode_qlen": int(r.mtp_decode_qlen)}
    if not valid:
        return out
    out["metadata_qlen"] = int(r.sized_qlen)
    failure = failure_kind(d)
    out["outcome"] = EXPECTED_OUTCOME.get(failure, failure)
    out["persistent_metadata"] = bool(r.use_persistent_metadata)
    out["path"] = r.path
    fp8 = shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES
    true_kv_scale = float(options.get("kv_scale", DEFAULTS["kv_scale"])) if fp8 else 1.0
    if r.path in ("gluon_decode", "gluon_verify"):
        out["gluon_rows"] = bool(r.gluon_batch_is_one)
        out["kv_scale"] = true_kv_scale if r.kv_scale_passed else 1.0
    elif r.path in ("asm_persistent", "asm_nonpersistent"):
        req = r.request
        out["lse"], out["cprr"] = bool(req.lse), bool(req.cprr)
        out["padded_heads"] = int(r.padded_q_heads)
        out["output_heads"] = int(req.padded_heads)
        out["kernel_qlen"] = int(req.kernel_qlen)
        out["q_dtype"], out["kv_dtype"] = req.q_dtype, req.kv_dtype
        out["kv_scale"] = true_kv_scale
        out["v_scale_fix"] = bool(r.v_scale_fix)
        out["head_padding"] = r.head_padding
        name = resolved_kernel(reg, shape.arch, req, d.asm)
        if name != NO_KERNEL:
            out["kernel"] = name
    return out


def compare(rows: Iterable[dict[str, Any]], wants: Iterable[dict[str, Any]], result: Differential) -> None:
    """Each executed record against the model's facts for the same shape (:func:`expected`, in order)."""
    for row, want in zip(rows, wants, strict=True):
        seen = observed(row)
        result.shapes += 1
        dcp = int(row["shape"].get("dcp_world_size", 1))
        result.shapes_by_dcp[dcp] = result.shapes_by_dcp.get(dcp, 0) + 1
        result.valid += int(seen["validity"] and want["validity"])
        if seen["validity"] != want["validity"]:
            result.disagreements.append(
                Disagreement("validity", row["shape"], seen["validity"], want["validity"])
            )
            continue
        for name in sorted(set(seen) | set(want)):
            if name == "validity" or name not in seen or name not in want:
                continue
            result.compared[name] = result.compared.get(name, 0) + 1
            if seen[name] != want[name]:
                result.disagreements.append(Disagreement(name, row["shape"], seen[name], want[name]))


def random_shapes(revision: Revision, reg: Registry, count: int, seed: int) -> list[Shape]:
    """``count`` seeded shapes the model deems valid, plus every invalid one drawn on the way.

    Drawn over the whole box: every arch, KV dtype, mode, drafter (k 1..7), heads
    1..128 (the most any MLA checkpoint has: a deployment fact, not a vLLM rule,
    so it is not compared), qlen 1..16, 1..40 requests, both sides of 2 GiB, Gluon build where it
    can exist, cudagraph modes, causal blocks and every DCP size (half the shapes at dcp 1, heads
    per rank drawn so the gathered heads stay within 128); only shapes inside the revision's
    modelled scope are kept.
    """
    rng = random.Random(seed)
    scope = revision.scope(reg)
    valid: list[Shape] = []
    invalid: list[Shape] = []
    while len(valid) < count:
        arch = rng.choice(ARCHS)
        kv = rng.choice(KV_CACHE_DTYPES)
        method = rng.choice(SPEC_METHODS)
        dcp = rng.choice((1, 1, 1, *DCP_WORLD_SIZES[1:]))
        most = MAX_MLA_QUERY_HEADS // dcp
        shape = Shape(
            arch=arch,
            kv_cache_dtype=kv,
            q_dtype=rng.choice(("bf16", "fp8")) if kv in FP8_KV_CACHE_DTYPES else "bf16",
            num_heads=rng.choice(
                (rng.randint(1, 16), rng.randint(1, most), 16 * rng.randint(1, 8))
                if dcp == 1
                else (rng.randint(1, min(16, most)), rng.randint(1, most))
            ),
            dcp_world_size=dcp,
            max_qo_len=rng.choice((1, 1, rng.randint(1, 16))),
            num_reqs=rng.choice((1, 2, rng.randint(1, 40))),
            spec_method=method,
            num_spec_tokens=0 if method == "none" else rng.randint(1, 7),
            asm_padding_mode=rng.choice(ASM_PADDING_MODES),
            gluon_build=arch == "gfx950" and rng.random() < 0.9,
            causal=rng.random() < 0.8,
            kv_cache_bytes=rng.choice((GIB, 2 * GIB, 2 * GIB + 1, 4 * GIB)),
        )
        if not all(rule(shape) for name, rule in scope if not name.startswith("is_valid_num_heads")):
            continue
        (valid if revision.is_valid(shape, reg) else invalid).append(shape)
    return valid + invalid[: count // 4]


def differential(
    code: ReleaseCode,
    revision: Revision,
    shapes: list[Shape],
    registry_id: str = "aiter-0.1.20",
    options: dict[str, Any] | None = None,
) -> Differential:
    """The release run over ``shapes`` against the model.  The model's side is worked out here while the
    harness child starts (it imports torch, the release and the stubs first) and runs."""
    options = dict(options or {})
    result = Differential(code.label, revision.id, registry_id)
    start = time.perf_counter()
    reg = load_registry(registry_id)
    with ThreadPoolExecutor(1) as pool:
        rows = pool.submit(execute, code, shapes, registry_id, options)
        wants = [expected(revision, reg, shape, options) for shape in shapes]
        compare(rows.result(), wants, result)
    result.seconds = time.perf_counter() - start
    return result
