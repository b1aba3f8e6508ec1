"""Gate revision ``vllm-0.27``: vLLM 0.27.0 / 0.27.1, the release before the fix.

Source: ``vllm/v1/attention/backends/mla/rocm_aiter_mla.py`` of vLLM 0.27.0
(48,502 B, md5 8213c41c; 0.27.1 is byte-identical), i.e. main before #50578
and #51011 (sources §15-§18).  Line numbers below are that file's.
"""

from __future__ import annotations

from typing import Any

from mla_model.logic import Term, all_of, choose, if_then_else, lookup_int
from mla_model.registry import Registry
from mla_model.revisions.base import (
    pre_dcp_revision,
    pre_dcp_route,
    whitelist_mtp_decode_qlen,
)
from mla_model.route import HEAD_PADDINGS, Route

# repeat_interleave(16 // h) yields h * (16 // h) heads: 16 only for divisors of 16.
_REPEAT_INTERLEAVE_HEADS = {h: h * (16 // h) for h in range(1, 16)}


def use_gluon_decode(num_heads: Term, max_qo_len: Term) -> Term:
    """L829: ``num_heads < 16 and max_qo_len == 1``; no arch, dtype or mode check."""
    return all_of(num_heads < 16, max_qo_len == 1)


def use_gluon_verify(num_heads: Term, max_qo_len: Term) -> Term:
    """forward_mqa L1116, inline: ``self.num_heads < 16 and max_qo_len > 1``."""
    return all_of(num_heads < 16, max_qo_len > 1)


def route(s: Any, reg: Registry) -> Route:
    heads, qlen = s.num_heads, s.max_qo_len
    gd = use_gluon_decode(heads, qlen)
    gv = use_gluon_verify(heads, qlen)
    mtp_decode_qlen = whitelist_mtp_decode_qlen(s)  # L231-238
    wants = heads >= 16  # L657
    return pre_dcp_route(
        s,
        gd,
        gv,
        wants,
        mtp_decode_qlen,
        head_padding=choose(HEAD_PADDINGS, [(heads >= 16, "none")], "repeat_interleave"),
        padded_q_heads=if_then_else(heads >= 16, heads, lookup_int(heads, _REPEAT_INTERLEAVE_HEADS, heads)),
    )


REVISION = pre_dcp_revision(
    id="vllm-0.27",
    title="vLLM 0.27.0/0.27.1: before #50578 and #51011",
    source="vllm==0.27.0 rocm_aiter_mla.py (md5 8213c41c), L231-238, L657, L829, L1116",
    route=route,
)
