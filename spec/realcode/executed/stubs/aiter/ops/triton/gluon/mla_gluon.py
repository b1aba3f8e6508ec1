"""Stub ``aiter.ops.triton.gluon.mla_gluon.mla_gluon``: the small-head Gluon decode, recorded.

Importable only where the shape has a Gluon build (``Shape.gluon_build``);
elsewhere the import fails as on an AITER without the Gluon kernel.
"""

from mla_spec_stub import STATE, recorder, strict

if not STATE.gluon_build:
    raise ModuleNotFoundError(
        "No module named 'aiter.ops.triton.gluon.mla_gluon'", name="aiter.ops.triton.gluon.mla_gluon"
    )

__getattr__ = strict("aiter.ops.triton.gluon.mla_gluon")

mla_gluon = recorder.mla_gluon
