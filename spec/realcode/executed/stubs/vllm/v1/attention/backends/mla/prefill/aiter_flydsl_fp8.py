"""Stub ``vllm.v1.attention.backends.mla.prefill.aiter_flydsl_fp8.AiterFlyDSLFP8PrefillBackend``
(rocm_aiter_mla.py 0.34.0 L41).

The release only tests ``isinstance(prefill_backend, AiterFlyDSLFP8PrefillBackend)``
(0.34.0 L172-178, ``_asm_fp8_prefill_superseded``); the harness's layers carry
the default prefill backend (:class:`vllm.model_executor.layers.attention.mla_attention.PrefillBackend`),
never this one, so the class is a marker with no behaviour.
"""

from mla_spec_stub import strict

__getattr__ = strict("vllm.v1.attention.backends.mla.prefill.aiter_flydsl_fp8")


class AiterFlyDSLFP8PrefillBackend:
    pass
