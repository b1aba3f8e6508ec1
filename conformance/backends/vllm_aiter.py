"""The ``vllm-aiter`` backend: vLLM's real ``AiterMLAImpl.forward_mqa`` with AITER's real kernels.

It can only run on a ROCm GPU (gfx942 or gfx950) with vLLM and AITER
installed; everywhere else every case is skipped with the first missing piece
as the reason.  Driving ``forward_mqa`` itself needs a ``VllmConfig`` for an
MLA model and ``AiterMLAMetadataBuilder.build`` over a
``CommonAttentionMetadata`` (vLLM 0.34.0 ``rocm_aiter_mla.py`` L1027, L2259,
L3411); no ROCm machine was available to build and check that harness, so on
a complete ROCm installation the skip reason says so instead of running
unchecked code.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from conformance.runner import Unavailable


class VllmAiterBackend:
    name = "vllm-aiter"

    def unavailable(self, device: str) -> str | None:
        import torch

        if torch.version.hip is None:
            return "needs a ROCm build of torch on an AMD GPU (gfx942 or gfx950); this torch has no HIP"
        if not device.startswith("cuda"):
            return f"needs the ROCm GPU as the device (device is {device})"
        for package, hint in (("vllm", "vLLM"), ("aiter", "AITER (amd-aiter)")):
            if importlib.util.find_spec(package) is None:
                return f"{hint} is not installed"
        return (
            "the AiterMLAImpl.forward_mqa harness (VllmConfig for an MLA model + "
            "AiterMLAMetadataBuilder.build) is not built yet: "
            "no ROCm machine was available to check it against"
        )

    def run(self, case: Any, decision: Any, registry: Any, inputs: Any, watch: Any, fault: str | None) -> Any:
        raise Unavailable(self.unavailable(str(inputs.q.device)) or "vllm-aiter cannot run here")


BACKEND = VllmAiterBackend()
