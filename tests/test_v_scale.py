"""The fp8 V-scale correction read from the file (spec.realcode.v_scale, issue 24 item 3): vLLM 0.34.0's
probe range, its guards and the decode metadata's ``fp8_v_scale_fix`` are proved as the file writes them,
so an edit of any of them changes the proof, not only the executed judge's verdict."""

from __future__ import annotations

import ast

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_model.derived import is_quantized_kv_cache
from mla_model.registry import load_registry
from mla_model.revisions.dcp_era import fp8_v_scale_fix
from mla_model.shape import Shape
from spec.proof.terms import shape_pins, symbolic_shape
from spec.realcode import v_scale
from spec.realcode.extract import RefusedCode, extract
from spec.realcode.source import Source, resolve
from spec.realcode.symexec import Explorer, LiftingUnsupported, SymInt
from tests.params import regular_and_slow

REGISTRIES = ("aiter-0.1.19", "aiter-0.1.20")
RANGE_END = "                    + 1,\n                )\n                if _aiter"


def _gates(text: str, lifting: bool = False):
    from spec.realcode.revision import RealGates

    source = resolve("0.34.0")
    return RealGates(Source(source.label + " (edited)", source.path, text), lifting=lifting)


def _model_minus_file(lifted: dict, registry: str):
    """A z3 solver holding 'the file's correction differs from the model's formula somewhere'."""
    sym = symbolic_shape()
    s = sym.view
    reg = load_registry(registry)
    mine = v_scale.registry_answer(lifted["v_scale_fix"], reg, s.arch)
    model = fp8_v_scale_fix(s, reg, lifted["m"], is_quantized_kv_cache(s.kv_cache_dtype), lifted["gate"])
    solver = z3.Solver()
    solver.add(*sym.domain, z3.Xor(mine, model))
    return solver, sym


@pytest.mark.network
@pytest.mark.parametrize("registry", regular_and_slow(REGISTRIES, "aiter-0.1.20"))
def test_the_file_read_correction_of_0340_is_the_models_formula_everywhere(registry):
    """The model's formula (dcp_era.fp8_v_scale_fix, held to the executed release by bind) and 0.34.0's own
    code, lifted, agree on every shape of the domain: z3 finds no shape where they differ."""
    lifted = _gates(resolve("0.34.0").text, lifting=True).lift()
    solver, _ = _model_minus_file(lifted, registry)
    assert solver.check() == z3.unsat


@pytest.mark.network
def test_a_probe_range_cut_short_by_one_is_read_from_the_file():
    """``range(2, min(_mtp_decode_qlen, 4) + 0)``: the last length, ``min(_mtp_decode_qlen, 4)``, is never
    probed; the lifted correction now differs from the release's exactly there (the issue's 'moving its qlen
    range by one')."""
    text = resolve("0.34.0").text
    assert text.count(RANGE_END) == 1
    lifted = _gates(text.replace(RANGE_END, RANGE_END.replace("+ 1", "+ 0")), lifting=True).lift()
    solver, sym = _model_minus_file(lifted, "aiter-0.1.19")
    assert solver.check() == z3.sat
    qlen, last = sym.variables["max_qo_len"], z3.If(lifted["T"] < 4, lifted["T"], 4)
    assert z3.is_true(solver.model().eval(qlen == last))
    solver.add(qlen != last)
    assert solver.check() == z3.unsat


SHAPES = st.builds(
    Shape,
    arch=st.sampled_from(("gfx942", "gfx950")),
    kv_cache_dtype=st.sampled_from(("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
    num_heads=st.sampled_from((1, 8, 12, 16, 32, 64, 128)),
    max_qo_len=st.integers(1, 6),
    spec_method=st.sampled_from(("none", "mtp", "eagle3", "dspark")),
    num_spec_tokens=st.integers(0, 5),
    causal=st.booleans(),
)


@pytest.mark.network
@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, registry=st.sampled_from(REGISTRIES))
def test_the_concrete_correction_is_the_lifted_one_at_the_same_shape(shape, registry):
    """The correction as the sandbox runs it on a concrete shape equals the lifted term evaluated there (the
    lifting must not prove something the code does not do)."""
    from spec.realcode.revision import lifted_outputs, real_revision

    revision = real_revision("vllm==0.34.0")  # one revision per process (real_revision caches it)
    route = revision.route(shape, load_registry(registry))

    lifted = lifted_outputs(revision)
    sym = symbolic_shape()
    term = v_scale.registry_answer(lifted["v_scale_fix"], load_registry(registry), sym.view.arch)
    pins = [(var, value) for _, var, value in shape_pins(sym.variables, shape)]
    lifted_value = z3.simplify(z3.substitute(term, *pins))
    assert z3.is_true(lifted_value) == bool(route.v_scale_fix), shape


@pytest.mark.network
def test_a_release_without_the_correction_reads_none():
    source = resolve("0.33.0")
    assert v_scale.read(extract(source)) is None


@pytest.mark.network
def test_the_correction_names_the_probe_by_what_it_does():
    """The probe is found by the AITER decode it launches: renamed, it is still the probe."""
    source = resolve("0.34.0")
    text = source.text.replace("_aiter_fp8_mla_decode_drops_v_scale", "_measure_v")
    read = v_scale.read(extract(Source("renamed", source.path, text)))
    assert read is not None and read.probe_params == ("num_heads", "qlen", "q_fp8")
    fn = next(
        n for n in read.extracted.module.body if isinstance(n, ast.FunctionDef) and n.name == v_scale.FUNCTION
    )
    assert v_scale.PROBE_STUB in ast.unparse(fn) and "_measure_v" not in ast.unparse(fn)


@pytest.mark.network
def test_a_field_reading_a_local_set_after_the_gate_otherwise_is_refused_naming_it():
    source = resolve("0.34.0")
    text = source.text.replace(
        "            has_persistent_metadata = True\n",
        "            has_persistent_metadata = max_qo_len > 1\n",
    )
    assert text != source.text
    with pytest.raises(RefusedCode, match="reads has_persistent_metadata, set at line"):
        v_scale.read(extract(Source("edited", source.path, text)))


# -- the lifting constructs the correction needs (spec.realcode.symexec) -----------------------------------


@settings(max_examples=30, deadline=None)
@given(lo=st.integers(0, 6), width=st.integers(0, 6))
def test_a_small_symbolic_int_used_as_a_range_bound_takes_each_of_its_values(lo, width):
    """``sum(range(n))`` over ``lo <= n <= lo + width``: one path per value of n, each with n's own sum."""
    n = z3.Int("n")
    paths = Explorer([n >= lo, n <= lo + width]).explore(lambda: sum(range(SymInt(n))))
    assert len(paths) == width + 1
    for conds, value in paths:
        solver = z3.Solver()
        solver.add(n >= lo, n <= lo + width, *conds)
        assert solver.check() == z3.sat
        k = solver.model().eval(n).as_long()
        solver.add(n != k)
        assert solver.check() == z3.unsat  # the path pins n
        assert value == k * (k - 1) // 2


def test_a_symbolic_int_with_too_many_values_is_not_followed():
    n = z3.Int("n")
    with pytest.raises(LiftingUnsupported, match="more than 64 values"):
        Explorer([n >= 0, n <= 1000]).explore(lambda: list(range(SymInt(n))))


def test_membership_of_a_symbolic_int_in_a_lifted_set_decides_each_member():
    from spec.realcode.symexec import LiftedSet

    n = z3.Int("n")
    paths = Explorer([n >= 0, n <= 9]).explore(lambda: SymInt(n) in LiftedSet((2, 3, 3)))
    truth = {}
    for conds, value in paths:
        for k in range(10):
            solver = z3.Solver()
            solver.add(n == k, *conds)
            if solver.check() == z3.sat:
                truth[k] = value
    assert truth == {k: k in (2, 3) for k in range(10)}
