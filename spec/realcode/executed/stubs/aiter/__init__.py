"""Stub ``aiter``: AITER's entry points bound to the harness recorder (:mod:`mla_spec_stub.recorder`).

Decode entry points only.  The prefill kernels (``mla_prefill_ps_asm_fwd``,
``mla_reduce_v1``, ``flash_attn_varlen_func``) are absent on purpose: the
release probes them inside ``try/except`` and falls back, as on an AITER
build without them; decode does not reach them.
"""

import torch
from mla_spec_stub import STATE, recorder, strict

__getattr__ = strict("aiter")


class _Dtypes:
    """aiter/utility/dtypes.py: ``fp8`` is e4m3fnuz on gfx942 and e4m3fn on gfx950."""

    bf16 = torch.bfloat16
    fp16 = torch.float16
    fp32 = torch.float32
    i32 = torch.int32

    @property
    def fp8(self):
        return torch.float8_e4m3fnuz if STATE.arch == "gfx942" else torch.float8_e4m3fn


dtypes = _Dtypes()
get_mla_metadata_info_v1 = recorder.get_mla_metadata_info_v1
get_mla_metadata_v1 = recorder.get_mla_metadata_v1


def flash_attn_varlen_func(*args, **kwargs):
    """aiter's prefill attention: imported by AiterMLAImpl.__init__, never reached by decode."""
    raise NotImplementedError("mla-spec harness: prefill (flash_attn_varlen_func) is not driven")
