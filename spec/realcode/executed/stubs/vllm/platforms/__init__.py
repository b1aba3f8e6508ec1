"""Stub ``vllm.platforms.current_platform``: a ROCm platform whose arch the harness sets per shape."""

from mla_spec_stub import STATE, strict

__getattr__ = strict("vllm.platforms")


class _RocmPlatform:
    device_type = "cuda"

    def is_rocm(self) -> bool:
        return True

    def is_cuda(self) -> bool:
        return False

    def fp8_dtype(self):
        """vllm/platforms/rocm.py: e4m3fnuz on gfx942 (MI300), e4m3fn on gfx950."""
        import torch

        return torch.float8_e4m3fnuz if STATE.arch == "gfx942" else torch.float8_e4m3fn

    def get_device_name(self, device_id: int = 0) -> str:
        return {"gfx942": "AMD Instinct MI300X", "gfx950": "AMD Instinct MI355X"}[STATE.arch]

    def num_compute_units(self, device_id: int = 0) -> int:
        """vllm/platforms/rocm.py: the device's CU count (MI300X 304, MI355X 256).

        Read by rocm_aiter_mla.py 0.33.0+ to cap Triton split counts (0.34.0 L1413, L2700).
        """
        return {"gfx942": 304, "gfx950": 256}[STATE.arch]

    def __getattr__(self, name: str):
        raise AttributeError(f"the release reaches current_platform.{name}, which the harness does not stub")


current_platform = _RocmPlatform()
