"""The Python and numpy interpretations of one gate definition agree.

Random batches of shapes (valid or not) are evaluated once as a numpy column
table and once shape by shape in plain Python; every route field, every AITER
lookup term, every validity rule and every invariant must agree row by row.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mla_model.decision import decide
from mla_model.logic import EnumTerm
from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS
from mla_model.route import KernelRequest
from mla_model.vectorised import columns_of, shape_arrays
from spec.proof.invariants import INVARIANTS
from spec.proof.strategies import shapes
from tests.params import regular_and_slow


def _at(value, i, n):
    """Row i of a numpy-interpretation value, as a plain Python value."""
    if isinstance(value, EnumTerm):
        return value.values[int(np.broadcast_to(value.term, (n,))[i])]
    if isinstance(value, str):
        return value
    v = np.broadcast_to(np.asarray(value), (n,))[i]
    return bool(v) if v.dtype == bool else int(v)


def _plain(value):
    return (
        value
        if isinstance(value, str)
        else (bool(value) if isinstance(value, (bool, np.bool_)) else int(value))
    )


def _terms(d):
    """Every term the invariants may read, by name."""
    out = {}
    for f in fields(d.route):
        value = getattr(d.route, f.name)
        if isinstance(value, KernelRequest):
            out.update({f"request.{g.name}": getattr(value, g.name) for g in fields(value)})
        elif value is not None:
            out[f"route.{f.name}"] = value
    out.update({f"asm.{f.name}": getattr(d.asm, f.name) for f in fields(d.asm)})
    out["asm.kernel_ok"] = d.asm.kernel_ok
    out.update({f"gluon.{f.name}": getattr(d.gluon, f.name) for f in fields(d.gluon)})
    out["gluon.runs"] = d.gluon.runs
    out.update({f"invariant.{inv.id}": inv.holds(d) for inv in INVARIANTS})
    return out


@pytest.mark.parametrize("registry_id", regular_and_slow(REGISTRY_IDS, REGISTRY_IDS[-1]))
@pytest.mark.parametrize("revision_id", list(REVISIONS))
@settings(max_examples=40, deadline=None)
@given(batch=st.lists(shapes(), min_size=1, max_size=64))
def test_python_and_numpy_agree(revision_id, registry_id, batch):
    revision, registry = REVISIONS[revision_id], load_registry(registry_id)
    n = len(batch)
    view = shape_arrays(columns_of(batch))
    vector = _terms(decide(revision, registry, view))
    vector_valid = [term for _, term in revision.validity(view, registry)]
    for i, shape in enumerate(batch):
        scalar = _terms(decide(revision, registry, shape))
        assert set(scalar) == set(vector)
        for name, value in scalar.items():
            assert _at(vector[name], i, n) == _plain(value), (name, shape)
        for (rule, value), term in zip(revision.validity(shape, registry), vector_valid):
            assert _at(term, i, n) == bool(value), (rule, shape)
