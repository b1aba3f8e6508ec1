"""AITER's decode entry points as a recorder: each call kept as vLLM made it, failing where AITER fails.

A recorded call holds what the kernel would see: the entry point, the query's
shape and dtype (after vLLM's padding), the KV dtype, the scales, the query
length AITER is told, whether vLLM's persistent work metadata came along, and
the persistent buffers' sizing.  Before a kernel "runs", the request is
resolved against the AITER registry in force (:mod:`mla_model.registry`,
itself cited to AITER's tables and ``aiter/mla.py``), and the call raises what
AITER raises there: the ``get_block_n_fp8`` KeyError, the persistent head-fold
assert, an ``AITER_CHECK``, "cannot get heuristic kernel", or Gluon's asserts.
Only then does :data:`STATE.kernel`, if set, compute the output.
"""

from __future__ import annotations

from typing import Any

import torch

from mla_spec_stub import STATE, StandInFault

_KV_NAMES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float8_e4m3fn: "fp8",
    torch.float8_e4m3fnuz: "fp8",
    torch.uint8: "fp8",
}


def dtype_name(t: torch.dtype) -> str:
    return _KV_NAMES.get(t, str(t).replace("torch.", ""))


def _scalar(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return float(x.reshape(-1)[0].item()) if x.numel() else None
    return float(x)


def get_mla_metadata_info_v1(
    max_num_reqs, max_seqlen_qo, num_heads, q_dtype, kv_dtype, is_sparse=False, fast_mode=True, **kwargs
):
    """aiter/mla.py: the persistent buffers' sizes for (batch, qlen, heads); recorded, small ones returned."""
    _event(
        "sizing",
        {
            "max_num_reqs": int(max_num_reqs),
            "max_seqlen_qo": int(max_seqlen_qo),
            "num_heads": int(num_heads),
            "q_dtype": dtype_name(q_dtype),
            "kv_dtype": dtype_name(kv_dtype),
            **{k: v for k, v in kwargs.items() if isinstance(v, (int, bool))},
        },
    )
    return tuple(((1,), torch.int32) for _ in range(6))


def get_mla_metadata_v1(
    qo_indptr,
    kv_indptr,
    kv_last_page_len,
    num_heads_per_head_k,
    num_heads_k,
    is_causal,
    *buffers,
    max_seqlen_qo=None,
    uni_seqlen_qo=-1,
    **kwargs,
):
    """aiter/mla.py: fills the work/reduce buffers for this batch; recorded."""
    _event(
        "metadata",
        {
            "num_heads": int(num_heads_per_head_k),
            "max_seqlen_qo": int(max_seqlen_qo),
            "uni_seqlen_qo": int(uni_seqlen_qo),
            "is_causal": bool(is_causal),
            "num_reqs": int(qo_indptr.numel() - 1),
        },
    )


def _event(kind: str, data: dict[str, Any]) -> None:
    """A ``{kind: data}`` event, or ``{"probe": name, kind + "_probe": data}`` if a release probe made it."""
    probe = _probe_on_stack()
    STATE.events.append({"probe": probe, f"{kind}_probe": data} if probe else {kind: data})


def _keep(call: dict[str, Any]) -> None:
    """Append ``call`` to the step's calls, or, when a release probe made it, to its events.

    A probe is a release function in :data:`PROBES` on the call stack (0.34.0
    ``_aiter_fp8_mla_decode_drops_v_scale`` L246-330 runs a tiny decode to
    measure AITER); its calls are kept as ``{"probe": name, "call_probe": ...}``
    events so the step's own kernel calls and sizing stay apart.
    """
    probe = _probe_on_stack()
    if probe:
        call["probe"] = probe
        STATE.events.append({"probe": probe, "call_probe": call})
    else:
        STATE.calls.append(call)


PROBES = ("_aiter_fp8_mla_decode_drops_v_scale",)


def _probe_on_stack() -> str | None:
    import sys

    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in PROBES:
            return frame.f_code.co_name
        frame = frame.f_back
    return None


def mla_decode_fwd(
    q,
    kv_buffer,
    o,
    qo_indptr,
    kv_indptr,
    kv_indices,
    kv_last_page_lens,
    max_seqlen_q,
    sm_scale=None,
    logit_cap=0.0,
    q_scale=None,
    kv_scale=None,
    work_meta_data=None,
    work_indptr=None,
    work_info_set=None,
    reduce_indptr=None,
    reduce_final_map=None,
    reduce_partial_map=None,
    causal=None,
    return_lse=False,
    **extra,
):
    """aiter/mla.py ``mla_decode_fwd``: the ASM decode (persistent when vLLM passes work metadata).

    With ``return_lse`` (rocm_aiter_mla.py's DCP path, 0.29.0 L1942, 0.34.0
    L3670) it returns ``(logits, lse)`` as AITER does; the LSE is the
    replay kernel's, or an empty ``[rows, heads]`` fp32 tensor when only recording.
    """
    call = {
        "entry": "mla_decode_fwd",
        "q_shape": list(q.shape),
        "o_shape": list(o.shape),
        "q_dtype": dtype_name(q.dtype),
        "kv_dtype": dtype_name(kv_buffer.dtype),
        "max_seqlen_q": int(max_seqlen_q),
        "num_reqs": int(qo_indptr.numel() - 1),
        "persistent": work_meta_data is not None,
        "sm_scale": _scalar(sm_scale),
        "q_scale": _scalar(q_scale),
        "kv_scale": _scalar(kv_scale),
        "causal": None if causal is None else bool(causal),
        "return_lse": bool(return_lse),
        "extra": sorted(extra),
        # CPRR's scalars (cp_world_size, cp_rank, num_kv_splits, intra_batch_mode; 0.34.0 L3645-3654)
        "extra_values": {k: v for k, v in extra.items() if isinstance(v, (bool, int, float))},
    }
    _admit(
        call,
        {
            "q": q,
            "o": o,
            "kv": kv_buffer,
            "kv_indptr": kv_indptr,
            "kv_indices": kv_indices,
            "qo_indptr": qo_indptr,
            # CPRR's global KV indptr (g_kv_indptr, 0.34.0 L3646)
            **{k: v for k, v in extra.items() if isinstance(v, torch.Tensor)},
        },
        _asm_failure,
    )
    result = compute("mla_decode_fwd", call)
    if return_lse and result is None:
        return None, torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    return result


def mla_gluon(
    q_nope,
    q_pe,
    kv_c,
    o,
    page_table,
    seq_info,
    sm_scale,
    k_pe=None,
    kv_pe_offset=512,
    use_2d_view=False,
    kv_scale=1.0,
    min_kv_seq_len=1,
    **extra,
):
    """aiter/ops/triton/gluon/mla_gluon.py: the small-head Gluon decode (one query token per row)."""
    call = {
        "entry": "mla_gluon",
        "q_shape": list(q_nope.shape),
        "q_dtype": dtype_name(q_nope.dtype),
        "kv_dtype": dtype_name(kv_c.dtype),
        "num_rows": int(seq_info.numel() - 1),
        "kv_scale": _scalar(kv_scale),
        "q_scale": None,
        "sm_scale": _scalar(sm_scale),
        "min_kv_seq_len": int(min_kv_seq_len),
        "extra": sorted(extra),
    }
    _admit(
        call,
        {"q_nope": q_nope, "q_pe": q_pe, "o": o, "kv": kv_c, "kv_indptr": seq_info, "kv_indices": page_table},
        _gluon_failure,
    )
    return compute("mla_gluon", call)
    return None


def _admit(call: dict[str, Any], tensors: dict[str, Any], refusal: Any) -> None:
    """Keep the call with its tensors, then raise what AITER raises for it (mla_model.failures), if any."""
    _keep(call)
    call["tensors"] = tensors
    failure = refusal(call)
    if failure:
        call["raised"] = failure[1]
        raise failure[0]


def compute(entry: str, call: dict[str, Any], real: Any = None) -> Any:
    """Fill the call's output: ``real()`` where the real kernel can run here, else the stand-in, if any.

    The release's own kernel (a Triton op of vLLM's) that this GPU's Triton cannot compile for the
    call's dtype (vLLM 0.34.0's gfx942 verify reads fp8 ``e4m3fnuz``: NVIDIA's Triton has no
    ``fp8e4b8``) is served by the stand-in, as on a machine without a GPU, and the call says so in
    ``computed_by``.  Any other failure of the real kernel, and any failure inside the stand-in, is the
    harness's (:class:`StandInFault`), never reported as vLLM raising.  Where a replay's clock is set
    (:data:`State.timer`), the real kernel's time goes into the call's ``replay`` record.
    """
    if real is not None:
        call["computed_by"] = "the release's own kernel"
        try:
            result = real()
        except Exception as e:  # noqa: BLE001  (a ROCm kernel on this machine's GPU: the harness's limit)
            why = (
                f"the release's own {entry} cannot run on this GPU: {type(e).__name__}: "
                f"{str(e).splitlines()[-1] if str(e) else ''}"
            )
            if STATE.kernel is None or not _dtype_not_on_this_gpu(e):
                raise StandInFault(why) from e
            call["computed_by"] = f"the stand-in ({why})"
        else:
            if STATE.timer is not None:
                call["replay"] = {
                    "compute": "the release's own kernel",
                    "t_ms": STATE.timer(real, STATE.device),
                }
            return result
    if STATE.kernel is None:
        return None
    try:
        return STATE.kernel(entry, call)
    except Exception as e:  # noqa: BLE001
        raise StandInFault(f"the {entry} stand-in failed: {type(e).__name__}: {e}") from e


def _dtype_not_on_this_gpu(e: BaseException) -> bool:
    """Triton refusing to compile a type this GPU lacks (``type fp8e4b8 not supported in this
    architecture``, Triton 3.6 on an H200): the kernel cannot run here, whatever its inputs."""
    return type(e).__name__ == "CompilationError" and "not supported in this architecture" in str(e)


def vllm_triton_op(
    entry: str,
    q: torch.Tensor,
    kv: torch.Tensor,
    o: torch.Tensor | None,
    tensors: Any = None,
    real: Any = None,
    **fields: Any,
) -> Any:
    """A launch of one of vLLM's own Triton ops (not AITER), recorded.

    The call is kept like an AITER one (``entry``, the query's shape and dtype,
    the KV dtype, and the scalar ``fields`` the caller names: scales, qlen,
    splits, causal).  Where a GPU and Triton exist, ``real`` (the release's own
    op) computes ``o``; elsewhere :data:`STATE.kernel`, where set, does.  No
    registry applies: the kernel is vLLM's, not AITER's.
    """
    call = {
        "entry": entry,
        "q_shape": list(q.shape),
        "q_dtype": dtype_name(q.dtype),
        "kv_dtype": dtype_name(kv.dtype),
        "persistent": False,
        **{k: _scalar(v) if isinstance(v, torch.Tensor) else v for k, v in fields.items()},
    }
    _keep(call)
    call["tensors"] = {"q": q, "o": o, "kv": kv, **(tensors or {})}
    return compute(entry, call, real)


def _asm_failure(call: dict[str, Any]) -> tuple[BaseException, str] | None:
    """What AITER raises for this ASM request (mla_model.failures, from the registry); None when a kernel
    runs it."""
    from spec.realcode.executed.calls import asm_request

    persistent, failure, kernel, v_scale = _asm_verdict(
        STATE.registry, STATE.arch, asm_request(call), call["num_reqs"]
    )
    call["aiter_persistent"] = persistent
    if failure:
        return failure[0].exception(failure[1]), failure[0].kind
    call["kernel"] = kernel
    # The kernel applies kv_scale to the scores only (sources §57): the replay kernel reads V unscaled.
    call["v_scale_dropped"] = v_scale
    return None


_VERDICTS: dict[tuple, tuple[Any, tuple]] = {}


def _asm_verdict(reg: Any, arch: str, req: Any, num_reqs: int) -> tuple:
    """The registry's answer to one ASM request: (AITER's persistent choice, the failure or None, the
    kernel, whether it leaves V unscaled).  Kept per (registry, arch, request, requests): many shapes make
    the same request, and the Python interpretation of the lookup is most of a recorded call's cost."""
    from mla_model.failures import ASM_FAILURES, AsmCall, first_of
    from mla_model.registry import asm_lookup, resolved_kernel, v_scale_dropped

    key = (id(reg), arch, req, num_reqs)
    hit = _VERDICTS.get(key)
    if hit is not None and hit[0] is reg:
        return hit[1]
    a = asm_lookup(reg, arch, req, num_reqs)
    failure = first_of(ASM_FAILURES, AsmCall(req, a, arch))
    verdict = (
        bool(a.persistent),
        failure,
        None if failure else resolved_kernel(reg, arch, req, a),
        None if failure else bool(v_scale_dropped(reg, arch, req, a)),
    )
    _VERDICTS[key] = (reg, verdict)
    return verdict


def drops_v_scale(num_heads: int, qlen: int, q_fp8: bool) -> bool:
    """Stand-in for vLLM 0.34.0's ``_aiter_fp8_mla_decode_drops_v_scale`` (L246-342), whose body launches
    AITER's fp8 persistent decode on one causal block with kv_scale 2 and compares it with a reference: the
    registry says whether the kernel that block resolves to leaves V unscaled (sources §57).  Only the
    measurement is replaced; which heads and qlens the builder probes, the metadata flag and the multiply in
    forward_mqa are the release's code."""
    from mla_model.registry import probe_drops_v_scale

    return bool(probe_drops_v_scale(STATE.registry, STATE.arch, num_heads, qlen, "fp8" if q_fp8 else "bf16"))


def _gluon_failure(call: dict[str, Any]) -> tuple[BaseException, str] | None:
    """What mla_gluon asserts for this call (mla_model.failures); None when it runs."""
    from mla_model.failures import GLUON_ASSERTS, GluonCall, first_of
    from mla_model.registry import gluon_check

    reg, heads, rows = STATE.registry, call["q_shape"][1], call["num_rows"]
    g = gluon_check(reg, STATE.arch, STATE.gluon_build, call["q_dtype"], call["kv_dtype"], heads, rows == 1)
    failure = first_of(
        GLUON_ASSERTS, GluonCall(g, STATE.arch, call["q_dtype"], call["kv_dtype"], heads, rows, 1)
    )
    return (failure[0].exception(failure[1]), failure[0].kind) if failure else None
