"""Stub ``vllm.config.cache.CacheDType`` (a ``Literal`` of dtype strings in vllm/config/cache.py)."""

from mla_spec_stub import strict

__getattr__ = strict("vllm.config.cache")

CacheDType = str
