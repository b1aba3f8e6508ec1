"""A real revision's lifted gates over a column table (issue 24 item 5: ``hits:`` for a file).

The numpy interpretation decides the deployments' shapes for ``hits:``; a release's or a file's gates are
lifted z3 terms, read over the table by :func:`spec.analyses.shape_grid.evaluate_z3`.  z3 is the judge of
what a term means: every lifted output of a release, evaluated over random rows of the brute-force box,
must equal z3's own evaluation of it on each row.  End to end, a release's real gates hit the same
deployments in every class as the model revision ``bind`` proves equal to it.
"""

from __future__ import annotations

import numpy as np
import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.shape import FIELDS
from spec.analyses.hits import classes
from spec.analyses.shape_grid import evaluate_z3
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.terms import symbolic_shape
from spec.realcode.v_scale import registry_answer

RELEASES = ("0.28.0", "0.34.0")


def _lifted(release: str) -> dict:
    from spec.realcode.revision import lifted_outputs, real_revision

    return lifted_outputs(real_revision(f"vllm=={release}"))


def view():
    return symbolic_shape().view


def _rows(draw_values: list[dict]) -> dict[str, np.ndarray]:
    out = {}
    for spec in FIELDS:
        col = [row[spec.name] for row in draw_values]
        out[spec.name] = np.array(col, dtype=bool if spec.kind == "bool" else np.int64)
    return out


def _field(spec):
    if spec.kind == "enum":
        return st.integers(0, len(spec.values) - 1)
    if spec.kind == "bool":
        return st.booleans()
    return st.sampled_from(spec.box)


ROW = st.fixed_dictionaries({spec.name: _field(spec) for spec in FIELDS})


@pytest.mark.network
@pytest.mark.parametrize("release", RELEASES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, min_size=1, max_size=40))
def test_lifted_terms_over_columns_equal_z3s_evaluation_row_by_row(release, rows):
    lifted = {k: v for k, v in _lifted(release).items() if isinstance(v, z3.ExprRef) and k != "v_scale_fix"}
    if "v_scale_fix" in _lifted(release):  # the probe's answers are the registry's (spec.realcode.v_scale)
        for registry in ("aiter-0.1.19", "aiter-0.1.20"):
            answered = registry_answer(_lifted(release)["v_scale_fix"], load_registry(registry), view().arch)
            lifted[f"v_scale_fix {registry}"] = answered
    got = dict(zip(lifted, evaluate_z3(list(lifted.values()), _rows(rows))))
    variables = symbolic_shape().variables
    for i, row in enumerate(rows):
        pins = [
            (variables[s.name], z3.BoolVal(row[s.name]) if s.kind == "bool" else z3.IntVal(row[s.name]))
            for s in FIELDS
        ]
        for name, term in lifted.items():
            want = z3.simplify(z3.substitute(term, *pins))
            value = np.broadcast_to(got[name], (len(rows),))[i]
            expected = z3.is_true(want) if z3.is_bool(want) else want.as_long()
            assert value == expected, (release, name, row)


def test_z3s_euclidean_div_and_mod_and_an_unknown_operation_named():
    """z3's div and mod are Euclidean (numpy's floor division differs for a negative divisor, which an
    edited file may have); what numpy cannot mean is refused by name, never guessed."""
    a, b = z3.Ints("num_heads max_qo_len")
    env = {"num_heads": np.array([-7, 7, -7, 7]), "max_qo_len": np.array([2, 2, -2, -2])}
    d, m = evaluate_z3([a / b, a % b], env)
    for i in range(4):
        x, y = z3.IntVal(int(env["num_heads"][i])), z3.IntVal(int(env["max_qo_len"][i]))
        assert (d[i], m[i]) == (z3.simplify(x / y).as_long(), z3.simplify(x % y).as_long())
    f = z3.Function("f", z3.IntSort(), z3.IntSort())
    with pytest.raises(ValueError, match="'f'"):
        evaluate_z3([f(a)], env)
    with pytest.raises(ValueError, match="division by zero"):
        evaluate_z3([a / b], {"num_heads": np.array([1]), "max_qo_len": np.array([0])})


@pytest.mark.network
@pytest.mark.parametrize("release, model", [("0.28.0", "vllm-0.28"), ("0.34.0", "vllm-0.34")])
def test_a_releases_real_gates_hit_what_its_bound_model_hits_in_every_class(release, model):
    from spec.realcode.revision import real_revision

    real = real_revision(f"vllm=={release}")
    for registry in ("aiter-0.1.19", "aiter-0.1.20"):
        for inv in INVARIANT_BY_ID:
            assert classes(real, registry, inv) == classes(get_revision(model), registry, inv), (
                inv,
                registry,
            )
