"""The rewrites tests/test_refactor_proof.py applies to every release file preserve behaviour, and do
rewrite: each runs on small routing methods written like vLLM's (an ``_build_decode``, a predicate, a
one-line module helper), and the rewritten methods must return what the originals return on every input
hypothesis draws.  (This is our own test code, executed; an input file is never executed here.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.rewrites import REWRITES, all_rewrites, rename_locals

SOURCE = """
def _is_small(num_heads):
    return num_heads < 16


def _mode():
    return "auto"


class AiterMLAHelper:
    @staticmethod
    def use_gluon_decode(num_heads, max_qo_len, kv_cache_dtype, spec=None):
        if kv_cache_dtype == "fp8" or max_qo_len > 4:
            return False
        if spec is not None and spec.k > 2:
            return False
        mode = _mode()
        if mode == "asm":
            return False
        return _is_small(num_heads) and max_qo_len >= 1


class Builder:
    def _build_decode(self, num_heads, max_qo_len, kv_cache_dtype, spec=None):
        gluon = AiterMLAHelper.use_gluon_decode(num_heads, max_qo_len, kv_cache_dtype, spec)
        route = "plain"
        if num_heads > 64 and not gluon:
            route = "wide"
        elif max_qo_len > 2:
            route = "verify"
        splits = 0
        if route == "verify" and (num_heads % 2 == 0 or max_qo_len == 3):
            splits = max_qo_len * 2
        if gluon:
            return ("gluon", route, splits)
        persistent = not gluon and (max_qo_len <= 4 or kv_cache_dtype == "fp8")
        return ("asm", persistent, route, splits)
"""


class Spec:
    def __init__(self, k: int) -> None:
        self.k = k


def _build(text: str):
    namespace: dict = {}
    exec(compile(text, "<rewritten>", "exec"), namespace)  # our own fixed source, rewritten
    return namespace["Builder"]()._build_decode


INPUTS = st.tuples(
    st.integers(1, 160),
    st.integers(1, 8),
    st.sampled_from(["auto", "fp8"]),
    st.none() | st.builds(Spec, st.integers(0, 4)),
)


@pytest.mark.parametrize("name", [*REWRITES, "all"])
@settings(max_examples=60, deadline=None)
@given(args=INPUTS)
def test_each_rewrite_returns_what_the_original_returns(name, args):
    text, count = all_rewrites(SOURCE) if name == "all" else REWRITES[name](SOURCE)
    assert (sum(count.values()) if isinstance(count, dict) else count) > 0, f"{name} rewrote nothing"
    assert text != SOURCE
    assert _build(text)(*args) == _build(SOURCE)(*args)


def test_guarded_operands_keep_their_order_and_values_are_not_swapped():
    """``spec is not None and spec.k > 2`` is a guard; ``x or 1`` gives a value, not a bool: neither is
    reversed (reversing either changes what the code does)."""
    text, _ = REWRITES["swap-operands"](
        "class B:\n    def _build_decode(self, spec, t):\n"
        "        a = spec is not None and spec.k > 2\n        b = t or 1\n        c = t > 1 and t < 5\n"
        "        return a, b, c\n"
    )
    assert "spec is not None and spec.k > 2" in text and "t or 1" in text and "t < 5 and t > 1" in text


def test_a_rename_keeps_comments_lines_and_keyword_arguments():
    text = (
        "class B:\n"
        "    def _build_decode(self, n):\n"
        "        gate = n > 1  # why\n"
        '        return Meta(gate=gate, n=f"{gate}", x=self.gate)\n'
    )
    out, renamed = rename_locals(text)
    assert renamed == 1
    assert out == (
        "class B:\n"
        "    def _build_decode(self, n):\n"
        "        gate_rw = n > 1  # why\n"
        '        return Meta(gate=gate_rw, n=f"{gate_rw}", x=self.gate)\n'
    )
