"""The engine's ``SpeculativeConfig`` as the AITER MLA builder sees it, with the release's own methods.

Fields: ``method``, ``num_speculative_tokens``, ``parallel_drafting`` (set for
dflash/dspark in ``SpeculativeConfig.__post_init__``, vllm/config/speculative.py
0.27.1 L985, 0.28.0 L1047).  ``max_num_new_slots_for_drafting`` and the
predicates it calls (``use_dflash``, ``uses_draft_model``, ...) are the
release's own methods of ``SpeculativeConfig``, executed from its tree where
the release defines them; 0.34.0 moved the answer to per-method
``SpeculatorConfig`` classes, which the harness reads the same way
(:mod:`mla_spec_stub.speculator`, ``speculator_config``).
"""

from __future__ import annotations

from typing import Any

from mla_spec_stub import STATE, class_method_defs, speculator

_METHODS = (
    "max_num_new_slots_for_drafting",
    "use_dflash",
    "use_dspark",
    "uses_draft_model",
    "use_eagle",
    "use_ngram",
)


class SpeculativeConfig:
    def __init__(self, method: str, num_speculative_tokens: int, parallel_drafting: bool) -> None:
        self.method = method
        self.num_speculative_tokens = num_speculative_tokens
        self.parallel_drafting = parallel_drafting

    @property
    def speculator_config(self) -> Any:
        """0.34.0+ (vllm/config/speculative.py L1419-1422): the per-method SpeculatorConfig."""
        if not speculator.defines_speculators():
            raise AttributeError("speculator_config (this release has no SpeculatorConfig)")
        return speculator.speculator_config(self)


def _install() -> None:
    found = class_method_defs(
        "vllm/config/speculative.py", "SpeculativeConfig", _METHODS, globals(), optional=True
    )
    for name, fn in found.items():
        setattr(SpeculativeConfig, name, fn)


if STATE.tree is not None:
    _install()
