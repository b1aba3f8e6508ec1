"""Stub ``vllm.platforms.rocm`` arch probes (vllm/platforms/rocm.py): answered from the shape's arch.

``get_cdna_version``: 3 on gfx942 (CDNA3), 4 on gfx950 (CDNA4).
"""

from mla_spec_stub import STATE, strict

__getattr__ = strict("vllm.platforms.rocm")


def on_gfx950() -> bool:
    return STATE.arch == "gfx950"


def on_gfx942() -> bool:
    return STATE.arch == "gfx942"


def get_cdna_version() -> int:
    return {"gfx942": 3, "gfx950": 4}[STATE.arch]
