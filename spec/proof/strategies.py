"""Hypothesis strategies derived from the spec: shapes, optionally valid for a revision.

    from hypothesis import given
    from spec.proof.strategies import shapes

    @given(shapes(valid=True, revision="vllm-0.28"))
    def test_my_gate(shape): ...

Needs the ``hypothesis`` package (the ``test`` extra).
"""

from __future__ import annotations

from hypothesis import strategies as st

from mla_model.registry import Registry, load_registry
from mla_model.revisions import get_revision
from mla_model.revisions.base import Revision
from mla_model.shape import (
    ARCHS,
    ASM_PADDING_MODES,
    DCP_WORLD_SIZES,
    GIB,
    KV_CACHE_DTYPES,
    Q_DTYPES,
    SPEC_METHODS,
    Shape,
)


@st.composite
def _any_shape(draw, max_heads: int, max_qlen: int, max_k: int) -> Shape:
    spec_method = draw(st.sampled_from(SPEC_METHODS))
    return Shape(
        arch=draw(st.sampled_from(ARCHS)),
        kv_cache_dtype=draw(st.sampled_from(KV_CACHE_DTYPES)),
        q_dtype=draw(st.sampled_from(Q_DTYPES)),
        num_heads=draw(st.integers(1, max_heads)),
        dcp_world_size=draw(st.sampled_from(DCP_WORLD_SIZES)),
        max_qo_len=draw(st.integers(1, max_qlen)),
        num_reqs=draw(st.sampled_from([1, 2, 31, 32, 33, 512])),
        spec_method=spec_method,
        num_spec_tokens=0 if spec_method == "none" else draw(st.integers(0, max_k)),
        asm_padding_mode=draw(st.sampled_from(ASM_PADDING_MODES)),
        gluon_build=draw(st.booleans()),
        causal=draw(st.booleans()),
        kv_cache_bytes=draw(st.sampled_from([1, GIB, 2 * GIB - 1, 2 * GIB, 2 * GIB + 1, 1 << 40])),
    )


def shapes(
    valid: bool = False,
    revision: str | Revision | None = None,
    registry: str | Registry = "aiter-0.1.20",
    max_heads: int = 300,
    max_qlen: int = 40,
    max_k: int = 20,
) -> st.SearchStrategy[Shape]:
    """Shapes in the fields' domains; with ``valid=True`` only those ``revision`` accepts."""
    base = _any_shape(max_heads, max_qlen, max_k)
    if not valid:
        return base
    if revision is None:
        raise ValueError("shapes(valid=True) needs a revision")
    rev = get_revision(revision) if isinstance(revision, str) else revision
    reg = load_registry(registry) if isinstance(registry, str) else registry

    takes_dcp = bool(rev.is_valid(Shape(dcp_world_size=2), reg))  # vLLM 0.29 on: DCP with this backend

    def repair(s: Shape) -> Shape:
        """Move the commonest invalid draws into the valid region before filtering."""
        if not takes_dcp:
            s = s.replace(dcp_world_size=1)
        rbt = rev.reorder_batch_threshold(s)
        q_dtype = s.q_dtype if s.kv_cache_dtype.startswith("fp8") else "bf16"
        s = s.replace(
            max_qo_len=1 + (s.max_qo_len - 1) % rbt,
            q_dtype=q_dtype,
            gluon_build=s.gluon_build and s.arch == "gfx950",
            num_heads=1 + (s.num_heads - 1) % max(1, 128 // s.dcp_world_size),
        )
        # a non-causal draft block is accepted only where the backend supports it (vLLM 0.30 on, gfx950)
        return s if s.causal or rev.is_valid(s, reg) else s.replace(causal=True)

    return base.map(repair).filter(lambda s: bool(rev.is_valid(s, reg)))
