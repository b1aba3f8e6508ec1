"""A test case: one concrete decode step and the route a gate revision gives it.

Cases are written by ``mla-spec cases`` (spec/cases.py, which needs z3) and
read by the generated pytest modules and by the GPU conformance runner, which
has no z3; so this module depends on nothing but the model.

One Case per JSON line, keys in this order::

    {"id", "shape", "expected_route", "origin", "revision", "registry", "seed"}

``expected_route`` is :func:`expected_route`: the route fields a test pins and
a replay needs (path, the gates, metadata sizing, head padding, what AITER is
asked for and the kernel it finds).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from mla_model.decision import decide
from mla_model.registry import Registry, kernel_name
from mla_model.revisions.base import Revision
from mla_model.shape import FP8_KV_CACHE_DTYPES, GIB, Shape


@dataclass(frozen=True)
class Case:
    id: str
    shape: Shape
    expected_route: dict[str, Any]
    origin: str  # the invariant, decision or condition the shape was found for
    revision: str
    registry: str
    seed: int  # seeds the replay's random inputs

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "shape": self.shape.to_json(),
            "expected_route": self.expected_route,
            "origin": self.origin,
            "revision": self.revision,
            "registry": self.registry,
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Case":
        missing = sorted({"id", "shape", "expected_route", "origin", "revision", "registry", "seed"} - set(data))
        if missing:
            raise ValueError(f"case {data.get('id', '?')!r} lacks {', '.join(missing)}")
        return cls(data["id"], Shape.from_json(data["shape"]), data["expected_route"], data["origin"],
                   data["revision"], data["registry"], int(data["seed"]))


def expected_route(revision: Revision, registry: Registry, shape: Shape) -> dict[str, Any]:
    """The route fields a case pins, as plain JSON values."""
    d = decide(revision, registry, shape)
    r, a = d.route, d.asm
    on_asm = r.path.startswith("asm")
    return {
        "path": r.path,
        "use_gluon_decode": bool(r.use_gluon_decode),
        "use_gluon_verify": bool(r.use_gluon_verify),
        "use_persistent_metadata": bool(r.use_persistent_metadata),
        "mtp_decode_qlen": int(r.mtp_decode_qlen),
        "head_padding": r.head_padding,
        "padded_q_heads": int(r.padded_q_heads),
        "kernel_qlen": int(r.request.kernel_qlen),
        "q_dtype": r.request.q_dtype,
        "kv_dtype": r.request.kv_dtype,
        "causal": bool(r.request.causal),
        "aiter_persistent": bool(a.persistent) if on_asm else None,
        "kernel": (kernel_name(registry, shape.arch, r.request, a) if on_asm else None),
        "vllm_raises": bool(r.vllm_raises),
    }


def case_id(shape: Shape) -> str:
    """A readable id that tells shapes apart: ``gfx950-fp8-h12-q5-dspark3-auto`` plus what is not default."""
    drafter = "nospec" if shape.spec_method == "none" else f"{shape.spec_method}{shape.num_spec_tokens}"
    parts = [shape.arch, shape.kv_cache_dtype, f"h{shape.num_heads}", f"q{shape.max_qo_len}", drafter,
             shape.asm_padding_mode]
    default_q = "fp8" if shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES else "bf16"
    if shape.q_dtype != default_q:
        parts.append(f"q{shape.q_dtype}")
    if shape.num_reqs != 1:
        parts.append(f"b{shape.num_reqs}")
    if shape.dcp_world_size != 1:
        parts.append(f"dcp{shape.dcp_world_size}")
    if shape.gluon_build != (shape.arch == "gfx950"):
        parts.append("gluonbuild" if shape.gluon_build else "nogluonbuild")
    if shape.full_cudagraph:
        parts.append("fullcg")
    if not shape.causal:
        parts.append("noncausal")
    if shape.kv_cache_bytes != GIB:
        over = shape.kv_cache_bytes - 2 * GIB
        parts.append("kv2g" if over == 0 else f"kv2g{over:+d}" if abs(over) < GIB else f"kv{shape.kv_cache_bytes}b")
    return "-".join(parts)


def case_seed(case_id_: str) -> int:
    """A stable seed from the id (crc32), so the same case gets the same inputs everywhere."""
    return zlib.crc32(case_id_.encode())


def write_cases(cases: Iterable[Case], path: Path) -> None:
    """One case per line, keys in a fixed order, a newline at the end: byte-identical reruns."""
    text = "".join(json.dumps(c.to_json(), separators=(",", ":")) + "\n" for c in cases)
    Path(path).write_text(text)


def read_cases(path: Path) -> list[Case]:
    """The cases of a JSONL file; a bad line is a ValueError naming the file and line."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(Case.from_json(json.loads(line)))
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}:{n}: {e}") from None
    return out
