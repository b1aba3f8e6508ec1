"""Gate revision ``main-pre-51011``: vLLM main just before #51011 (after #50578).

Never released.  Reconstructed (sources §19) from the pristine side of the
#51011 diff, #50578's head commit c5d4f2f6 and the PR texts:
#50578 (merged d8eabdbf, 2026-08-06) gated small-head Gluon decode behind
gfx950 and the ``VLLM_ROCM_AITER_MLA_ASM_PADDING`` mode and tiled non-divisor
head counts onto the ASM kernel; the verify branch stayed inline in
``forward_mqa`` (gfx950-gated, no dtype or mode check); ``_mtp_decode_qlen``
and the persistent gate are those of 0.27.
"""

from __future__ import annotations

from typing import Any

from mla_model.logic import Term, all_of, any_of, eq, ne
from mla_model.registry import Registry
from mla_model.revisions.base import (
    divides_16,
    on_gfx950,
    pre_dcp_revision,
    pre_dcp_route,
    whitelist_mtp_decode_qlen,
)
from mla_model.route import Route


def use_gluon_decode(num_heads: Term, max_qo_len: Term, s: Any) -> Term:
    """``AiterMLAHelper.use_gluon_decode(num_heads, max_qo_len)`` after #50578."""
    mode = s.asm_padding_mode  # _aiter_mla_small_head_mode()
    return all_of(
        num_heads < 16,
        max_qo_len == 1,
        ne(mode, "asm"),
        on_gfx950(s),  # _gluon_mla_decode_supported()
        any_of(eq(mode, "gluon"), divides_16(num_heads)),
    )


def use_gluon_verify(num_heads: Term, max_qo_len: Term, s: Any) -> Term:
    """forward_mqa's inline verify branch: ``num_heads < 16 and max_qo_len > 1`` on gfx950."""
    return all_of(num_heads < 16, max_qo_len > 1, on_gfx950(s))  # on_gfx950: _gluon_mla_decode_supported()


def route(s: Any, reg: Registry) -> Route:
    heads, qlen = s.num_heads, s.max_qo_len
    return pre_dcp_route(
        s,
        use_gluon_decode(heads, qlen, s),
        use_gluon_verify(heads, qlen, s),
        wants=heads >= 16,
        mtp_decode_qlen=whitelist_mtp_decode_qlen(s),
    )


REVISION = pre_dcp_revision(
    id="main-pre-51011",
    title="vLLM main after #50578, before #51011 (unreleased)",
    source="sources §19: #50578 d8eabdbf + pristine side of the #51011 diff",
    route=route,
)
