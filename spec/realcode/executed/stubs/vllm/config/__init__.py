"""Stub ``vllm.config``: the configs the AITER MLA builder reads, as plain attribute bags.

Fields (vllm/config/*.py of each release): ``model_config`` (dtype,
max_model_len, head size), ``scheduler_config`` (max_num_seqs,
max_num_batched_tokens), ``cache_config.cache_dtype`` (--kv-cache-dtype),
``parallel_config`` (decode_context_parallel_size, cp_kv_cache_interleave_size),
``compilation_config`` (cudagraph_mode, static_forward_context) and
``speculative_config`` (:class:`SpeculativeConfig`).  The harness fills them
per shape (``mla_spec_stub.configs``).
"""

from contextlib import contextmanager

from mla_spec_stub import strict

__getattr__ = strict("vllm.config")


class VllmConfig:
    """A bag of the sub-configs above (``VllmConfig`` in vllm/config/vllm.py)."""

    def __init__(self, **parts):
        self.__dict__.update(parts)

    def __getattr__(self, name):
        raise AttributeError(f"the release reaches VllmConfig.{name}, which the harness does not stub")


_current = None


def get_current_vllm_config_or_none():
    """vllm/config/vllm.py: the config set for the current build, or None."""
    return _current


@contextmanager
def set_current_vllm_config(vllm_config, check_compile=False, prefix=None):
    """vllm/config/vllm.py (0.34.0 L3697): the current config within the block, the previous one after.

    0.34.0's shipped DCP tests build their metadata inside it
    (test_rocm_aiter_mla_dcp_cprr_numerics.py, _verify_gfx942.py).
    """
    global _current
    previous, _current = _current, vllm_config
    try:
        yield
    finally:
        _current = previous
