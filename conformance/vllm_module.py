"""The drop-in module for a vLLM checkout's tests/v1/attention/ (``mla-spec cases --style vllm``).

A pure function of (revision, registry, cases): a rerun writes the same bytes.
Per case it pins the model's facts for every routing decision
(:data:`conformance.drop_in.DECISIONS`), and it names one solver-found case
per route for a numeric replay against the float32 reference.  What the
module runs on (the release executed here through :mod:`conformance.vllm_shim`,
or nothing yet inside a vLLM checkout) is said in the module's own docstring.
"""

from __future__ import annotations

import pprint
from typing import Any

from conformance.drop_in import DECISIONS, pinned
from conformance.expect import predicted
from mla_model.case import Case, expected_outcome
from mla_model.registry import Registry, load_registry
from mla_model.revisions import RELEASE_OF_REVISION, get_revision
from mla_model.revisions.base import Revision
from mla_model.shape import FP8_KV_CACHE_DTYPES, Shape
from spec.realcode.executed.differential import expected

# What each pinned decision's test says it checks (its docstring in the module).
TEST_DOCS = {
    "gluon_predicates": "use_gluon_decode / use_gluon_verify: which Gluon kernel, if any, the step called.",
    "persistent_gate": "The persistent-metadata gate, and the qlen the persistent buffers are sized for.",
    "triton_verify": "Whether the step went to vLLM's Triton verify kernel.",
    "dcp_route": "Under decode context parallelism: the route, and whether it returns the LSE / runs CPRR.",
    "asm_request": "The ASM kernel request: q/kv dtype, the heads and qlen it gets, persistent, LSE, CPRR.",
    "outcome": "Whether the step is a decode step, and whether it runs, AITER refuses it or vLLM raises.",
    "threshold": "reorder_batch_threshold as the release's builder sets it, and metadata sized to cover it.",
}


def in_scope(revision: Revision, reg: Registry, shape: Shape) -> bool:
    """Whether the model revision states anything about ``shape`` (its modelled scope; DCP from 0.29)."""
    return all(
        bool(rule(shape)) for name, rule in revision.scope(reg) if not name.startswith("is_valid_num_heads")
    )


def model_pins(revision: Revision, reg: Registry, shape: Shape) -> dict[str, dict[str, Any]]:
    """What ``revision`` pins for one shape, per decision."""
    threshold = int(revision.reorder_batch_threshold(shape))
    return pinned(expected(revision, reg, shape, {}), threshold, shape.to_json())


def numeric_cases(revision_id: str, cases: list[Case]) -> list[Case]:
    """One case per route (path, fp8 cache or not) whose class the model predicts to pass on the ``vllm``
    backend (DCP 1, causal: one process computes the whole step).  Within a route, the case that tells
    this revision from the previous release's best: first one that the previous revision sends into a
    silent wrong output, then one it makes crash, then one whose facts it states differently, then the
    first by id."""
    before = previous_revision(revision_id)
    rev = get_revision(revision_id)
    by_route: dict[tuple[str, bool], list[Case]] = {}
    for c in cases:
        if predicted(c) == "PASS" and c.shape.dcp_world_size == 1 and c.shape.causal:
            fp8 = c.shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES
            by_route.setdefault((c.expected_route["path"], fp8), []).append(c)

    def rank(c: Case) -> tuple[int, str]:
        reg = load_registry(c.registry)
        if before is None or not in_scope(before, reg, c.shape):
            return (3, c.id)
        status = expected_outcome(before, reg, c.shape)["status"]
        if status in ("MISMATCH", "NAN"):
            return (0, c.id)
        if status != "PASS":
            return (1, c.id)
        return (2 if model_pins(before, reg, c.shape) != model_pins(rev, reg, c.shape) else 3, c.id)

    return [min(group, key=rank) for _, group in sorted(by_route.items())]


def released_revisions() -> list[str]:
    """The revisions with a vLLM release, oldest first."""
    return list(RELEASE_OF_REVISION)


def previous_revision(revision_id: str) -> Revision | None:
    """The revision of the release before ``revision_id``'s (None for the oldest or an unreleased one)."""
    order = released_revisions()
    if revision_id not in order or order.index(revision_id) == 0:
        return None
    return get_revision(order[order.index(revision_id) - 1])


def _ids(values: list[str], name: str) -> str:
    body = "".join(f"    {v!r},\n" for v in values)
    return f"{name} = [\n{body}]\n"


def _decision_test(decision: str, ids: list[str]) -> str:
    const = f"{decision.upper()}_CASES"
    return f'''{_ids(ids, const)}

@pytest.mark.parametrize("case_id", {const})
def test_{decision}(observed, case_id):
    """{TEST_DOCS[decision]}"""
    _check(observed, case_id, "{decision}")
'''


def render_vllm_module(revision: str, registry: str, cases: list[Case]) -> str:
    """The module's text: the model's pins for every case, one test per decision, the numeric replay."""
    rev, reg = get_revision(revision), load_registry(registry)
    pins = {
        c.id: {"shape": c.shape.to_json(), **model_pins(rev, reg, c.shape)}
        for c in sorted(cases, key=lambda c: c.id)
    }
    numeric = [c.id for c in numeric_cases(revision, cases)]
    release = RELEASE_OF_REVISION.get(revision, "none (this revision was never released)")
    per_decision = {d: [i for i, p in pins.items() if d in p] for d in DECISIONS}
    tests = "\n\n".join(_decision_test(d, ids) for d, ids in per_decision.items() if ids)
    return f'''# SPDX-License-Identifier: Apache-2.0
"""ROCm AITER MLA decode routing and numerics: edge shapes mla-spec found for {revision} ({registry}).

Generated by ``mla-spec cases --style vllm --revision {revision}``; do not edit.
vLLM release of this revision: {release}.

Each case (a shape found by z3: MC/DC boundary pairs, invariant counterexamples, threshold
boundaries) pins, per routing decision, what mla-spec's model of {revision} says: which Gluon
kernel runs, the persistent-metadata gate and the qlen the buffers are sized for, the Triton
verify, the DCP route, the ASM kernel request, the step's outcome, and the
``reorder_batch_threshold`` the release's own builder sets (no formula is written here).
The observed side is one decode step of the release per case: ``AiterMLAMetadataBuilder``,
``build`` and ``AiterMLAImpl.forward_mqa``, with AITER's entry points recorded.  The numeric
part replays one case per route and compares the step's output with a float32 reference of the
true inputs.

Where it runs:

* Through ``python -m conformance.vllm_shim --vllm RELEASE THIS_FILE`` (mla-spec): the release's
  rocm_aiter_mla.py is executed, unchanged, over mla-spec's stub vllm/aiter packages in a confined
  child; AITER's calls are checked against mla-spec's AITER registry and, for the numeric part,
  filled by CPU (or CUDA) stand-ins inside each kernel's contract.  This is the path mla-spec's
  own tests execute, on every release 0.27.1 ... 0.34.0.
* Inside a vLLM checkout (``tests.v1.attention.utils`` imports) the module skips: driving the real
  backend there (vLLM's batch spec and common metadata, the real ROCm kernels) has not been
  written, because no ROCm machine was available to check it on.  Nothing of that path was executed.
"""

import sys

import pytest

REVISION = "{revision}"
REGISTRY = "{registry}"
SHIM = "mla_spec_drop_in"  # the module python -m conformance.vllm_shim provides

# case id -> the shape and, per decision, the facts the model pins
PINNED = {pprint.pformat(pins, width=108, sort_dicts=True)}

# One solver-found case per route (path, fp8 cache or not), each predicted to pass.
{_ids(numeric, "NUMERIC_CASES")}

def _harness():
    """What runs the release: vLLM's own test utilities inside a checkout, else the mla-spec shim."""
    try:
        import tests.v1.attention.utils  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("in a vLLM checkout: driving the real ROCm backend is not written (see the docstring)")
    if SHIM not in sys.modules:
        pytest.skip("run inside a vLLM checkout, or through python -m conformance.vllm_shim --vllm RELEASE")
    return sys.modules[SHIM]


@pytest.fixture(scope="module")
def observed():
    ids = list(PINNED)
    return dict(zip(ids, _harness().observe(REGISTRY, [PINNED[i]["shape"] for i in ids])))


@pytest.fixture(scope="module")
def replayed():
    return dict(zip(NUMERIC_CASES, _harness().replay(REGISTRY, [PINNED[i]["shape"] for i in NUMERIC_CASES])))


def _check(observed, case_id, decision):
    want = PINNED[case_id][decision]
    got = {{k: observed[case_id].get(k) for k in want}}
    assert got == want, f"{{case_id}} {{decision}}: the release gives {{got}}, {revision} pins {{want}}"


{tests}

@pytest.mark.parametrize("case_id", NUMERIC_CASES)
def test_numeric_matches_float32_reference(replayed, case_id):
    """The step's output against the float32 reference of the true inputs (PASS within tolerance)."""
    result = replayed[case_id]
    assert result["status"] == "PASS", f"{{case_id}}: {{result['status']}}: {{result['detail']}}"
'''
