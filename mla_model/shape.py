"""The parameter space: one decode step as the AITER MLA backend sees it.

A :class:`Shape` holds the inputs that vLLM's ROCm AITER MLA decode routing
reads (sources §1-§14).  Its field
names are used everywhere, JSON included.  :data:`FIELDS` describes each
field's kind and domain once, so the numpy sweep, the z3 encoding, JSON and the
CLI all read the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

ARCHS = ("gfx942", "gfx950")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
# vLLM's is_quantized_kv_cache(D) is exactly D.startswith("fp8") for this
# backend's dtypes (vllm/v1/kv_cache_interface.py; sources §1).
FP8_KV_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
Q_DTYPES = ("bf16", "fp8")
SPEC_METHODS = (
    "none",
    "mtp",
    "deepseek_mtp",
    "eagle",
    "eagle3",
    "draft_model",
    "ngram",
    "dflash",
    "dspark",
)
ASM_PADDING_MODES = ("auto", "gluon", "asm")  # VLLM_ROCM_AITER_MLA_ASM_PADDING, lower-cased
DCP_WORLD_SIZES = (1, 2, 4, 8)

GIB = 1 << 30


@dataclass(frozen=True)
class FieldSpec:
    """How one Shape field is represented: enum, bool or int (with a lower bound)."""

    name: str
    kind: str  # "enum" | "bool" | "int"
    values: tuple = ()  # enum values, or the finite int domain when the int is one of few
    minimum: int = 0  # ints only
    box: tuple = ()  # the values the bounded brute-force box takes
    doc: str = ""

    @property
    def discrete(self) -> bool:
        """Enums and booleans: the fields a counterexample class is told apart by."""
        return self.kind in ("enum", "bool")


@dataclass(frozen=True)
class Shape:
    """One decode step of the AITER MLA backend (sources §1-§14)."""

    arch: str = "gfx950"
    kv_cache_dtype: str = "auto"
    q_dtype: str | None = None  # None: fp8 iff the KV cache is fp8 (sources §2)
    num_heads: int = 16  # MLA query heads per TP rank
    dcp_world_size: int = 1
    max_qo_len: int = 1
    num_reqs: int = 1
    spec_method: str = "none"
    num_spec_tokens: int = 0
    asm_padding_mode: str = "auto"
    gluon_build: bool | None = None  # None: a usable Gluon build iff gfx950
    causal: bool = True
    kv_cache_bytes: int = GIB  # KV cache bytes of one layer

    def __post_init__(self) -> None:
        for spec in FIELDS:
            if (
                spec.kind == "enum"
                and getattr(self, spec.name) not in spec.values
                and not (spec.name == "q_dtype" and self.q_dtype is None)
            ):
                raise ValueError(
                    f"{spec.name}={getattr(self, spec.name)!r} is not one of {', '.join(spec.values)}"
                )
        if self.q_dtype is None:
            default_q = "fp8" if self.kv_cache_dtype in FP8_KV_CACHE_DTYPES else "bf16"
            object.__setattr__(self, "q_dtype", default_q)
        if self.gluon_build is None:
            object.__setattr__(self, "gluon_build", self.arch == "gfx950")
        for spec in FIELDS:
            value = getattr(self, spec.name)
            if spec.kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"{spec.name}={value!r} is not a boolean")
            if spec.kind == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{spec.name}={value!r} is not an integer")
                if value < spec.minimum:
                    raise ValueError(f"{spec.name}={value} is below {spec.minimum}")
                if spec.values and value not in spec.values:
                    raise ValueError(f"{spec.name}={value} is not one of {', '.join(map(str, spec.values))}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shape:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Shape field(s): {', '.join(unknown)}")
        return cls(**data)

    def replace(self, **changes: Any) -> Shape:
        data = self.to_json()
        data.update(changes)
        return Shape(**data)


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "arch", "enum", ARCHS, box=ARCHS, doc="GPU architecture: gfx942 (MI300/MI325) or gfx950 (MI350/MI355)"
    ),
    FieldSpec(
        "kv_cache_dtype",
        "enum",
        KV_CACHE_DTYPES,
        box=KV_CACHE_DTYPES,
        doc="vLLM's --kv-cache-dtype (auto: the model dtype, bf16 here; fp8*: a quantised cache)",
    ),
    FieldSpec("q_dtype", "enum", Q_DTYPES, box=Q_DTYPES, doc="decode query dtype reaching the kernel"),
    FieldSpec("num_heads", "int", minimum=1, box=tuple(range(1, 257)), doc="MLA query heads per TP rank"),
    FieldSpec(
        "dcp_world_size",
        "int",
        DCP_WORLD_SIZES,
        minimum=1,
        box=DCP_WORLD_SIZES,
        doc="decode context-parallel size",
    ),
    FieldSpec(
        "max_qo_len", "int", minimum=1, box=tuple(range(1, 33)), doc="longest decode query of the step"
    ),
    FieldSpec("num_reqs", "int", minimum=1, box=(1, 2, 32), doc="decode requests in the step"),
    FieldSpec("spec_method", "enum", SPEC_METHODS, box=SPEC_METHODS, doc="speculative decoding drafter"),
    FieldSpec("num_spec_tokens", "int", minimum=0, box=tuple(range(0, 16)), doc="num_speculative_tokens (k)"),
    FieldSpec(
        "asm_padding_mode",
        "enum",
        ASM_PADDING_MODES,
        box=ASM_PADDING_MODES,
        doc="VLLM_ROCM_AITER_MLA_ASM_PADDING",
    ),
    FieldSpec("gluon_build", "bool", box=(False, True), doc="a Gluon MLA build that runs on this machine"),
    FieldSpec(
        "causal", "bool", box=(False, True), doc="causal decode block (False: non-causal DSpark draft block)"
    ),
    FieldSpec("kv_cache_bytes", "int", minimum=1, box=(2 * GIB, 2 * GIB + 1), doc="KV cache bytes per layer"),
)

FIELD_BY_NAME = {f.name: f for f in FIELDS}
assert tuple(f.name for f in FIELDS) == tuple(f.name for f in fields(Shape))
