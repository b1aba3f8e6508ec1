"""The routing facts the vLLM drop-in module pins, read the same way from the model and from the release.

The drop-in module (``mla-spec cases --style vllm``, rendered by
:mod:`conformance.vllm_module`) compares, per case and per decision, what
mla-spec's model says with what the release does.  Both sides come from
:mod:`spec.realcode.executed.differential`: :func:`~spec.realcode.executed.differential.expected`
(the model revision's route) and :func:`~spec.realcode.executed.differential.observed`
(one executed step's record: the release's real builder, ``build`` and
``forward_mqa`` over the harness stubs, AITER's entry points recorded).
:func:`facts` reduces either to the same flat dict, so the generator writes
the model's facts into the module and the shim hands it the release's.

The threshold is the builder's ``reorder_batch_threshold`` on the executed
side (the record's ``threshold``, read back from the release's
``AiterMLAMetadataBuilder``) and the model revision's on the other; no
formula is written into the module.
"""

from __future__ import annotations

from typing import Any

ASM_PATHS = ("asm_persistent", "asm_nonpersistent")
# vLLM's own Triton verify, and the DCP row views (0.33.0's split-KV decode, AITER's segmented MLA).
TRITON_VERIFY_PATHS = ("triton_verify", "triton_dcp_verify")

# Each decision the module pins: its test's name and the facts it compares.
DECISIONS: dict[str, tuple[str, ...]] = {
    "gluon_predicates": ("gluon_decode", "gluon_verify"),
    "persistent_gate": ("persistent_metadata", "metadata_qlen"),
    "triton_verify": ("triton_verify",),
    "dcp_route": ("path", "lse", "cprr"),
    "asm_request": ("path", "q_dtype", "kv_dtype", "padded_heads", "kernel_qlen", "lse", "cprr"),
    "outcome": ("validity", "outcome"),
    "threshold": ("threshold", "sized_for_threshold"),
}


def facts(seen: dict[str, Any], threshold: int) -> dict[str, Any]:
    """One step's routing facts from a ``differential`` fact dict and the step's reorder threshold.

    A fact the dict does not state (no kernel was called; the shape is not a decode step) is left out,
    and so are the path and the metadata's persistent flag wherever vLLM raises: the model names the
    route it would have taken, the record shows them only if vLLM raised after building them.
    """
    out: dict[str, Any] = {"validity": bool(seen["validity"]), "threshold": int(threshold)}
    if not out["validity"]:
        return out
    out["outcome"] = seen.get("outcome")
    raised = out["outcome"] == "vllm_raises"
    for name in ("persistent_metadata", "metadata_qlen"):
        if seen.get(name) is not None and not (raised and name == "persistent_metadata"):
            out[name] = seen[name]
    qlen = seen.get("metadata_qlen")
    out["sized_for_threshold"] = qlen is not None and int(qlen) >= int(threshold)
    path = seen.get("path")
    if path is None or raised:
        return out
    out.update(
        path=path,
        gluon_decode=path == "gluon_decode",
        gluon_verify=path == "gluon_verify",
        triton_verify=path in TRITON_VERIFY_PATHS,
    )
    if path in ASM_PATHS:
        out.update({k: seen[k] for k in DECISIONS["asm_request"][1:]})
    return out


def applies(decision: str, pinned: dict[str, Any], shape: dict[str, Any]) -> bool:
    """Whether the case's pinned facts state ``decision`` (a DCP route only under DCP, an ASM request only
    on an ASM path, the threshold only with a drafter, call facts only where a kernel is called)."""
    if decision == "threshold":
        return shape["spec_method"] != "none"
    if decision == "outcome":
        return True
    if not pinned["validity"]:
        return False
    if decision == "persistent_gate":
        return "metadata_qlen" in pinned or "persistent_metadata" in pinned
    if "path" not in pinned:
        return False
    if decision == "dcp_route":
        return shape["dcp_world_size"] > 1
    if decision == "asm_request":
        return pinned["path"] in ASM_PATHS
    return True


def pinned(seen: dict[str, Any], threshold: int, shape: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per decision that applies, the facts it compares: what the module pins for one case."""
    f = facts(seen, threshold)
    return {d: {k: f.get(k) for k in names} for d, names in DECISIONS.items() if applies(d, f, shape)}
