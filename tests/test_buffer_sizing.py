"""The qlen the persistent buffers are sized for, read from the file (spec.realcode.buffer_sizing, issue 24
item 3): every release sizes them for its own _mtp_decode_qlen, and an edit that sizes them short of what
the persistent gate admits is a metadata-covers-qlen violation the proof finds, not only the executed file."""

from __future__ import annotations

import ast

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_model.registry import load_registry
from mla_model.shape import Shape
from spec.proof.terms import shape_pins, symbolic_shape
from spec.realcode import buffer_sizing
from spec.realcode.extract import RefusedCode, extract
from spec.realcode.source import Source, resolve
from tests.params import regular_and_slow

RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")

SIZED_QLENS_34 = "            for qlen in range(1, self._mtp_decode_qlen + 1)\n"
ONE_SHORT_34 = "            for qlen in range(1, max(self._mtp_decode_qlen - 1, 1) + 1)\n"


def _lifted(text: str, release: str = "0.34.0") -> dict:
    from spec.realcode.revision import RealGates

    source = resolve(release)
    return RealGates(Source(f"{source.label} (as given)", source.path, text), lifting=True).lift()


def _differs(lifted: dict, other) -> z3.CheckSatResult:
    solver = z3.Solver()
    solver.add(*symbolic_shape().domain, lifted["metadata_qlen"] != other)
    return solver.check()


@pytest.mark.network
@pytest.mark.parametrize("release", regular_and_slow(RELEASES, "0.28.0", "0.34.0"))
def test_every_release_sizes_its_buffers_for_its_own_mtp_decode_qlen(release):
    """0.27.1-0.33.0 size once at _mtp_decode_qlen, 0.34.0 once per qlen up to it: read from each file,
    the sized qlen is the lifted _mtp_decode_qlen on every shape of the domain."""
    lifted = _lifted(resolve(release).text, release)
    assert _differs(lifted, lifted["T"]) == z3.unsat


@pytest.mark.network
def test_buffers_sized_one_qlen_short_are_read_as_such_and_violate_metadata_covers_qlen():
    text = resolve("0.34.0").text
    assert text.count(SIZED_QLENS_34) == 1
    lifted = _lifted(text.replace(SIZED_QLENS_34, ONE_SHORT_34))
    T = lifted["T"]
    assert _differs(lifted, z3.If(T - 1 > 1, T - 1, 1)) == z3.unsat

    from spec.realcode.revision import RealGates

    gates = RealGates(Source("one short", resolve("0.34.0").path, text.replace(SIZED_QLENS_34, ONE_SHORT_34)))
    step = Shape(arch="gfx950", spec_method="mtp", num_spec_tokens=3, max_qo_len=4)
    assert gates.metadata_qlen(gates.outputs(step)["built"]) == 3


@pytest.mark.network
@settings(max_examples=40, deadline=None)
@given(
    k=st.integers(0, 7),
    method=st.sampled_from(("none", "mtp", "eagle3", "draft_model", "dspark")),
    dcp=st.sampled_from((1, 2)),
    heads=st.sampled_from((1, 8, 16, 64)),
)
def test_the_concrete_sized_qlen_is_the_lifted_one_at_the_same_shape(k, method, dcp, heads):
    from spec.realcode.revision import lifted_outputs, real_revision

    revision = real_revision("vllm==0.34.0")
    shape = Shape(
        num_heads=heads, spec_method=method, num_spec_tokens=0 if method == "none" else k, dcp_world_size=dcp
    )
    route = revision.route(shape, load_registry("aiter-0.1.20"))
    pins = [(var, value) for _, var, value in shape_pins(symbolic_shape().variables, shape)]
    lifted = z3.simplify(z3.substitute(lifted_outputs(revision)["metadata_qlen"], *pins))
    assert lifted.as_long() == route.sized_qlen


@settings(max_examples=60, deadline=None)
@given(a=st.integers(-3, 6), b=st.integers(-3, 9))
def test_the_largest_of_a_range_is_read_without_running_over_it(a, b):
    """``max(q for q in range(a, b))`` and the expression the reading puts in its place give the same value,
    and raise the same ValueError on an empty range."""
    generator = ast.parse(f"max(q for q in range({a}, {b}))", mode="eval").body
    rewritten = buffer_sizing._largest_over_range(ast.Name("q", ast.Load()), generator.args[0].generators)
    assert rewritten is not None

    def value(node: ast.expr):  # our own constant expressions, compiled here (no input text)
        try:
            return eval(compile(ast.fix_missing_locations(ast.Expression(node)), "<test>", "eval"), {})  # noqa: S307
        except ValueError:
            return ValueError

    assert value(rewritten) == value(generator)


@pytest.mark.network
def test_a_sizing_call_under_an_if_is_refused_naming_its_line():
    source = resolve("0.28.0")
    anchor = "        (\n            (work_meta_data_size, work_meta_data_type),\n"
    assert source.text.count(anchor) == 1
    text = source.text.replace(anchor, "        if self._mtp_decode_qlen > 1:\n            pass\n" + anchor)
    # an `if` holding the call itself: indent the whole assignment under it
    start = text.index("        if self._mtp_decode_qlen > 1:\n            pass\n")
    end = text.index(")\n", text.index("get_mla_metadata_info_v1(", start)) + 2
    block = text[start:end].replace("            pass\n", "")
    body = block.split("\n", 1)[1]
    indented = "".join("    " + line if line.strip() else line for line in body.splitlines(keepends=True))
    text = text[:start] + block.split("\n", 1)[0] + "\n" + indented + text[end:]
    with pytest.raises(
        RefusedCode, match=r"line \d+: the builder's __init__ sizes the persistent buffers inside"
    ):
        buffer_sizing.read(extract(Source("edited", source.path, text)))
