"""Detection, measured (issue 24 item 6): a corpus of edits a maintainer could make, and what check says.

Each edit is a script applied at run time to a release's own ``rocm_aiter_mla.py`` from the cache (no vLLM
text is stored here beyond the short anchors each script replaces), written into a vLLM tree of that
release's other files (:func:`spec.analyses.mutants.shadow_tree`), so ``mla-spec check FILE`` proves it
against its baseline release class by class and executes it as its second judge.  An edit that changes
behaviour must exit 1 naming what it breaks (a NEW class of an invariant, or a disagreement of the executed
file with its lifted gates); one that preserves behaviour must exit 0.

``python -m benchmarks.detection --write`` runs the corpus and writes
docs/reference/results/detection.json and docs/explanation/detection.md (rendered from the JSON alone);
tests/test_detection.py runs it again and holds the page and each edit's outcome to it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "reference" / "results" / "detection.json"
PAGE = ROOT / "docs" / "explanation" / "detection.md"
# changes: breaks an invariant (or the file disagrees with its lifted gates), check must exit 1 naming it;
# preserves: routes every shape as before, check must exit 0; widens: routes shapes differently and breaks
# nothing (the model proves every invariant it held still holds there), check must exit 0 too, and `diff`
# is the command that shows the change.
CHANGES, PRESERVES, WIDENS = "changes", "preserves", "widens"


@dataclass(frozen=True)
class Edit:
    """One edit: ``steps`` are (pattern, replacement, count) applied in order to the release's file, the
    pattern a literal unless it starts ``re:`` (a regular expression; count 0: every match, at least
    one).  ``expect``: what a behaviour-changing edit must raise, each an invariant id or ``executed``
    (a disagreement of the executed file); one of them is enough."""

    name: str
    release: str
    kind: str
    why: str
    steps: tuple[tuple[str, str, int], ...]
    expect: tuple[str, ...] = ()

    def apply(self, text: str) -> str:
        for pattern, replacement, count in self.steps:
            if pattern.startswith("re:"):
                found = len(re.findall(pattern[3:], text))
                ok = found >= 1 if count == 0 else found == count
                text = re.sub(pattern[3:], replacement, text)
            else:
                found = text.count(pattern)
                ok = found >= 1 if count == 0 else found == count
                text = text.replace(pattern, replacement)
            if not ok:
                raise ValueError(
                    f"{self.name}: {pattern[:60]!r} occurs {found} times in {self.release}'s file"
                )
        return text


def _e(
    name: str, release: str, kind: str, why: str, *steps: tuple[str, str, int], expect: tuple[str, ...] = ()
) -> Edit:
    return Edit(name, release, kind, why, steps, expect)


# 0.34.0 anchors (short lines of the release's file that the scripts rewrite)
FP8_GUARD_34 = (
    "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        mode = _aiter"
)
MODE_34 = '        mode = _aiter_mla_small_head_mode()\n        if mode == "asm":\n            return False\n'
PS_FP8_34 = "                or is_quantized_kv_cache(self._kv_cache_dtype_str)\n            )\n            and max_qo_len >= 1"
V_SCALE_34 = "            fp8_v_scale_fix=(\n                has_persistent_metadata\n"
PROBE_RANGE_END_34 = "                    + 1,\n                )\n                if _aiter"
SIZED_QLENS_34 = "            for qlen in range(1, self._mtp_decode_qlen + 1)\n"
CDNA3_FP8_34 = "    if is_quantized_kv_cache(kv_cache_dtype):\n        return AiterMLAHelper.get_actual_mla_num_heads(decode_num_heads) != 128\n"
# 0.28.0 anchors
SIZED_QLEN_28 = "            max_num_reqs,\n            self._mtp_decode_qlen,\n"
PS_GATE_28 = "                or max_qo_len <= AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN\n                or is_quantized_kv_cache(self._kv_cache_dtype_str)\n"
VERIFY_FP8_28 = (
    "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        # Same arch"
)
GLUON_TAIL_28 = '        gluon_supported = _gluon_mla_decode_supported()\n        if mode == "gluon":\n            return gluon_supported\n        return m % num_heads == 0 and gluon_supported\n'

CORPUS: tuple[Edit, ...] = (
    # --- 0.34.0, behaviour-changing -------------------------------------------------------------------
    _e(
        "pad-small-heads-to-8",
        "0.34.0",
        CHANGES,
        "pad small head counts to 8 instead of 16 (issue 24)",
        ("    _AITER_MIN_MLA_HEADS: Final = 16\n", "    _AITER_MIN_MLA_HEADS: Final = 8\n", 1),
        expect=("kernel-exists",),
    ),
    _e(
        "persistent-qlen-5",
        "0.34.0",
        CHANGES,
        "let the padded persistent ASM decode take qlen 5",
        ("    _ASM_PADDED_MAX_PS_QLEN: Final = 4\n", "    _ASM_PADDED_MAX_PS_QLEN: Final = 5\n", 1),
        expect=("kernel-exists",),
    ),
    _e(
        "fp8-to-gluon-decode",
        "0.34.0",
        CHANGES,
        "drop use_gluon_decode's fp8 guard",
        (
            "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        mode = _aiter",
            "        mode = _aiter",
            1,
        ),
        expect=("fp8-never-reaches-gluon", "executed"),
    ),
    _e(
        "fp8-guard-inverted",
        "0.34.0",
        CHANGES,
        "invert use_gluon_decode's fp8 guard",
        (FP8_GUARD_34, FP8_GUARD_34.replace("if is_quantized", "if not is_quantized"), 1),
        expect=("fp8-never-reaches-gluon", "executed"),
    ),
    _e(
        "fp8-to-gluon-verify",
        "0.34.0",
        CHANGES,
        "drop use_gluon_verify's fp8 guard",
        (
            "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        if num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS:\n            return False\n        if not _gluon",
            "        if num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS:\n            return False\n        if not _gluon",
            1,
        ),
        expect=("fp8-never-reaches-gluon", "executed"),
    ),
    _e(
        "gluon-verify-non-causal",
        "0.34.0",
        CHANGES,
        "let a non-causal block reach Gluon verify",
        (
            "        if not causal:\n            return False\n        if max_qo_len <= 1 or dcp_world_size > 1:",
            "        if max_qo_len <= 1 or dcp_world_size > 1:",
            1,
        ),
        expect=("non-causal-not-causal-only",),
    ),
    _e(
        "gluon-verify-under-dcp",
        "0.34.0",
        CHANGES,
        "let DCP verify reach Gluon",
        ("        if max_qo_len <= 1 or dcp_world_size > 1:", "        if max_qo_len <= 1:", 1),
        expect=("dcp-verify-routed", "dcp-returns-lse", "dcp-causal-window"),
    ),
    _e(
        "gluon-ignores-kv-bound-decode",
        "0.34.0",
        CHANGES,
        "Gluon decode past the 2 GiB KV bound",
        (
            "        # Last, so the size warning only fires where Gluon would have run.\n        return _gluon_kv_cache_in_bounds(kv_cache_bytes)\n",
            "        return True\n",
            1,
        ),
        expect=("gluon-kv-in-bounds",),
    ),
    _e(
        "gluon-kv-bound-off",
        "0.34.0",
        CHANGES,
        "the KV bound check always passes",
        ("    if kv_cache_bytes is None or kv_cache_bytes <= _GLUON_MAX_KV_CACHE_BYTES:", "    if True:", 1),
        expect=("gluon-kv-in-bounds",),
    ),
    _e(
        "mode-knob-defaults-to-gluon",
        "0.34.0",
        PRESERVES,
        "make the mode knob's fallback gluon (dead code: vllm/envs.py's env_with_choices, 0.34.0 L1417-1422, "
        "returns the default auto for an unset variable and refuses any value outside auto/gluon/asm, so "
        "the `or` never takes its right operand)",
        (
            '(envs.VLLM_ROCM_AITER_MLA_ASM_PADDING or "auto")',
            '(envs.VLLM_ROCM_AITER_MLA_ASM_PADDING or "gluon")',
            1,
        ),
    ),
    _e(
        "v-scale-fix-off",
        "0.34.0",
        CHANGES,
        "stop applying the fp8 V-scale fix",
        (V_SCALE_34, V_SCALE_34.replace("has_persistent", "False and has_persistent"), 1),
        expect=("kv-scale-applied",),
    ),
    _e(
        "v-scale-probe-range-short",
        "0.34.0",
        CHANGES,
        "probe the V scale one qlen short (range end min(_mtp_decode_qlen, 4) + 0)",
        (PROBE_RANGE_END_34, PROBE_RANGE_END_34.replace("+ 1,", "+ 0,"), 1),
        expect=("kv-scale-applied",),
    ),
    _e(
        "v-scale-probe-bf16-query",
        "0.34.0",
        CHANGES,
        "ask the V-scale probe about the bf16-query kernel",
        ('heads, qlen, self._kv_cache_dtype_str == "fp8"', "heads, qlen, False", 1),
        expect=("kv-scale-applied",),
    ),
    _e(
        "buffers-sized-one-qlen-short",
        "0.34.0",
        CHANGES,
        "size the persistent buffers up to _mtp_decode_qlen - 1",
        (
            SIZED_QLENS_34,
            SIZED_QLENS_34.replace("+ 1)", "- 1, 1) + 1)").replace("range(1, ", "range(1, max("),
            1,
        ),
        expect=("metadata-covers-qlen",),
    ),
    _e(
        "pad-by-tiling",
        "0.34.0",
        CHANGES,
        "pad a divisor head count by tiling the query heads instead of interleaving them",
        (
            "            return q.repeat_interleave(m // num_heads, dim=1)\n",
            "            return q.repeat(1, m // num_heads, 1)\n",
            1,
        ),
        expect=("executed",),
    ),
    _e(
        "persistent-fp8-padded-qlen5",
        "0.34.0",
        CHANGES,
        "take fp8 padded verify past qlen 4 off the schedule",
        (PS_FP8_34, "            )\n            and max_qo_len >= 1", 1),
        expect=("no-known-wrong-kernel", "kernel-exists", "persistent-metadata-used"),
    ),
    _e(
        "cdna3-fp8-causal-verify-on-asm",
        "0.34.0",
        CHANGES,
        "keep fp8 on ASM in the CDNA3 causal verify (issue 24)",
        (CDNA3_FP8_34, "    if is_quantized_kv_cache(kv_cache_dtype):\n        return False\n", 1),
        expect=("no-known-wrong-kernel", "kernel-exists"),
    ),
    _e(
        "cdna-version-swapped",
        "0.34.0",
        CHANGES,
        "test CDNA 4 where CDNA 3 was meant (arch swap)",
        ("    if get_cdna_version() != 3:\n", "    if get_cdna_version() != 4:\n", 1),
        expect=("no-known-wrong-kernel", "kernel-exists", "executed"),
    ),
    _e(
        "cprr-from-qlen-2",
        "0.34.0",
        CHANGES,
        "round-robin ASM DCP verify from qlen 2",
        (
            "    if asm_selected and max_qo_len >= _MIN_CPRR_QLEN:",
            "    if asm_selected and max_qo_len >= 2:",
            1,
        ),
        expect=("kernel-exists", "dcp-verify-supported", "executed"),
    ),
    _e(
        "cprr-heads-without-16",
        "0.34.0",
        CHANGES,
        "drop 16 from the native CPRR head counts",
        ("_NATIVE_CPRR_HEADS: Final = (16, 32, 64, 128)", "_NATIVE_CPRR_HEADS: Final = (32, 64, 128)", 1),
        expect=("kernel-exists", "head-padding-round-trips", "executed"),
    ),
    _e(
        "dcp-non-causal-to-cprr",
        "0.34.0",
        CHANGES,
        "send a non-causal DCP block down the verify routes",
        (
            "    if not causal or max_qo_len <= 1:\n        return _DCPDecodeRoute.PLAIN",
            "    if max_qo_len <= 1:\n        return _DCPDecodeRoute.PLAIN",
            1,
        ),
        expect=("dcp-causal-window", "non-causal-not-causal-only", "executed", "kernel-exists"),
    ),
    _e(
        "valid-heads-multiple-of-8",
        "0.34.0",
        WIDENS,
        "accept head counts past 128 that are multiples of 8 (136 heads tile to 144 in get_mla_padded_q, "
        "0.34.0 L2526-2533, and run 144's kernels: every invariant holds there)",
        (
            "                or num_heads % AiterMLAHelper._AITER_MIN_MLA_HEADS == 0\n            )\n        )",
            "                or num_heads % 8 == 0\n            )\n        )",
            1,
        ),
    ),
    _e(
        "causal-verify-by-heads",
        "0.34.0",
        CHANGES,
        "gate the persistent schedule by head count alone",
        (
            "                not causal\n                or self._decode_num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS\n                or max_qo_len",
            "                self._decode_num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS\n                or max_qo_len",
            1,
        ),
        expect=("non-causal-not-causal-only", "persistent-metadata-used", "kernel-exists", "total"),
    ),
    _e(
        "new-knob-lets-fp8-through",
        "0.34.0",
        CHANGES,
        "a new environment knob lets fp8 reach Gluon decode",
        ("import functools\n", "import functools\nimport os\n", 1),
        (
            FP8_GUARD_34,
            FP8_GUARD_34.replace(
                "if is_quantized_kv_cache(kv_cache_dtype):",
                'if is_quantized_kv_cache(kv_cache_dtype) and os.environ.get("VLLM_ROCM_AITER_MLA_FP8_GLUON") != "1":',
            ),
            1,
        ),
        expect=("fp8-never-reaches-gluon", "executed"),
    ),
    _e(
        "mtp-qlen-whitelist",
        "0.34.0",
        CHANGES,
        "size decode for qlen 1 whatever the drafter (the #51011 whitelist's effect)",
        (
            "        self._mtp_decode_qlen = self.reorder_batch_threshold or 1\n",
            "        self._mtp_decode_qlen = 1\n",
            1,
        ),
        expect=("metadata-covers-qlen", "persistent-metadata-used", "executed"),
    ),
    # --- 0.34.0, behaviour-preserving -----------------------------------------------------------------
    _e(
        "persistent-unbounded-qlen",
        "0.34.0",
        PRESERVES,
        "drop the persistent gate's qlen bound, which the scheduler's reorder_batch_threshold already enforces",
        (
            "            and max_qo_len <= self._mtp_decode_qlen\n        )\n        if (\n            not causal",
            "        )\n        if (\n            not causal",
            1,
        ),
    ),
    _e(
        "rename-persistent-local",
        "0.34.0",
        PRESERVES,
        "rename the local holding the persistent gate",
        (r"re:\buse_persistent_metadata\b(?!=)", "use_ps_schedule", 0),
    ),
    _e(
        "rename-triton-verify-local",
        "0.34.0",
        PRESERVES,
        "rename the local holding the Triton verify decision",
        (r"re:(?<![\w.])use_triton_verify\b", "triton_verify_taken", 5),
    ),
    _e(
        "persistent-gate-through-temporary",
        "0.34.0",
        PRESERVES,
        "test the persistent gate through a second local",
        (
            "        if use_persistent_metadata:\n            from aiter import get_mla_metadata_v1\n",
            "        build_schedule = use_persistent_metadata\n        if build_schedule:\n"
            "            from aiter import get_mla_metadata_v1\n",
            1,
        ),
    ),
    _e(
        "rename-dcp-route-local",
        "0.34.0",
        PRESERVES,
        "rename the local holding the DCP route",
        (r"re:(?<![\w.])dcp_route(?=[ \n),])", "route_for_dcp", 0),
    ),
    _e(
        "swap-gluon-operands",
        "0.34.0",
        PRESERVES,
        "reorder independent operands of the persistent gate",
        (
            "            not use_gluon_decode\n            and not use_gluon_verify\n",
            "            not use_gluon_verify\n            and not use_gluon_decode\n",
            1,
        ),
    ),
    _e(
        "swap-guard-operands",
        "0.34.0",
        PRESERVES,
        "reorder the operands of use_gluon_decode's first guard",
        (
            "        if num_heads >= m or max_qo_len != 1:\n",
            "        if max_qo_len != 1 or num_heads >= m:\n",
            1,
        ),
    ),
    _e(
        "temporary-for-small-heads",
        "0.34.0",
        PRESERVES,
        "introduce a temporary",
        (
            "        if num_heads >= m or max_qo_len != 1:\n",
            "        small = num_heads < m\n        if not small or max_qo_len != 1:\n",
            1,
        ),
    ),
    _e(
        "swap-independent-guards",
        "0.34.0",
        PRESERVES,
        "swap two guards that both return False",
        (
            "    if dcp_world_size > 1:\n        return False\n    if mtp_decode_qlen <= AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN:\n        return False\n",
            "    if mtp_decode_qlen <= AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN:\n        return False\n    if dcp_world_size > 1:\n        return False\n",
            1,
        ),
    ),
    _e(
        "extract-fp8-helper",
        "0.34.0",
        PRESERVES,
        "extract the fp8 test into a module function",
        (
            FP8_GUARD_34,
            FP8_GUARD_34.replace("is_quantized_kv_cache(kv_cache_dtype)", "_fp8_cache(kv_cache_dtype)"),
            1,
        ),
        (
            "def _aiter_mla_small_head_mode() -> str:\n",
            "def _fp8_cache(kv_cache_dtype: str) -> bool:\n    return is_quantized_kv_cache(kv_cache_dtype)\n\n\ndef _aiter_mla_small_head_mode() -> str:\n",
            1,
        ),
    ),
    _e(
        "constant-as-expression",
        "0.34.0",
        PRESERVES,
        "spell a constant as an expression",
        ("_MIN_CPRR_QLEN: Final = 3\n", "_MIN_CPRR_QLEN: Final = 2 + 1\n", 1),
    ),
    _e(
        "double-negation",
        "0.34.0",
        PRESERVES,
        "state the asm-mode test as a double negation",
        (MODE_34, MODE_34.replace('if mode == "asm":', 'if not (mode != "asm"):'), 1),
    ),
    _e(
        "comments-and-blank-lines",
        "0.34.0",
        PRESERVES,
        "reword comments, add blank lines",
        (
            "        # Last, so the size warning only fires where Gluon would have run.\n",
            "\n        # The size check comes last: it warns only where Gluon would run.\n\n",
            1,
        ),
    ),
    _e(
        "early-return-cprr-heads",
        "0.34.0",
        PRESERVES,
        "an if-chain turned into an early return",
        (
            "    if decode_num_heads in _NATIVE_CPRR_HEADS:\n        return decode_num_heads\n    for nat in _NATIVE_CPRR_HEADS:\n        if nat >= decode_num_heads:\n            return nat\n    return 0\n",
            "    for nat in _NATIVE_CPRR_HEADS:\n        if nat >= decode_num_heads:\n            return nat\n    return 0\n",
            1,
        ),
    ),
    # --- 0.28.0, behaviour-changing -------------------------------------------------------------------
    _e(
        "whitelist-back-028",
        "0.28.0",
        CHANGES,
        "size decode for qlen 1 again (the drafter whitelist #51011 removed)",
        (
            "        self._mtp_decode_qlen = self.reorder_batch_threshold or 1\n",
            "        self._mtp_decode_qlen = 1\n",
            1,
        ),
        expect=("metadata-covers-qlen", "persistent-metadata-used", "executed"),
    ),
    _e(
        "fp8-padded-off-schedule-028",
        "0.28.0",
        CHANGES,
        "fp8 padded verify past qlen 4 off the schedule (Kimi-K3 TP8)",
        (PS_GATE_28, "                or max_qo_len <= AiterMLAHelper._ASM_PADDED_MAX_PS_QLEN\n", 1),
        expect=("no-known-wrong-kernel", "kernel-exists", "persistent-metadata-used"),
    ),
    _e(
        "padded-off-schedule-028",
        "0.28.0",
        CHANGES,
        "gate the schedule on 16 heads, as before #51011",
        (PS_GATE_28, "", 1),
        expect=("no-known-wrong-kernel", "kernel-exists", "persistent-metadata-used"),
    ),
    _e(
        "fp8-to-gluon-verify-028",
        "0.28.0",
        CHANGES,
        "drop use_gluon_verify's fp8 guard",
        (VERIFY_FP8_28, "        # Same arch", 1),
        expect=("fp8-never-reaches-gluon", "executed"),
    ),
    _e(
        "buffers-sized-for-qlen-1-028",
        "0.28.0",
        CHANGES,
        "size the persistent buffers for single-token decode only",
        (SIZED_QLEN_28, SIZED_QLEN_28.replace("self._mtp_decode_qlen,", "1,"), 1),
        expect=("metadata-covers-qlen",),
    ),
    _e(
        "pad-to-8-028",
        "0.28.0",
        CHANGES,
        "pad small heads to 8",
        (
            "        return max(num_heads, AiterMLAHelper._AITER_MIN_MLA_HEADS)\n",
            "        return max(num_heads, 8)\n",
            1,
        ),
        expect=("kernel-exists", "executed"),
    ),
    _e(
        "persistent-qlen-8-028",
        "0.28.0",
        CHANGES,
        "let the padded persistent decode take qlen up to 8",
        ("    _ASM_PADDED_MAX_PS_QLEN: Final = 4\n", "    _ASM_PADDED_MAX_PS_QLEN: Final = 8\n", 1),
        expect=("kernel-exists",),
    ),
    _e(
        "gluon-any-heads-028",
        "0.28.0",
        CHANGES,
        "Gluon decode for non-divisor head counts in auto mode",
        (
            GLUON_TAIL_28,
            GLUON_TAIL_28.replace("return m % num_heads == 0 and gluon_supported", "return gluon_supported"),
            1,
        ),
        expect=("head-padding-round-trips", "kernel-exists", "executed", "total"),
    ),
    # --- 0.28.0, behaviour-preserving -----------------------------------------------------------------
    _e(
        "rename-persistent-local-028",
        "0.28.0",
        PRESERVES,
        "rename the local holding the persistent gate",
        (r"re:\buse_persistent_metadata\b", "use_ps_schedule", 0),
    ),
    _e(
        "swap-qlen-bounds-028",
        "0.28.0",
        PRESERVES,
        "reorder the qlen bounds of the persistent gate",
        (
            "            and max_qo_len >= 1\n            and max_qo_len <= self._mtp_decode_qlen\n",
            "            and max_qo_len <= self._mtp_decode_qlen\n            and max_qo_len >= 1\n",
            1,
        ),
    ),
    _e(
        "swap-divisor-operands-028",
        "0.28.0",
        PRESERVES,
        "reorder the divisor test's operands",
        (
            GLUON_TAIL_28,
            GLUON_TAIL_28.replace(
                "m % num_heads == 0 and gluon_supported", "gluon_supported and m % num_heads == 0"
            ),
            1,
        ),
    ),
    _e(
        "inline-helper-result-028",
        "0.28.0",
        PRESERVES,
        "inline a temporary",
        (
            GLUON_TAIL_28,
            '        if mode == "gluon":\n            return _gluon_mla_decode_supported()\n        return m % num_heads == 0 and _gluon_mla_decode_supported()\n',
            1,
        ),
    ),
    _e(
        "swap-verify-guard-028",
        "0.28.0",
        PRESERVES,
        "reorder use_gluon_verify's first guard",
        (
            "        if num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS or max_qo_len <= 1:\n",
            "        if max_qo_len <= 1 or num_heads >= AiterMLAHelper._AITER_MIN_MLA_HEADS:\n",
            1,
        ),
    ),
    _e(
        "comment-only-028",
        "0.28.0",
        PRESERVES,
        "reword a comment",
        (
            "        # Same arch and mode gating as use_gluon_decode.\n",
            "        # The arch and mode gating of use_gluon_decode, again.\n",
            1,
        ),
    ),
)


def outcome(edit: Edit, workdir: Path) -> dict[str, Any]:
    """What ``mla-spec check FILE`` says of the edit, run as a user runs it."""
    from spec.realcode.source import fetch_release

    return check_outcome(
        edit.name, edit.release, edit.apply(fetch_release(edit.release).read_text()), workdir
    )


def check_outcome(name: str, release: str, text: str, workdir: Path) -> dict[str, Any]:
    """``mla-spec check FILE --format json`` on ``text`` as the file of a tree of ``release``'s other files:
    its exit, the NEW and GONE classes per invariant, and the executed judge's disagreements by field."""
    from spec.analyses.mutants import shadow_tree

    file = shadow_tree(release, text, workdir / name)
    began = time.perf_counter()
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from conformance.cli import main; main()",
            "check",
            str(file),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    seconds = time.perf_counter() - began
    out: dict[str, Any] = {"name": name, "exit": run.returncode, "seconds": round(seconds, 1)}
    try:
        data = json.loads(run.stdout)
    except ValueError:
        out["error"] = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return out
    new: dict[str, int] = {}
    gone: dict[str, int] = {}
    for r in data["results"]:
        for tally, count in (
            (new, r.get("baseline", {}).get("new", 0)),
            (gone, len(r.get("baseline", {}).get("absent", []))),
        ):
            if count:
                tally[r["invariant"]] = tally.get(r["invariant"], 0) + count
    out["new_classes"] = dict(sorted(new.items()))
    out["gone_classes"] = dict(sorted(gone.items()))
    out["grown"] = sorted({r["invariant"] for r in data["results"] if "grown" in r.get("baseline", {})})
    executed = (data.get("executed") or [{}])[0]
    out["executed"] = executed.get("disagreements_by_field", {}) if executed.get("ran") else None
    return out


def raised(result: dict[str, Any]) -> set[str]:
    """The invariants with NEW classes or NEW violations inside a baseline class, and ``executed`` for a
    disagreement."""
    return (
        set(result.get("new_classes", {}))
        | set(result.get("grown", ()))
        | ({"executed"} if result.get("executed") else set())
    )


def verdict(edit: Edit, result: dict[str, Any]) -> str:
    """caught / missed (an edit that breaks something), quiet / false alarm (one that preserves or widens
    what the file does), or error."""
    if "error" in result or result["exit"] not in (0, 1):
        return "error"
    if edit.kind == CHANGES:
        return "caught" if result["exit"] == 1 and raised(result) & set(edit.expect) else "missed"
    return "quiet" if result["exit"] == 0 else "false alarm"


def run_corpus(workers: int = 2, only: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run every edit of the corpus (or those named in ``only``)."""
    unknown = set(only) - {e.name for e in CORPUS}
    if unknown:
        raise SystemExit(f"detection: no edit named {', '.join(sorted(unknown))}")
    edits = [e for e in CORPUS if not only or e.name in only]
    with (
        tempfile.TemporaryDirectory(prefix="mla-spec-detection-") as scratch,
        ThreadPoolExecutor(workers) as pool,
    ):
        results = list(pool.map(lambda e: outcome(e, Path(scratch)), edits))
    for edit, r in zip(edits, results):
        r["verdict"] = verdict(edit, r)
    return {"edits": results, "commit": _commit(), "date": time.strftime("%Y-%m-%d")}


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()


def counts(results: dict[str, Any]) -> dict[str, int]:
    out = {"caught": 0, "missed": 0, "quiet": 0, "false alarm": 0, "error": 0}
    for r in results["edits"]:
        out[r["verdict"]] += 1
    return out


def render(results: dict[str, Any]) -> str:
    by_name = {e.name: e for e in CORPUS}
    c = counts(results)
    changing = sum(e.kind == CHANGES for e in CORPUS)
    widening = sum(e.kind == WIDENS for e in CORPUS)
    lines = [
        "<!-- Generated by `python -m benchmarks.detection --write` from docs/reference/results/detection.json; "
        "edit that script, not this page. -->",
        "",
        "# Detection, measured",
        "",
        f"{len(CORPUS)} edits a maintainer could make to vLLM's `rocm_aiter_mla.py` ({changing} that break "
        f"something, {widening} that route some shapes differently and break nothing, "
        f"{len(CORPUS) - changing - widening} that change nothing), each applied at run time to the release's "
        "own file "
        "in a tree of its other files and checked as a pre-commit hook checks it: `mla-spec check FILE` "
        "(against the release as baseline, class by class, and executed as the second judge). The scripts are "
        "`benchmarks/detection.py`'s `CORPUS`; `tests/test_detection.py` runs them again.",
        "",
        f"Measured at commit `{results['commit']}` on {results['date']}: **{c['caught']} of {changing}** "
        f"breaking edits caught ({c['missed']} missed), **{c['false alarm']} false alarms** among "
        f"{len(CORPUS) - changing} edits that break nothing, {c['error']} errors.",
        "",
        "An edit is *caught* when check exits 1 and names one of the things the edit must raise (a NEW "
        "class of one of those invariants, NEW violations inside a class the baseline has, or `executed`: a "
        "disagreement of the executed file with its lifted gates); *quiet* when an edit that breaks nothing "
        "exits 0. Where an edit's kind was first written wrong, the release's code decided it (the edit's "
        "text says why).",
        "",
        "| edit | release | kind | what it does | must raise | check raised | exit | verdict | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["edits"]:
        e = by_name[r["name"]]
        got = [f"{k} ({v})" for k, v in r.get("new_classes", {}).items()]
        got += [f"{k} (inside a baseline class)" for k in r.get("grown", ())]
        if r.get("executed"):
            got.append("executed: " + ", ".join(f"{k} ({v})" for k, v in sorted(r["executed"].items())))
        if "error" in r:
            got.append(f"error: {r['error']}")
        lines.append(
            f"| `{e.name}` | {e.release} | {e.kind} | {e.why} | {', '.join(e.expect) or 'nothing'} | "
            f"{'; '.join(got) or 'nothing'} | {r['exit']} | {r['verdict']} | {r['seconds']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the results and the page")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--only", nargs="+", default=(), metavar="EDIT", help="run these edits only (no --write)"
    )
    args = parser.parse_args()
    if args.write and args.only:
        parser.error("--write needs the whole corpus; drop --only")
    results = run_corpus(args.workers, tuple(args.only))
    if args.only:
        for r in results["edits"]:
            print(json.dumps(r))
    print(json.dumps(counts(results)))
    if args.write:
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        PAGE.write_text(render(results))


if __name__ == "__main__":
    main()
