"""Mutants of the ``vllm-0.28`` gates: the catalogue, and how a mutant is made.

A mutant is the model's own source, ``mla_model/revisions/vllm_028.py`` (the
gates of vLLM 0.28.0's ``rocm_aiter_mla.py``: ``use_gluon_decode`` L909,
``use_gluon_verify`` L931, ``_mtp_decode_qlen`` L276, the persistent gate
L698), with one fault written into it: no hand-written mutant gate functions.

Decisions:

* Each :class:`Mutant` is ``(id, site, description, edits)``; an :class:`Edit` is
  ``(function, old, new)``: an exact text replacement inside that function's
  source (found with ``ast``; ``None`` is module level, for the one mutant that
  needs an import).  ``old`` must occur exactly once in that scope, else
  :class:`MutationError`, so a change to vllm_028.py that moves a snippet fails
  loudly instead of silently testing nothing.
* The mutated source is compiled and executed into a fresh module
  (``types.ModuleType``): the real ``mla_model.revisions.vllm_028`` is never
  touched, and gates resolve their helpers in the mutant's own namespace, so a
  test can monkeypatch a mutant module as vLLM's tests monkeypatch the real one
  (:mod:`spec.pr_grid`).  The mutant's ``REVISION`` gets the id
  ``vllm-0.28~<mutant id>``.
* Only vllm_028.py is mutated.  ``reorder_batch_threshold`` itself models
  ``_init_reorder_batch_threshold`` of vllm/v1/attention/backend.py, outside
  the file under test, and sets the engine's validity rule; its use as
  ``_mtp_decode_qlen`` (L276) is mutated where vllm_028.py makes it.
* Several mutants are equivalent on valid shapes on purpose (a lower bound the
  scheduler already guarantees, the builder's normalised dtype string): the
  score must tell them apart by proof, not by a missing test.
"""

from __future__ import annotations

import ast
import inspect
import types
from dataclasses import dataclass, replace

from mla_model.revisions import vllm_028
from mla_model.revisions.base import Revision

ORIGINAL = vllm_028
MUTANT_ID_SEPARATOR = "~"


class MutationError(ValueError):
    """A mutant's snippet is not found exactly once where it should be."""


@dataclass(frozen=True)
class Edit:
    function: str | None  # the function whose source holds ``old``; None: anywhere in the module
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    id: str
    site: str  # where in vLLM 0.28.0's rocm_aiter_mla.py the fault is
    description: str
    edits: tuple[Edit, ...]


def _one(mid: str, site: str, function: str, description: str, old: str, new: str) -> Mutant:
    return Mutant(mid, site, description, (Edit(function, old, new),))


# The model functions edited.
GD, GV, ROUTE = "use_gluon_decode", "use_gluon_verify", "route"
# The vLLM sites they model (vllm_028.py's docstrings give the lines).
AT_GD, AT_GV, AT_BUILDER = "use_gluon_decode L909", "use_gluon_verify L931", "_build_decode"
AT_DTYPE = "builder _kv_cache_dtype_str"
AT_T, AT_GATE, AT_FORWARD, AT_PAD = "_mtp_decode_qlen L276", "persistent gate L698", "forward_mqa", "get_mla_padded_q"

CATALOGUE: tuple[Mutant, ...] = (
    # --- use_gluon_decode (L909) ------------------------------------------------------------------
    _one("gd-heads-le-16", AT_GD, GD,
         "use_gluon_decode: num_heads < 16 -> <= 16 (off by one up)",
         "num_heads < 16,",
         "num_heads <= 16,"),
    _one("gd-heads-lt-15", AT_GD, GD,
         "use_gluon_decode: num_heads < 16 -> < 15 (off by one down)",
         "num_heads < 16,",
         "num_heads < 15,"),
    _one("gd-qlen-le-2", AT_GD, GD,
         "use_gluon_decode: max_qo_len == 1 -> <= 2",
         "max_qo_len == 1,",
         "max_qo_len <= 2,"),
    _one("gd-qlen-le-1", AT_GD, GD,
         "use_gluon_decode: max_qo_len == 1 -> <= 1 (equivalent: the scheduler gives qlen >= 1)",
         "max_qo_len == 1,",
         "max_qo_len <= 1,"),
    _one("gd-dtype-guard-dropped", AT_GD, GD,
         "use_gluon_decode: the fp8 dtype guard dropped (the pre-#51011 gate)",
         "        not_(is_quantized_kv_cache(kv_cache_dtype)),\n",
         ""),
    Mutant("gd-mode-before-dtype", AT_GD,
           "use_gluon_decode: mode check moved before the dtype guard (mode=gluon forces fp8 onto Gluon)",
           (
               Edit(GD, "        not_(is_quantized_kv_cache(kv_cache_dtype)),\n", ""),
               Edit(GD, "any_of(eq(mode, \"gluon\"), divides_16(num_heads))",
                    "any_of(eq(mode, \"gluon\"), all_of(not_(is_quantized_kv_cache(kv_cache_dtype)), "
                    "divides_16(num_heads)))"),
           )),
    _one("gd-asm-mode-dropped", AT_GD, GD,
         "use_gluon_decode: the mode == asm opt-out dropped",
         "        ne(mode, \"asm\"),\n",
         ""),
    _one("gd-arch-guard-dropped", AT_GD, GD,
         "use_gluon_decode: the gfx950 guard (_gluon_mla_decode_supported) dropped",
         "        _gluon_mla_decode_supported(s),\n",
         ""),
    _one("gd-divisor-dropped", AT_GD, GD,
         "use_gluon_decode: the divisor test (mode == gluon or 16 % h == 0) dropped",
         "        any_of(eq(mode, \"gluon\"), divides_16(num_heads)),\n",
         ""),
    _one("gd-or-to-and", AT_GD, GD,
         "use_gluon_decode: mode == gluon or divisor -> and",
         "any_of(eq(mode, \"gluon\"), divides_16(num_heads))",
         "all_of(eq(mode, \"gluon\"), divides_16(num_heads))"),
    _one("gd-mode-literal", AT_GD, GD,
         "use_gluon_decode: mode == \"gluon\" -> mode == \"auto\"",
         "eq(mode, \"gluon\")",
         "eq(mode, \"auto\")"),
    _one("gd-builder-raw-dtype", AT_BUILDER, ROUTE,
         "_build_decode: use_gluon_decode given the raw cache dtype, not the normalised one (equivalent)",
         "gd = use_gluon_decode(heads, qlen, builder_dtype, s)",
         "gd = use_gluon_decode(heads, qlen, s.kv_cache_dtype, s)"),
    _one("builder-fp8-not-normalised", AT_DTYPE, "builder_kv_cache_dtype",
         "builder: fp8 spellings no longer normalised to \"fp8\" (they fall through to \"auto\")",
         "[(is_quantized_kv_cache(s.kv_cache_dtype), \"fp8\"), (eq(",
         "[(eq("),
    # --- use_gluon_verify (L931) ------------------------------------------------------------------
    _one("gv-heads-le-16", AT_GV, GV,
         "use_gluon_verify: num_heads < 16 -> <= 16 (off by one up)",
         "num_heads < 16,",
         "num_heads <= 16,"),
    _one("gv-heads-lt-15", AT_GV, GV,
         "use_gluon_verify: num_heads < 16 -> < 15 (off by one down)",
         "num_heads < 16,",
         "num_heads < 15,"),
    _one("gv-qlen-gt-2", AT_GV, GV,
         "use_gluon_verify: max_qo_len > 1 -> > 2 (off by one up)",
         "max_qo_len > 1,",
         "max_qo_len > 2,"),
    _one("gv-qlen-ge-1", AT_GV, GV,
         "use_gluon_verify: max_qo_len > 1 -> >= 1 (off by one down)",
         "max_qo_len > 1,",
         "max_qo_len >= 1,"),
    _one("gv-dtype-guard-dropped", AT_GV, GV,
         "use_gluon_verify: the fp8 dtype guard dropped",
         "        not_(is_quantized_kv_cache(kv_cache_dtype)),\n",
         ""),
    _one("gv-asm-mode-dropped", AT_GV, GV,
         "use_gluon_verify: the mode == asm opt-out dropped (the pre-#51011 inline branch)",
         "        ne(s.asm_padding_mode, \"asm\"),\n",
         ""),
    _one("gv-arch-guard-dropped", AT_GV, GV,
         "use_gluon_verify: the gfx950 guard dropped (the pre-#50578 inline branch)",
         "        _gluon_mla_decode_supported(s),\n",
         ""),
    _one("gv-divisor-added", AT_GV, GV,
         "use_gluon_verify: use_gluon_decode's divisor test copied in",
         "        _gluon_mla_decode_supported(s),\n",
         "        _gluon_mla_decode_supported(s),\n        divides_16(num_heads),\n"),
    _one("gv-and-to-or", AT_GV, GV,
         "use_gluon_verify: the conjunction of its conditions -> disjunction",
         "return all_of(",
         "return any_of("),
    _one("impl-verify-builder-dtype", AT_FORWARD, ROUTE,
         "forward_mqa: use_gluon_verify given the builder's normalised dtype (equivalent: same truth value)",
         "gv = use_gluon_verify(heads, qlen, s.kv_cache_dtype, s)",
         "gv = use_gluon_verify(heads, qlen, builder_dtype, s)"),
    # --- _mtp_decode_qlen (L276) ------------------------------------------------------------------
    _one("mtp-qlen-k-plus-1", AT_T, ROUTE,
         "_mtp_decode_qlen sized k + 1, not 1 + 2k, for parallel drafting",
         "mtp_decode_qlen = reorder_batch_threshold(s)",
         "mtp_decode_qlen = s.num_spec_tokens + 1"),
    Mutant("mtp-qlen-whitelist", AT_T,
           "_mtp_decode_qlen: the drafter-name whitelist restored (k + 1 for mtp/deepseek_mtp, else 1)",
           (
               Edit(None, "    padding_of,\n)",
                    "    padding_of,\n    whitelist_mtp_decode_qlen,\n)"),
               Edit(ROUTE, "mtp_decode_qlen = reorder_batch_threshold(s)",
                    "mtp_decode_qlen = whitelist_mtp_decode_qlen(s)"),
           )),
    _one("mtp-qlen-plus-1", AT_T, ROUTE,
         "_mtp_decode_qlen: reorder_batch_threshold + 1 (off by one up)",
         "mtp_decode_qlen = reorder_batch_threshold(s)",
         "mtp_decode_qlen = reorder_batch_threshold(s) + 1"),
    # --- the persistent-metadata gate (L698) ------------------------------------------------------
    _one("gate-heads-gt-16", AT_GATE, ROUTE,
         "persistent gate: num_heads >= 16 -> > 16 (off by one up)",
         "any_of(heads >= 16,",
         "any_of(heads > 16,"),
    _one("gate-heads-ge-15", AT_GATE, ROUTE,
         "persistent gate: num_heads >= 16 -> >= 15 (off by one down)",
         "any_of(heads >= 16,",
         "any_of(heads >= 15,"),
    _one("gate-qlen-lt-4", AT_GATE, ROUTE,
         "persistent gate: qlen <= _ASM_PADDED_MAX_PS_QLEN -> < (off by one down)",
         "qlen <= _ASM_PADDED_MAX_PS_QLEN",
         "qlen < _ASM_PADDED_MAX_PS_QLEN"),
    _one("gate-qlen-le-5", AT_GATE, ROUTE,
         "persistent gate: qlen <= _ASM_PADDED_MAX_PS_QLEN -> <= it + 1 (off by one up)",
         "qlen <= _ASM_PADDED_MAX_PS_QLEN",
         "qlen <= _ASM_PADDED_MAX_PS_QLEN + 1"),
    _one("gate-fp8-dropped", AT_GATE, ROUTE,
         "persistent gate: the 'or fp8' disjunct dropped",
         ", is_quantized_kv_cache(builder_dtype)),",
         "),"),
    _one("gate-or-to-and", AT_GATE, ROUTE,
         "persistent gate: heads >= 16 or qlen <= 4 or fp8 -> and",
         "any_of(heads >= 16,",
         "all_of(heads >= 16,"),
    _one("gate-gd-dropped", AT_GATE, ROUTE,
         "persistent gate: not use_gluon_decode dropped",
         "        not_(gd),\n",
         ""),
    _one("gate-gv-dropped", AT_GATE, ROUTE,
         "persistent gate: not use_gluon_verify dropped",
         "        not_(builder_gv),\n",
         ""),
    _one("gate-qlen-ge-1-dropped", AT_GATE, ROUTE,
         "persistent gate: 1 <= qlen dropped (equivalent: the scheduler gives qlen >= 1)",
         "all_of(wants, qlen >= 1, qlen <= mtp_decode_qlen)",
         "all_of(wants, qlen <= mtp_decode_qlen)"),
    _one("gate-qlen-lt-T", AT_GATE, ROUTE,
         "persistent gate: qlen <= _mtp_decode_qlen -> < (off by one down)",
         "qlen <= mtp_decode_qlen)",
         "qlen < mtp_decode_qlen)"),
    _one("request-wants-not-gate", AT_FORWARD, ROUTE,
         "forward_mqa: work metadata passed where the gate wants it, without 1 <= qlen <= _mtp_decode_qlen "
         "(equivalent: the scheduler keeps qlen <= reorder_batch_threshold)",
         "request=asm_request(s, m, persistent,",
         "request=asm_request(s, m, wants,"),
    _one("request-non-causal", AT_FORWARD, ROUTE,
         "forward_mqa: the ASM call asks AITER for a non-causal kernel",
         "causal=True)",
         "causal=False)"),
    # --- head padding (get_mla_padded_q) ----------------------------------------------------------
    _one("padding-divisor-dropped", AT_PAD, ROUTE,
         "get_mla_padded_q: tile + slice for divisors of 16 too (no repeat_interleave)",
         "padding_of(heads, m, divides_16(heads))",
         "padding_of(heads, m, False)"),
    _one("padding-skipped", AT_PAD, ROUTE,
         "get_mla_padded_q: the query keeps num_heads heads (no padding to max(16, h))",
         "padded_q_heads=m,",
         "padded_q_heads=heads,"),
)

MUTANT_BY_ID = {m.id: m for m in CATALOGUE}
assert len(MUTANT_BY_ID) == len(CATALOGUE), "mutant ids must be unique"


def original_source() -> str:
    return inspect.getsource(ORIGINAL)


def _scope(tree: ast.Module, lines: list[str], function: str | None) -> tuple[int, int]:
    """Character offsets of a top-level function's source (the whole module for None)."""
    if function is None:
        return 0, sum(len(line) for line in lines)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            start = sum(len(line) for line in lines[: node.lineno - 1])
            return start, start + sum(len(line) for line in lines[node.lineno - 1: node.end_lineno])
    raise MutationError(f"vllm_028.py has no function {function!r}")


def mutated_source(mutant: Mutant, source: str | None = None) -> str:
    """The source with each edit applied in turn; each ``old`` must occur exactly once in its scope."""
    text = original_source() if source is None else source
    for edit in mutant.edits:
        start, end = _scope(ast.parse(text), text.splitlines(keepends=True), edit.function)
        count = text[start:end].count(edit.old)
        if count != 1:
            where = edit.function or "the module"
            raise MutationError(f"mutant {mutant.id}: {edit.old!r} occurs {count} times in {where}, not once")
        text = text[:start] + text[start:end].replace(edit.old, edit.new) + text[end:]
    return text


def load(mutant: Mutant | None) -> types.ModuleType:
    """A fresh module executed from vllm_028.py's source, mutated (or, for None, as it is)."""
    name = ORIGINAL.__name__ + ("" if mutant is None else f"{MUTANT_ID_SEPARATOR}{mutant.id}")
    source = original_source() if mutant is None else mutated_source(mutant)
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    if mutant is not None:
        rev: Revision = module.REVISION
        module.REVISION = replace(rev, id=f"{rev.id}{MUTANT_ID_SEPARATOR}{mutant.id}",
                                  title=f"{rev.title}, mutant {mutant.id}: {mutant.description}")
    return module
