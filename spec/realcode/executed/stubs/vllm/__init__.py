"""Stub ``vllm`` for the mla-spec harness: only what rocm_aiter_mla.py reaches.

Every stub module names, in its docstring, the release code it stands for.
Any name not defined here is refused with a message naming it
(:func:`mla_spec_stub.strict`), never answered by a silent dummy.
"""

from mla_spec_stub import strict

__getattr__ = strict("vllm")

from vllm import envs  # noqa: E402  (``from vllm import envs``, 0.31+)
