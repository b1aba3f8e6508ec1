"""The sentence a maintainer reads for one concrete violation: what breaks, with values."""

from __future__ import annotations

from mla_model.decision import Decision, asm_failure
from mla_model.derived import is_quantized_kv_cache
from mla_model.registry import Registry
from spec.proof.invariants import Invariant


def gluon_failure(d: Decision) -> str:
    g, s = d.gluon, d.shape
    if not g.built:
        return "no usable Gluon build: loading mla_gluon fails on the first call"
    if not g.arch_ok:
        return f"AssertionError: mla_gluon requires gfx950 (CDNA4), running on {s.arch}"
    if not g.dtype_ok:
        return f"AssertionError in mla_gluon: q {s.q_dtype} with KV {s.kv_cache_dtype} not served (bf16 query required)"
    if not g.batch_ok:
        return f"AssertionError in mla_gluon bh16bn128: batch_size == 1 (fp8 KV, {s.num_reqs} request(s) x qlen {s.max_qo_len})"
    if not g.heads_ok:
        return f"AssertionError in mla_gluon: nhead {d.route.decode_heads} above the bound"
    return ""


def describe_violation(inv: Invariant, d: Decision, reg: Registry) -> str:
    s, r = d.shape, d.route
    detail = ""
    if inv.id == "fp8-never-reaches-gluon":
        detail = (
            f"{s.kv_cache_dtype} KV cache routed to {r.path} with kv_scale=1.0 "
            f"(q {s.q_dtype}, {s.num_reqs} request(s))"
        )
    elif inv.id == "gluon-only-where-built":
        detail = f"{r.path} selected: " + gluon_failure(d)
    elif inv.id == "kernel-exists":
        detail = asm_failure(d)
    elif inv.id == "block-n-key-exists":
        m, q = r.request.padded_heads, r.request.kernel_qlen
        detail = f"KeyError: get_block_n_fp8[{m}*{q}={m * q}] (aiter {reg.aiter_version} keys {list(reg.block_n_keys)})"
    elif inv.id == "metadata-covers-qlen":
        detail = (
            f"{s.spec_method} k={s.num_spec_tokens} lets the scheduler hand decode qlen {s.max_qo_len}, "
            f"but _mtp_decode_qlen={r.mtp_decode_qlen}: persistent metadata dropped, "
            f"AITER falls back to {'its fp8 non-persistent path' if is_quantized_kv_cache(s.kv_cache_dtype) else 'non-persistent split-KV'}"
        )
    elif inv.id == "builder-impl-agree":
        detail = f"builder verify={r.builder_use_gluon_verify}, impl verify={r.use_gluon_verify}, metadata={r.use_persistent_metadata}, path {r.path}"
    elif inv.id == "gluon-fp8-batch-one":
        detail = gluon_failure(d)
    elif inv.id == "decode-verify-disjoint":
        detail = "use_gluon_decode and use_gluon_verify both true"
    elif inv.id == "head-padding-round-trips":
        detail = f"{r.head_padding} pads {r.decode_heads} heads to {r.padded_q_heads}, kernel expects {r.request.padded_heads}"
    elif inv.id == "total":
        if r.vllm_raises:
            detail = "vLLM raises ValueError: no non-causal fp8 qlen-2 kernel for these heads"
        elif d.on_gluon:
            detail = gluon_failure(d)
        elif d.asm.block_n_lookup and not d.asm.block_n_key_ok:
            m, q = r.request.padded_heads, r.request.kernel_qlen
            detail = f"KeyError: get_block_n_fp8[{m * q}]"
        elif r.padded_q_heads != r.request.padded_heads:
            detail = f"head padding yields {r.padded_q_heads} heads, kernel expects {r.request.padded_heads}"
        else:
            detail = asm_failure(d)
    return f"{detail} -> {inv.symptom}" if detail else inv.symptom
