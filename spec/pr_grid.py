"""The hand-written test grids of vLLM PR #51011, rebuilt as data, run against a gate module.

Source: ``shared/reference/aiter_mla_routing_facts.md`` §5 (T-51011: the new
``tests/v1/attention/test_rocm_aiter_mla_fp8_decode_routing.py``, and the PR
text on ``test_rocm_aiter_mla_mtp_split.py``).  One :class:`GridCase` is one
pytest item of those tests (one parametrize point): its test name, its
parameters, whether it takes the ``gluon_available`` fixture, and the
assertions the test body makes, each ``(observable, expected)``.  The
expectations are the PR's literals, never computed from a revision.

Decisions:

* A case runs against a gate *module* (vllm_028.py's source, mutated or not,
  see :mod:`spec.mutants`), calling its predicates as the PR's tests call
  ``AiterMLAHelper``: ``use_gluon_decode(H, Q, dtype)`` with the raw dtype
  string.  The mode knob is the shape's ``asm_padding_mode``.
* The ``gluon_available`` fixture monkeypatches ``_gluon_mla_decode_supported``
  to return True and the mode to ``auto``; here it replaces that function in
  the module for the case's duration.  Tests without the fixture run on the
  machine the PR reports its 425 unit tests on, an MI355X: gfx950, mode auto.
  §5 names the fixture for the any-mode sweep, the divisor test and the
  small-head verify test; it is also given to the non-divisor test, the
  fourth test of bf16 expectations the fixture exists for ("so bf16
  expectations hold on gfx942 CI too").
* The padding tests take tensors (``get_mla_padded_q``); here the padded head
  count and the round trip follow from the route's ``head_padding`` branch and
  ``padded_q_heads`` (facts §2(a)): repeat_interleave(m // h) gives
  ``h * (m // h)`` heads and is undone by a stride slice (exact iff h divides
  m); tile + slice gives m heads and is undone by a prefix slice; no padding
  keeps h.  Contiguity is not modelled.
* The mtp_split sizing test is known only from the PR text: ``deepseek_mtp``,
  a parallel drafter and ``eagle``, pinning ``_mtp_decode_qlen ==
  reorder_batch_threshold`` (1 + k, or 1 + 2k for parallel drafting).  Its k
  values were not recovered; the grid takes k in {1, 2, 3} and ``dflash`` as
  the parallel drafter.  The persistent-gate cases it adds ("fp8 and 12-head
  cases") were not recovered and are not rebuilt.
"""

from __future__ import annotations

import types
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from itertools import product
from typing import Any, Callable, Iterator

from mla_model.registry import load_registry
from mla_model.shape import Shape

FP8_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")
UNQUANTIZED_DTYPES = ("auto", "bfloat16")
ALL_DTYPES = FP8_DTYPES + UNQUANTIZED_DTYPES
PR_MACHINE_ARCH = "gfx950"  # MI355X, where #51011's unit tests ran
# Route evaluation needs a registry; the gates these tests read do not depend on it.
_REGISTRY = "aiter-0.1.20"


@dataclass(frozen=True)
class Check:
    """One assertion of a test body: ``observable`` at the case's parameters (``at`` overrides some) == expected."""

    observable: str
    expected: Any
    at: tuple[tuple[str, Any], ...] = ()  # e.g. (("qlen", 8),): the test calls verify(H, 8, dtype)


@dataclass(frozen=True)
class GridCase:
    test: str  # the pytest function
    params: dict[str, Any]  # heads, qlen, dtype, mode, drafter, k: what the parametrize point sets
    fixture: bool  # takes gluon_available
    assertions: tuple[Check, ...]  # in the order the test body asserts

    @property
    def id(self) -> str:
        return f"{self.test}[{'-'.join(str(v) for v in self.params.values())}]"


# --- observables: what a test body reads from the module --------------------------------------


def _shape(p: dict[str, Any]) -> Shape:
    return Shape(arch=PR_MACHINE_ARCH, kv_cache_dtype=p.get("dtype", "auto"), num_heads=p.get("heads", 16),
                 max_qo_len=p.get("qlen", 1), asm_padding_mode=p.get("mode", "auto"),
                 spec_method=p.get("drafter", "none"), num_spec_tokens=p.get("k", 0))


def _decode(m: types.ModuleType, p: dict[str, Any]) -> bool:
    return bool(m.use_gluon_decode(p["heads"], p["qlen"], p["dtype"], _shape(p)))


def _verify(m: types.ModuleType, p: dict[str, Any]) -> bool:
    return bool(m.use_gluon_verify(p["heads"], p["qlen"], p["dtype"], _shape(p)))


def _route(m: types.ModuleType, p: dict[str, Any]) -> Any:
    return m.REVISION.route(_shape(p), load_registry(_REGISTRY))


def padded_heads(branch: str, h: int, m: int) -> int:
    """How many heads ``get_mla_padded_q`` hands the kernel, by its branch."""
    return {"none": h, "repeat_interleave": h * (m // h), "tile": m}[branch]


def round_trips(branch: str, h: int, m: int) -> bool:
    """Whether the unpad recovers the query's heads in order: stride slice needs h | m, prefix slice always does."""
    return {"none": True, "repeat_interleave": m % h == 0, "tile": True}[branch]


def _padded(m: types.ModuleType, p: dict[str, Any]) -> int:
    r = _route(m, p)
    return padded_heads(r.head_padding, p["heads"], int(r.padded_q_heads))


def _round_trip(m: types.ModuleType, p: dict[str, Any]) -> bool:
    r = _route(m, p)
    return round_trips(r.head_padding, p["heads"], int(r.padded_q_heads))


OBSERVABLES: dict[str, Callable[[types.ModuleType, dict[str, Any]], Any]] = {
    "use_gluon_decode": _decode,
    "use_gluon_verify": _verify,
    "decode and verify": lambda m, p: _decode(m, p) and _verify(m, p),
    "padded heads": _padded,
    "pad/unpad round trip": _round_trip,
    "_mtp_decode_qlen": lambda m, p: int(_route(m, p).mtp_decode_qlen),
}


# --- the grids (facts §5) ---------------------------------------------------------------------


def _grid(test: str, fixture: bool, axes: dict[str, tuple], assertions: Callable[..., tuple]) -> list[GridCase]:
    return [GridCase(test, dict(zip(axes, values)), fixture, assertions(**dict(zip(axes, values))))
            for values in product(*axes.values())]


def _neither(**_: Any) -> tuple[Check, ...]:
    return Check("use_gluon_decode", False), Check("use_gluon_verify", False)


def build_grid() -> tuple[GridCase, ...]:
    decode_at_1 = Check("use_gluon_decode", False, (("qlen", 1),))
    return tuple([
        *_grid("test_fp8_never_routes_to_gluon", False,
               {"dtype": FP8_DTYPES, "heads": (1, 2, 4, 5, 6, 8, 12, 16, 32, 128), "qlen": (1, 2, 4, 5, 8, 15)},
               _neither),
        *_grid("test_fp8_never_routes_to_gluon_under_any_mode", True,
               {"dtype": FP8_DTYPES, "heads": (1, 2, 4, 8, 12), "mode": ("auto", "gluon", "asm")},
               lambda **_: (decode_at_1, Check("use_gluon_verify", False, (("qlen", 8),)))),
        *_grid("test_large_head_counts_never_use_gluon", False,
               {"dtype": ALL_DTYPES, "heads": (16, 17, 32, 64, 128), "qlen": (1, 4, 8)}, _neither),
        *_grid("test_unquantized_divisor_heads_keep_gluon_decode", True,
               {"dtype": UNQUANTIZED_DTYPES, "heads": (1, 2, 4, 8)},
               lambda **_: (Check("use_gluon_decode", True, (("qlen", 1),)),)),
        *_grid("test_unquantized_non_divisor_heads_use_asm_decode", True,
               {"dtype": UNQUANTIZED_DTYPES, "heads": (3, 5, 6, 7, 9, 12, 15)}, lambda **_: (decode_at_1,)),
        *_grid("test_unquantized_small_head_verify_keeps_gluon", True,
               {"dtype": UNQUANTIZED_DTYPES, "heads": (5, 8, 12), "qlen": (2, 4, 8, 15)},
               lambda **_: (Check("use_gluon_verify", True), Check("use_gluon_decode", False))),
        *_grid("test_decode_and_verify_are_disjoint", False,
               {"dtype": ALL_DTYPES, "heads": (5, 8, 12, 16, 32), "qlen": (1, 2, 8)},
               lambda **_: (Check("decode and verify", False),)),
        *_grid("test_padded_query_is_contiguous", False, {"heads": (1, 2, 3, 5, 6, 7, 8, 9, 12, 15)},
               lambda heads: (Check("padded heads", max(16, heads)),)),
        *_grid("test_pad_unpad_round_trip_preserves_head_order", False,
               {"heads": (1, 2, 3, 5, 6, 7, 8, 9, 12, 15, 16, 32)}, lambda **_: (Check("pad/unpad round trip", True),)),
        *_grid("test_mtp_decode_qlen_covers_reorder_batch_threshold", False,
               {"drafter": ("deepseek_mtp", "dflash", "eagle"), "k": (1, 2, 3)},
               lambda drafter, k: (Check("_mtp_decode_qlen", 1 + (2 if drafter == "dflash" else 1) * k),)),
    ])


PR_GRID: tuple[GridCase, ...] = build_grid()


@contextmanager
def gluon_available(module: types.ModuleType) -> Iterator[None]:
    """The PR's fixture: ``_gluon_mla_decode_supported`` returns True while the case runs."""
    saved = module._gluon_mla_decode_supported
    module._gluon_mla_decode_supported = lambda s: True
    try:
        yield
    finally:
        module._gluon_mla_decode_supported = saved


def fails(module: types.ModuleType, case: GridCase) -> str | None:
    """The first assertion of ``case`` failing on ``module`` ('observable: expected X, got Y'), or None."""
    with gluon_available(module) if case.fixture else nullcontext():
        for check in case.assertions:
            got = OBSERVABLES[check.observable](module, {**case.params, **dict(check.at)})
            if got != check.expected:
                at = "".join(f" at {k}={v}" for k, v in check.at)
                return f"{check.observable}{at}: expected {check.expected!r}, got {got!r}"
    return None


def first_failure(module: types.ModuleType) -> GridCase | None:
    """The first PR grid case that fails on ``module`` (the mutant is killed), or None."""
    return next((case for case in PR_GRID if fails(module, case) is not None), None)
