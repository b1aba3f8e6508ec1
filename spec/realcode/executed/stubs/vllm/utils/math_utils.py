"""Stub ``vllm.utils.math_utils``: the release's own ``cdiv`` and ``largest_power_of_2_divisor``.

Imported by rocm_aiter_mla.py from 0.29.0 (L25; 0.34.0 L33); both are executed
from the release's vllm/utils/math_utils.py (0.29.0 L10/L30, 0.34.0 L12/L37).
"""

from mla_spec_stub import release_defs, strict

__getattr__ = strict("vllm.utils.math_utils")

release_defs("vllm/utils/math_utils.py", ("cdiv", "largest_power_of_2_divisor"), globals())
