"""Stub ``aiter.mla.mla_decode_fwd``: the ASM decode entry point, recorded (aiter/mla.py)."""

from mla_spec_stub import recorder, strict

__getattr__ = strict("aiter.mla")

mla_decode_fwd = recorder.mla_decode_fwd
