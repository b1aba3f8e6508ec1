# A miniature backend file written for mla-spec's tests. It has the shape the
# loader looks for in vLLM's rocm_aiter_mla.py (an AiterMLAHelper class, a
# metadata builder with __init__ and _build_decode, an impl with forward_mqa)
# and routes like the vllm-0.28 model revision, in its own words. Module-level
# code that must never run is included on purpose.
import functools

from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import is_quantized_kv_cache

logger = init_logger(__name__)
RAN_AT_IMPORT = open("mini_rocm_aiter_mla.ran", "w")  # the loader must never execute this line


@functools.lru_cache(maxsize=1)
def _gluon_mla_decode_supported() -> bool:
    try:
        from vllm.platforms.rocm import on_gfx950
    except Exception:
        return False
    return on_gfx950()


def _aiter_mla_small_head_mode() -> str:
    import vllm.envs as envs

    return (envs.VLLM_ROCM_AITER_MLA_ASM_PADDING or "auto").lower()


class AiterMLAMetadataBuilder:
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.unrelated = layer_names[0]
        self._mtp_decode_qlen = (self.reorder_batch_threshold or 1)  # the #51011 sizing

    def _build_decode(self, max_qo_len):
        small = self.num_heads < AiterMLAHelper.SMALL
        use_persistent_metadata = (
            not AiterMLAHelper.use_gluon_decode(self.num_heads, max_qo_len, self._kv_cache_dtype_str)
            and not AiterMLAHelper.use_gluon_verify(self.num_heads, max_qo_len, self._kv_cache_dtype_str)
            and (not small or max_qo_len <= AiterMLAHelper.PS_QLEN or is_quantized_kv_cache(self._kv_cache_dtype_str))
            and 1 <= max_qo_len <= self._mtp_decode_qlen
        )
        if use_persistent_metadata:
            from aiter import get_mla_metadata_v1

            get_mla_metadata_v1(max_qo_len)
        return use_persistent_metadata


class AiterMLAHelper:
    SMALL = 16
    PS_QLEN = 4

    @staticmethod
    def is_valid_num_heads(num_heads: int) -> bool:
        return num_heads > 0 and (num_heads < AiterMLAHelper.SMALL or num_heads % 16 == 0)

    @staticmethod
    def get_actual_mla_num_heads(num_heads: int) -> int:
        return max(num_heads, AiterMLAHelper.SMALL)

    @staticmethod
    def use_gluon_decode(num_heads: int, max_qo_len: int, kv_cache_dtype: str) -> bool:
        if num_heads >= AiterMLAHelper.SMALL or max_qo_len != 1 or is_quantized_kv_cache(kv_cache_dtype):
            return False
        mode = _aiter_mla_small_head_mode()
        if mode == "asm":
            return False
        if mode == "gluon":
            return _gluon_mla_decode_supported()
        return 16 % num_heads == 0 and _gluon_mla_decode_supported()

    @staticmethod
    def use_gluon_verify(num_heads: int, max_qo_len: int, kv_cache_dtype: str) -> bool:
        small_multi = num_heads < AiterMLAHelper.SMALL and max_qo_len > 1
        return small_multi and not is_quantized_kv_cache(kv_cache_dtype) and (
            _aiter_mla_small_head_mode() != "asm" and _gluon_mla_decode_supported())


class AiterMLAImpl:
    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata, layer):
        return mla_gluon(q, kv_scale=1.0)
