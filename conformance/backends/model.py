"""The ``model`` backend: each route's data path emulated in torch (:mod:`mla_model.emulation`)."""

from __future__ import annotations

from typing import Any

from mla_model.emulation import emulate


class ModelBackend:
    name = "model"

    def unavailable(self, device: str) -> str | None:
        return None  # torch on any device

    def run(self, case: Any, decision: Any, registry: Any, inputs: Any, watch: Any, fault: str | None) -> Any:
        with watch("kernel"):
            out, info = emulate(decision, registry, inputs, fault)
        return out, info


BACKEND = ModelBackend()
