"""The parameter space: defaults, validation and JSON round trips."""

from __future__ import annotations

import pytest
from hypothesis import given

from mla_model.shape import FIELDS, Shape
from spec.proof.strategies import shapes


def test_query_dtype_defaults_to_fp8_exactly_for_fp8_caches():
    assert Shape(kv_cache_dtype="fp8_e4m3").q_dtype == "fp8"
    assert Shape(kv_cache_dtype="auto").q_dtype == "bf16"
    assert Shape(kv_cache_dtype="fp8", q_dtype="bf16").q_dtype == "bf16"


def test_gluon_build_defaults_to_gfx950():
    assert Shape(arch="gfx950").gluon_build is True
    assert Shape(arch="gfx942").gluon_build is False


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"arch": "gfx1250"}, "arch='gfx1250' is not one of gfx942, gfx950"),
        ({"kv_cache_dtype": "int8"}, "kv_cache_dtype='int8' is not one of"),
        ({"num_heads": 0}, "num_heads=0 is below 1"),
        ({"dcp_world_size": 3}, "dcp_world_size=3 is not one of 1, 2, 4, 8"),
        ({"num_heads": "16"}, "num_heads='16' is not an integer"),
        ({"causal": 1}, "causal=1 is not a boolean"),
    ],
)
def test_bad_fields_are_named_in_the_error(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Shape(**bad)


def test_unknown_json_fields_are_refused():
    with pytest.raises(ValueError, match="unknown Shape field"):
        Shape.from_json({"arch": "gfx950", "heads": 8})


@given(shapes())
def test_json_round_trip(shape):
    assert Shape.from_json(shape.to_json()) == shape
    assert list(shape.to_json()) == [f.name for f in FIELDS]
