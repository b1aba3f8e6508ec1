"""Stub ``vllm._aiter_ops.rocm_aiter_ops``: ``mla_decode_fwd`` runs the release's own glue.

``rocm_aiter_ops.mla_decode_fwd`` goes through ``torch.ops.vllm.rocm_aiter_mla_decode_fwd``
to ``_rocm_aiter_mla_decode_fwd_impl`` (vllm/_aiter_ops.py, 0.27.0+), which
reshapes the KV buffer, checks the persistent buffers and calls
``aiter.mla.mla_decode_fwd``.  That function and ``_check_aiter_mla_fp8_support``
are the release's, executed from its tree; only the ``torch.ops`` hop is skipped.
"""

import torch  # noqa: F401
from mla_spec_stub import release_defs, strict

__getattr__ = strict("vllm._aiter_ops")

_AITER_MLA_SUPPORTS_FP8 = None
release_defs(
    "vllm/_aiter_ops.py", ("_check_aiter_mla_fp8_support", "_rocm_aiter_mla_decode_fwd_impl"), globals()
)


class rocm_aiter_ops:
    @staticmethod
    def mla_decode_fwd(
        q,
        kv_buffer,
        o,
        sm_scale,
        qo_indptr,
        max_seqlen_qo,
        kv_indptr=None,
        kv_indices=None,
        kv_last_page_lens=None,
        logit_cap=0.0,
        q_scale=None,
        kv_scale=None,
        **persistent,
    ):
        """vllm/_aiter_ops.py ``rocm_aiter_ops.mla_decode_fwd``: forwards to the impl above."""
        return _rocm_aiter_mla_decode_fwd_impl(  # noqa: F821  (defined by release_defs)
            q,
            kv_buffer,
            o,
            qo_indptr,
            max_seqlen_qo,
            kv_indptr,
            kv_indices,
            kv_last_page_lens,
            sm_scale=sm_scale,
            logit_cap=logit_cap,
            q_scale=q_scale,
            kv_scale=kv_scale,
            **persistent,
        )

    @staticmethod
    def is_enabled() -> bool:
        return True


def is_aiter_found_and_supported() -> bool:
    return True


# Appended for ``mla-spec vllm-tests`` (the shipped tests import it): ``is_aiter_found``
# (vllm/_aiter_ops.py 0.34.0 L113-116), the release's own function where it defines one;
# it asks ``find_spec("aiter")``, which the stubs' import guard answers with the stub aiter.
from mla_spec_stub import STATE as _STATE  # noqa: E402

if _STATE.tree is not None and "def is_aiter_found(" in (_STATE.tree / "vllm/_aiter_ops.py").read_text():
    release_defs("vllm/_aiter_ops.py", ("is_aiter_found",), globals())
