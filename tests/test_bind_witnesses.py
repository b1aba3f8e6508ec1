"""bind's symbolic witnesses are minimised like check's counterexamples (issue 15 item 3): the smallest heads,
qlen and speculative tokens, and the Shape's defaults wherever the difference allows them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.network  # a 0.28.0 gate mutant


def test_a_gate_mutants_differences_are_the_smallest_shapes(tmp_path):
    from mla_model.revisions import get_revision
    from spec.analyses.mutants import release_mutants, shadow_tree
    from spec.realcode.bind import symbolic_comparison
    from spec.realcode.revision import real_revision

    text, mutants = release_mutants("0.28.0")
    (mutant,) = [m for m in mutants if m.id == "use_gluon_decode/negate/L920.11"]  # the fp8 guard negated
    path = shadow_tree("0.28.0", mutant.apply(text.encode()), tmp_path / "tree")
    rows = symbolic_comparison(
        real_revision(str(path)), get_revision("vllm-0.28"), fields=("use_gluon_decode",)
    )
    (row,) = [r for r in rows if r.function == "use_gluon_decode"]
    assert row.verdict == "DIFFERENT" and row.differences
    for d in row.differences:
        s = d["shape"]
        # Gluon decode is one token, no drafter; a divisor-of-16 head count: the least is 1.
        assert (s["num_heads"], s["max_qo_len"], s["num_spec_tokens"], s["spec_method"]) == (1, 1, 0, "none")
        assert s["num_reqs"] == 1 and s["dcp_world_size"] == 1 and s["asm_padding_mode"] == "auto"
