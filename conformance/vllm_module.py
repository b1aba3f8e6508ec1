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
from conformance.vllm_shim import REPLAY_KV_LEN
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


# The numeric part of every module: fixed text (no case or revision in it), kept out of the f-string.
NUMERIC_PART = '''def _reference(q, kv, common, block_size, scale):
    """Float32 MLA decode: each query token attends causally to its request's keys (read through the block
    table, all HEAD_SIZE wide) and takes the first KV_LORA_RANK values of each as its value."""
    starts = common.query_start_loc_cpu.tolist()
    table = common.block_table_tensor.cpu().long()
    out = torch.empty(q.shape[0], q.shape[1], KV_LORA_RANK)
    for r, n in enumerate(common.seq_lens.cpu().tolist()):
        a, b = starts[r], starts[r + 1]
        pos = torch.arange(n)
        keys = kv[table[r, pos // block_size] * block_size + pos % block_size]
        scores = torch.einsum("thd,nd->thn", q[a:b], keys) * scale
        last = n - (b - a) + torch.arange(b - a)  # each query token's own position
        scores = scores.masked_fill(pos[None, None, :] > last[:, None, None], float("-inf"))
        out[a:b] = torch.softmax(scores, dim=-1) @ keys[:, :KV_LORA_RANK]
    return out


@pytest.mark.parametrize("case_id", NUMERIC_CASES)
def test_numeric_matches_float32_reference(case_id):
    """One decode step built with vLLM's test utilities, its output against the float32 reference."""
    shape = PINNED[case_id]["shape"]
    env = _harness().numeric(REGISTRY, shape)
    from tests.v1.attention.utils import BatchSpec, create_common_attn_metadata

    reqs, qlen, heads = shape["num_reqs"], shape["max_qo_len"], shape["num_heads"]
    batch = BatchSpec(seq_lens=[KV_LEN + qlen + 7 * r % 13 for r in range(reqs)], query_lens=[qlen] * reqs)
    common = create_common_attn_metadata(batch, env.block_size, env.device, arange_block_indices=True)
    builder = env.backend.get_builder_cls()(env.kv_cache_spec, [env.layer_name], env.vllm_config, env.device)
    metadata = builder.build(0, common)
    gen = torch.Generator().manual_seed(0)
    blocks = common.block_table_tensor.numel()  # arange_block_indices: every request its own blocks
    kv = torch.randn(blocks * env.block_size, HEAD_SIZE, generator=gen) * 0.5 / env.kv_scale
    kv = kv.to(env.kv_dtype)
    q = (torch.randn(reqs * qlen, heads, HEAD_SIZE, generator=gen) / env.q_scale).to(env.q_dtype)
    impl = env.backend.get_impl_cls()(**env.impl_args)
    cache = kv.view(blocks, env.block_size, HEAD_SIZE).to(env.device)
    result = impl.forward_mqa(q.to(env.device), cache, metadata, env.layer)
    out = (result[0] if isinstance(result, tuple) else result).float().cpu()
    # The true inputs: what the cache and the query hold, dequantised by the scales the layer carries.
    q_true, kv_true = q.float() * env.q_scale, kv.float() * env.kv_scale
    ref = _reference(q_true, kv_true, common, env.block_size, env.impl_args["scale"])
    assert out.shape == ref.shape, f"{case_id}: output {tuple(out.shape)}, reference {tuple(ref.shape)}"
    bad = int((~torch.isfinite(out)).sum())
    assert not bad, f"{case_id}: {bad} of {out.numel()} outputs are NaN/Inf"
    err, tol = float((out - ref).norm() / ref.norm()), REL_TOL[shape["kv_cache_dtype"] in FP8_CACHES]
    cosine = float(torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0))
    assert err <= tol, f"{case_id}: relative error {err:.3g} over {tol} (cosine {cosine:.4f})"
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
part builds one step per route the way vLLM's attention tests do (``tests/v1/attention/utils.py``:
a ``BatchSpec``, ``create_common_attn_metadata``; the backend class's own builder and impl) and
compares the step's output with a float32 reference of the true inputs computed here.

Where it runs:

* Through ``python -m conformance.vllm_shim --vllm RELEASE THIS_FILE`` (mla-spec): the release's
  rocm_aiter_mla.py is executed, unchanged, over mla-spec's stub vllm/aiter packages in a confined
  child, with the release's own ``BatchSpec`` and ``create_common_attn_metadata``; AITER's calls are
  checked against mla-spec's AITER registry and, for the numeric part, filled by CPU (or CUDA)
  stand-ins inside each kernel's contract.  This is the path mla-spec's own tests execute, on every
  release 0.27.1 ... 0.34.0.
* Inside a vLLM checkout without the shim the module skips: the configs vLLM's engine would hand the
  backend (a ``VllmConfig`` from an MLA model's config, the layer's scales) and the real ROCm kernels
  are not wired in, because no ROCm machine was available to check them on.  Nothing of that path
  was executed.
"""

import sys

import pytest
import torch

REVISION = "{revision}"
REGISTRY = "{registry}"
SHIM = "mla_spec_drop_in"  # the module python -m conformance.vllm_shim provides

# case id -> the shape and, per decision, the facts the model pins
PINNED = {pprint.pformat(pins, width=108, sort_dicts=True)}

# One solver-found case per route (path, fp8 cache or not), each predicted to pass.
{_ids(numeric, "NUMERIC_CASES")}
KV_LEN = {REPLAY_KV_LEN}  # context tokens before each request's query in a numeric step
HEAD_SIZE, KV_LORA_RANK = 576, 512  # MLA's latent cache row (512 latent + 64 rope) and the output width
# Relative error ||out - ref|| / ||ref|| allowed: fp8 keeps 3 mantissa bits (vLLM 0.34.0's
# test_rocm_aiter_mla_dcp_cprr_numerics.py allows 1e-1 for the same reason); bf16/fp16 keep 8 or more.
REL_TOL = {{True: 1.0e-1, False: 2.0e-2}}
FP8_CACHES = {sorted(FP8_KV_CACHE_DTYPES)!r}


def _harness():
    """What answers for vLLM's engine: the mla-spec shim; without it the module skips (see the docstring)."""
    if SHIM not in sys.modules:
        pytest.skip(
            "needs mla-spec's shim (python -m conformance.vllm_shim --vllm RELEASE THIS_FILE): driving the "
            "real ROCm backend from a vLLM checkout is not written (see the module docstring)"
        )
    return sys.modules[SHIM]


@pytest.fixture(scope="module")
def observed():
    ids = list(PINNED)
    return dict(zip(ids, _harness().observe(REGISTRY, [PINNED[i]["shape"] for i in ids])))


def _check(observed, case_id, decision):
    want = PINNED[case_id][decision]
    got = {{k: observed[case_id].get(k) for k in want}}
    assert got == want, f"{{case_id}} {{decision}}: the release gives {{got}}, {revision} pins {{want}}"


{tests}

{NUMERIC_PART}'''
