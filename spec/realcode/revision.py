"""A gate revision whose gates are a vLLM release's real functions.

:func:`real_revision` builds a :class:`~mla_model.revisions.base.Revision`
whose ``route`` asks the release's own code every routing question:
``use_gluon_decode``, ``use_gluon_verify`` (or 0.27's inline test), the
``_mtp_decode_qlen`` statements of the builder's ``__init__``, the
``use_persistent_metadata`` gate of ``_build_decode`` with what it depends on,
``get_actual_mla_num_heads`` and ``is_valid_num_heads``, and 0.34.0's fp8
V-scale correction (:mod:`spec.realcode.v_scale`, the probe answered by the
registry).  On a concrete Shape
the real functions run in the sandbox; on the prover's symbolic shape they
are lifted into z3 by path exploration.  The reorder_batch_threshold is the
release's own, executed by the harness (:mod:`spec.realcode.executed.threshold`).
What surrounds the gates is the model's (the order forward_mqa tests them
in, the kernel request, the AITER registry); the executed differential of
``mla-spec bind`` checks those against the release's real decode path.

Harness assumptions (docs/fidelity.md): the builder's dtype string is the
cache dtype with fp8 spellings normalised to "fp8"; the DCP configuration is
the builder's own ``__init__`` (lifted) with interleave 1, the group's cache
dtype and vLLM's default block size; forward_mqa is not lifted, so its DCP
pieces are the model's (the ASM call asks for the LSE under DCP, the CPRR route
pads to its head count, 0.29/0.30's RuntimeError for an unrouted DCP multi-token
step); releases before 0.29 are checked at dcp_world_size 1 (vLLM refuses DCP
with them); the Gluon verify is the row flatten (batch R*Q) until 0.28 and native 4-D MTP
(batch R) after; head padding is the model's (get_mla_padded_q takes tensors).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from functools import cache
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import z3

from mla_model.derived import is_quantized_kv_cache, parallel_drafting, reorder_batch_threshold
from mla_model.logic import EnumTerm, Term, all_of, choose, eq, implies, not_
from mla_model.registry import Registry
from mla_model.revisions.base import (
    Revision,
    Rule,
    asm_request,
    causal_only,
    forward_path,
    no_dcp,
)
from mla_model.revisions.dcp_era import DEFAULT_BLOCK_SIZE, asm_query_heads
from mla_model.route import DCP_ROUTES, Route
from mla_model.shape import FIELDS, KV_CACHE_DTYPES, Shape
from spec.proof.terms import symbolic_shape
from spec.realcode import buffer_sizing, v_scale
from spec.realcode.extract import Extracted, RefusedCode, extract
from spec.realcode.interpreter import RefusedAtRun
from spec.realcode.knobs import ENVS, knobs_of, setting_label
from spec.realcode.lifted_cache import lifted
from spec.realcode.sandbox import LoadedCode, Platform, alarm_handler
from spec.realcode.source import (
    RELATIVE_PATH,
    Source,
    SourceError,
    dcp_verify_default,
    resolve,
    tree_env_default,
    tree_of,
)
from spec.realcode.symexec import (
    LIFTING_BUILTINS,
    Explorer,
    LiftingUnsupported,
    SymBool,
    SymInt,
    SymStr,
    fold,
    term_of,
)
from spec.realcode.v_scale import registry_answer

OUTPUTS = (
    "gd",
    "builder_gv",
    "impl_gv",
    "gate",
    "wants",
    "triton",
    "T",
    "m",
    "H",
    "heads_valid",
    "raises",
    "droute",
    "cprr_heads",
    "dcp_raises",
)


def builder_kv_cache_dtype(kv_cache_dtype: Term) -> Term:
    """``self._kv_cache_dtype_str``: the builder maps fp8_e4m3 / fp8_e5m2 to "fp8"."""
    return choose(
        KV_CACHE_DTYPES,
        [
            (is_quantized_kv_cache(kv_cache_dtype), "fp8"),
            (eq(kv_cache_dtype, "float16"), "float16"),
            (eq(kv_cache_dtype, "bfloat16"), "bfloat16"),
        ],
        "auto",
    )


class Built(NamedTuple):
    """A builder after its ``__init__`` slice (None where ``__init__`` raised), with what it was given:
    the arguments the synthesised V-scale and sizing functions take after it."""

    builder: Any
    kv_cache_spec: Any
    vllm_config: Any


@cache
def _read(source: Source) -> tuple[Extracted, v_scale.VScale | None, Extracted, bool]:
    """What the sandbox loads of ``source``, read once per file (a revision loads it twice, to run on
    shapes and to lift): the extraction; 0.34.0's V-scale correction (spec.realcode.v_scale), None where
    the file has none; the extraction with that and the buffers' sizing (spec.realcode.buffer_sizing)
    appended; whether the file sizes the buffers.  Nothing downstream changes them."""
    extracted = extract(source)
    correction = v_scale.read(extracted)
    loaded = correction.extracted if correction else extracted
    sized = buffer_sizing.read(loaded)
    return extracted, correction, sized or loaded, sized is not None


class RealGates:
    """One release's gate functions and the harness that calls them for a Shape."""

    def __init__(
        self,
        source: Source,
        lifting: bool = False,
        threshold: Callable[[Any], Term] = reorder_batch_threshold,
        tree: Path | None = None,
        setting: tuple[tuple[str, Any], ...] = (),
    ) -> None:
        self.source = source
        self.threshold = threshold  # s -> reorder_batch_threshold (the release's, executed, where it can be)
        self.extracted, self.v_scale, loaded, self.sizes_buffers = _read(source)
        gate_file = source.path if tree is None else tree / RELATIVE_PATH
        # knobs the model does not know: unset (an envs knob: the tree's declared default) unless ``setting``
        self.knobs = knobs_of(loaded.module)
        given = dict(setting)
        unknown = set(given) - {k.name for k in self.knobs}
        if unknown:
            raise SourceError(f"{source.label}: reads no knob {', '.join(sorted(unknown))}")
        values = {
            k.name: given.get(k.name, tree_env_default(gate_file, k.name) if k.via == ENVS else None)
            for k in self.knobs
        }
        overrides = dict(LIFTING_BUILTINS) if lifting else {}
        self.probe_answer = v_scale.uninterpreted(term_of, SymBool)  # v_scale_at swaps in a registry's
        if self.v_scale:
            overrides[v_scale.PROBE_STUB] = v_scale.probe_stub(
                self.v_scale.probe_params, lambda *args: self.probe_answer(*args)
            )
        self.code = LoadedCode(loaded, Platform(knobs=values), builtins_override=overrides or None)
        # the DCP verify default of the tree around the file, or of ``tree`` standing in (real_revision)
        self.code.platform.dcp_verify = dcp_verify_default(gate_file)
        self.has_verify = self.code.has("use_gluon_verify")
        verify_params = self.code.params("use_gluon_verify") if self.has_verify else ()
        self.takes_causal = "causal" in verify_params
        self.gathers_dcp = "_decode_num_heads" in self.extracted.init_attrs
        self.flatten_verify = "dcp_world_size" not in verify_params  # 0.27 / 0.28: row flatten, batch R*Q
        self.kv_scale_passed = "kv_scale=1.0" not in self.extracted.forward_source
        # 0.31.0+: the builder declares non-causal draft blocks under DCP (backend.py validate_configuration)
        self.non_causal_dcp = "supports_non_causal_multi_token_dcp" in source.text

    def _builder_inputs(self, s: Any, wrap: Any) -> tuple[dict[str, Any], Any, Any]:
        """What the harness hands the builder's ``__init__`` slice for shape ``s``: its attributes, the KV
        cache spec and the vLLM config."""
        p = self.code.platform
        p.arch, p.mode = wrap("arch", s.arch), wrap("asm_padding_mode", s.asm_padding_mode)
        heads = wrap("num_heads", s.num_heads)
        dcp, causal = wrap("dcp_world_size", s.dcp_world_size), wrap("causal", s.causal)
        kv_bytes, raw_dtype = (
            wrap("kv_cache_bytes", s.kv_cache_bytes),
            wrap("kv_cache_dtype", s.kv_cache_dtype),
        )
        builder_dtype = wrap("builder_dtype", builder_kv_cache_dtype(s.kv_cache_dtype))
        method = wrap("spec_method", s.spec_method)
        spec = (
            None
            if method == "none"
            else types.SimpleNamespace(
                method=method, num_speculative_tokens=wrap("num_spec_tokens", s.num_spec_tokens)
            )
        )
        attrs = dict(
            num_heads=heads,
            dcp_world_size=dcp,
            _kv_cache_dtype_str=builder_dtype,
            reorder_batch_threshold=wrap("rbt", self.threshold(s)),
            _kv_cache_bytes=kv_bytes,
            _decode_causal=causal,
        )
        # What the builder's __init__ reads to configure DCP: the parallel config (interleave 1, the modelled
        # scope), the group's cache dtype and block size (dcp_era.DEFAULT_BLOCK_SIZE).
        kv_cache_spec = types.SimpleNamespace(block_size=DEFAULT_BLOCK_SIZE, cache_dtype_str=raw_dtype)
        vllm_config = types.SimpleNamespace(
            speculative_config=spec,
            parallel_config=types.SimpleNamespace(
                decode_context_parallel_size=dcp, cp_kv_cache_interleave_size=1
            ),
            cache_config=types.SimpleNamespace(cache_dtype=raw_dtype),
        )
        return attrs, kv_cache_spec, vllm_config

    def _built(self, s: Any, wrap: Any) -> tuple[dict[str, Any], Built]:
        """The builder's attributes for shape ``s``, and the builder after its ``__init__`` slice with the
        KV cache spec and vLLM config it was given (:class:`Built`; its builder None where ``__init__``
        raises: 0.33.0+, DCP verify with no cprr head count and no segmented MLA)."""
        attrs, kv_cache_spec, vllm_config = self._builder_inputs(s, wrap)
        try:
            b = self.code.builder(attrs, kv_cache_spec, vllm_config)
        except SourceError:  # the sandbox refusing the code: not the release raising
            raise
        except ValueError:
            b = None
        return attrs, Built(b, kv_cache_spec, vllm_config)

    def outputs(self, s: Any, wrap: Any = lambda name, v: v) -> dict[str, Any]:
        """Every routing answer of the release for shape ``s`` (plain or symbolic via ``wrap``) but the
        V-scale correction and the buffers' sizing, and the builder they run on (``built``)."""
        attrs, built = self._built(s, wrap)
        heads, qlen = attrs["num_heads"], wrap("max_qo_len", s.max_qo_len)
        dcp, causal, kv_bytes = attrs["dcp_world_size"], wrap("causal", s.causal), attrs["_kv_cache_bytes"]
        builder_dtype, raw_dtype = attrs["_kv_cache_dtype_str"], built.vllm_config.cache_config.cache_dtype
        b = built.builder
        if b is None:
            return self._raising(heads, built=built)
        H = getattr(b, "_decode_num_heads", heads)
        try:
            gate, path_locals = self.code.persistent_gate(b, qlen)
        except RuntimeError:  # 0.31.0+ _select_dcp_decode_route: no route for a DCP multi-token step
            return self._raising(heads, H, built)
        common = dict(
            num_heads=H, max_qo_len=qlen, dcp_world_size=dcp, causal=causal, kv_cache_bytes=kv_bytes
        )
        # The Gluon decisions as the builder's own call sites make them (the metadata's fields), else (a
        # release whose metadata lacks the field) the predicate called as those releases call it.
        gd = path_locals.get("use_gluon_decode")
        if gd is None:
            gd = self.code.call("use_gluon_decode", kv_cache_dtype=builder_dtype, **common)
        if self.has_verify:
            builder_gv = path_locals.get("use_gluon_verify")
            if builder_gv is None:
                builder_gv = self.code.call("use_gluon_verify", kv_cache_dtype=builder_dtype, **common)
            impl_gv = (
                self.code.call("use_gluon_verify", kv_cache_dtype=raw_dtype, **common)
                if self.extracted.impl_calls_verify
                else builder_gv  # forward_mqa reads the decode metadata's use_gluon_verify
            )
        else:
            builder_gv = None
            impl_gv = self.code.inline_verify(types.SimpleNamespace(num_heads=heads), qlen)
        droute = self._dcp_route(path_locals)
        # 0.29/0.30 raise in forward_mqa (not lifted; its test, 0.29.0 L1886-1890) for a DCP multi-token step
        # that neither Gluon branch nor the segmented verify takes.
        forward_raises = (
            "use_segmented_dcp_verify" in path_locals
            and dcp > 1
            and qlen > 1
            and not path_locals["use_segmented_dcp_verify"]
            and not gd
            and not impl_gv
        )
        T = b._mtp_decode_qlen
        b._mtp_decode_qlen = qlen  # the gate without its 1 <= qlen <= _mtp_decode_qlen clause
        wants, _ = self.code.persistent_gate(b, qlen)
        b._mtp_decode_qlen = T  # the builder as __init__ left it: the V-scale and sizing code run on it
        heads_valid = self.code.call("is_valid_num_heads", num_heads=heads)
        if self.gathers_dcp:
            heads_valid = bool(heads_valid) and bool(self.code.call("is_valid_num_heads", num_heads=H))
        raises = False
        if self.code.has("has_fp8_non_causal_qlen2_kernel"):
            raises = (
                (not causal)
                and qlen == 2
                and builder_dtype == "fp8"
                and not self.code.call("has_fp8_non_causal_qlen2_kernel", num_heads=H)
            )
        dcp_raises = bool(forward_raises)
        return dict(
            gd=gd,
            builder_gv=builder_gv,
            impl_gv=impl_gv,
            gate=gate,
            wants=wants,
            triton=path_locals.get("use_triton_verify", False),
            T=T,
            m=self.code.call("get_actual_mla_num_heads", num_heads=H),
            H=H,
            heads_valid=heads_valid,
            raises=raises or dcp_raises,
            droute=droute,
            cprr_heads=getattr(b, "_asm_dcp_verify_heads", 0),
            dcp_raises=dcp_raises,
            built=built,
        )

    def v_scale_at(self, built: Built, qlen: int, reg: Registry, arch: str, gate: bool) -> bool:
        """The decode metadata's ``fp8_v_scale_fix`` on a concrete shape, the file's code run on the
        shape's builder with the probe answered by ``reg`` on ``arch`` (no exploration, no z3: what the
        executed harness does)."""
        lifting, self.probe_answer = self.probe_answer, v_scale.registry_probe(reg, arch)
        try:
            return bool(self._v_scale(built, qlen, gate))
        finally:
            self.probe_answer = lifting

    def _v_scale(self, built: Built, qlen: Any, gate: Any) -> Any:
        """The file's V-scale code on ``built`` (False where there is none, or ``__init__`` raised)."""
        if self.v_scale is None or built.builder is None:
            return False
        fn = self.code.namespace[v_scale.FUNCTION]
        return self.code._guard(fn, *built, qlen, gate)  # the sandbox's deadline

    def v_scale_term(self, s: Any, wrap: Any, assumptions: tuple[Any, ...]) -> Any:
        """The decode metadata's ``fp8_v_scale_fix`` for the symbolic shape ``s`` as the file computes it
        (its ``__init__`` probe and its ``_build_decode`` expression, :mod:`spec.realcode.v_scale`): one z3
        term over the shape, the persistent gate (``z3.Bool(v_scale.GATE)``) and the probe's answers
        (:data:`v_scale.DROPS_V_SCALE`), by path exploration of its own, so the probe's branches do not
        multiply the gates' paths."""
        gate = SymBool(z3.Bool(v_scale.GATE))
        qlen = wrap("max_qo_len", s.max_qo_len)
        with alarm_handler():
            paths = Explorer(assumptions).explore(lambda: self._v_scale(self._built(s, wrap)[1], qlen, gate))
        return z3.simplify(fold(paths))

    def metadata_qlen(self, built: Built) -> Any:
        """The largest qlen the builder's ``__init__`` sizes the persistent buffers for
        (:mod:`spec.realcode.buffer_sizing`) on ``built``; 1 where ``__init__`` raised, as the other outputs
        there (:meth:`_raising`: no step, every gate closed)."""
        if built.builder is None:
            return 1
        return self.code._guard(self.code.namespace[buffer_sizing.FUNCTION], *built)  # the sandbox's deadline

    def metadata_qlen_term(self, s: Any, wrap: Any, assumptions: tuple[Any, ...]) -> Any:
        """:meth:`metadata_qlen` as one z3 term over the symbolic shape ``s``, by path exploration of its own
        (a range up to ``_mtp_decode_qlen`` takes each of its lengths; the gates' paths are not
        multiplied)."""
        with alarm_handler():
            paths = Explorer(assumptions).explore(lambda: self.metadata_qlen(self._built(s, wrap)[1]))
        return z3.simplify(fold(paths))

    @staticmethod
    def _dcp_route(path_locals: dict[str, Any]) -> Any:
        """The step's DCP route as an index of DCP_ROUTES: _DCPDecodeRoute's value (0.31 on), or the
        segmented flag (0.29/0.30), else PLAIN."""
        if "dcp_route" in path_locals:
            return DCP_ROUTES.index(path_locals["dcp_route"].value)
        if "use_segmented_dcp_verify" in path_locals:
            return DCP_ROUTES.index("segmented") if path_locals["use_segmented_dcp_verify"] else 0
        return 0

    def _raising(self, heads: Any, decode_heads: Any = None, built: Built | None = None) -> dict[str, Any]:
        """The outputs of a step on which the release raises before any kernel (every gate closed)."""
        H = heads if decode_heads is None else decode_heads
        return dict(
            gd=False,
            builder_gv=False if self.has_verify else None,
            impl_gv=False,
            gate=False,
            wants=False,
            triton=False,
            T=1,
            m=H,
            H=H,
            heads_valid=True,
            raises=True,
            droute=0,
            cprr_heads=0,
            dcp_raises=True,
            built=built,
        )

    def lift(self) -> dict[str, Any]:
        """Each output as one z3 term over the prover's shape variables (path exploration)."""
        sym = symbolic_shape()
        view = sym.view

        def wrap(name: str, value: Any) -> Any:
            if name == "builder_dtype" or isinstance(value, EnumTerm):
                return SymStr(value)
            if z3.is_bool(value):
                return SymBool(value)
            return SymInt(value)

        # Releases before DCP are checked at dcp 1 (vLLM refuses DCP with them at startup).
        scope = [] if self.gathers_dcp else [sym.variables["dcp_world_size"] == 1]
        explorer = Explorer([*sym.domain, *scope])
        with alarm_handler():
            paths = explorer.explore(lambda: self.outputs(view, wrap))
        lifted: dict[str, Any] = {}
        for name in OUTPUTS:
            if name == "builder_gv" and not self.has_verify:
                lifted[name] = None
                continue
            lifted[name] = z3.simplify(fold(paths, itemgetter(name)))
        lifted["paths"] = len(paths)
        if self.sizes_buffers:
            lifted["metadata_qlen"] = self.metadata_qlen_term(view, wrap, (*sym.domain, *scope))
        v_scale_fix = (
            self.v_scale_term(view, wrap, (*sym.domain, *scope)) if self.v_scale else z3.BoolVal(False)
        )
        lifted["v_scale_fix"] = z3.simplify(
            z3.substitute(v_scale_fix, (z3.Bool(v_scale.GATE), lifted["gate"]))
        )
        return lifted


def _threshold(source: Source, tree: Path | None = None) -> tuple[Callable[[Any], Term], str]:
    """The release's own reorder_batch_threshold, executed (spec.realcode.executed.threshold) in the vLLM
    tree around the file.  For a file that sits in none, with ``tree`` standing in (:func:`real_revision`):
    that tree's own file's, executed there; the lone file itself is never executed (it is untrusted input,
    read only through the AST path: docs/explanation/architecture.md, the trust boundary).

    Where it cannot be executed (a lone file with no vLLM tree around it or given, or no
    torch for the harness), 0.28.0's formula stands in and the revision's
    title says so.
    A cache that cannot be written or an entry that stays damaged is not such a case: it ends the command
    in one line (exit 2), since a stand-in there would hide a fault of the user's machine.
    """
    from spec.realcode.cache_io import CacheError
    from spec.realcode.executed.harness import HarnessError, release_code
    from spec.realcode.executed.threshold import threshold_function
    from spec.realcode.source import SourceError

    # absolute: the child runs in a scratch folder, where a relative path names nothing
    spec = (
        source.label.split("==", 1)[1] if source.label.startswith("vllm==") else str(source.path.absolute())
    )
    try:
        if tree is not None:
            origin = f"executed from the builder of {tree / RELATIVE_PATH}, the file sitting in no vLLM tree"
            return threshold_function(release_code(str(tree / RELATIVE_PATH))), origin
        return threshold_function(release_code(spec)), "executed from the release's builder"
    except CacheError:
        raise
    except (SourceError, HarnessError) as e:
        return reorder_batch_threshold, f"0.28.0's formula, not executed: {e}"


def threshold_origin(spec: str, tree: Path | None = None) -> str:
    """Where :func:`real_revision`'s reorder_batch_threshold of ``spec`` (with ``tree``) comes from, as its
    title says it: "executed from the release's builder", or the stand-in and why."""
    source = resolve(spec)
    return _threshold(source, _stand_in(source, tree))[1]


def _stand_in(source: Source, tree: Path | None) -> Path | None:
    """``tree`` where it stands in for the tree around ``source``: for a file that sits in none."""
    lone = not source.label.startswith("vllm==") and tree_of(source.path) is None
    return tree if lone else None


def real_revision(
    spec: str, lifting: bool = True, tree: Path | None = None, setting: tuple[tuple[str, Any], ...] = ()
) -> Revision:
    """The Revision whose gates are the real functions of ``spec`` (a path or a release).

    ``tree``: a vLLM tree that stands in for the one around a file that sits in none (the tree of the
    release ``check`` compares the file with): the reorder_batch_threshold is that tree's own file's,
    executed there (the lone file is not executed), and its ``vllm/envs.py`` gives the DCP verify default,
    so a lone copy of a release's file is read as that release's.  The title names it.  Ignored for a
    release and for a file inside a tree.

    ``setting``: values of knobs the file reads that the model does not know (:mod:`spec.realcode.knobs`;
    every other one unset); the revision's id carries them in brackets (``FILE [VLLM_X=1]``)."""
    source = resolve(spec)
    return _real_revision(source, lifting, _stand_in(source, tree), tuple(setting))


def refused_revision(spec: str, refusal: RefusedCode) -> Revision:
    """A gate file whose routing code uses a construct outside the lifted subset (the refusal names it and
    its line): a revision whose every question is that refusal, so check reports each result UNKNOWN with
    it (never a pass, never another verdict) instead of ending on it."""
    source = resolve(spec)

    def route(s: Any, reg: Registry) -> Route:
        raise RefusedAtRun(str(refusal))

    revision = Revision(
        id=source.label,
        title=f"refused: {refusal}",
        source=str(source.path),
        route=route,
        reorder_batch_threshold=reorder_batch_threshold,
        is_valid_num_heads=lambda h: True,
    )
    _REFUSED[id(revision)] = (revision, str(refusal))
    return revision


_REFUSED: dict[int, tuple[Revision, str]] = {}  # by id(), each kept alive with its entry


def refusal(revision: Revision) -> str | None:
    """Why ``revision`` is a :func:`refused_revision` (None for any other)."""
    entry = _REFUSED.get(id(revision))
    return entry[1] if entry is not None and entry[0] is revision else None


# The parts of each real revision the model stood in for, by the revision's id(): kept here, beside
# _real_revision's cache (which keeps every revision alive), not on Revision, which holds what the model
# and the GPU replay read.
_STAND_INS: dict[int, tuple[str, ...]] = {}


def stand_ins(revision: Revision) -> tuple[str, ...]:
    """A line per part of ``revision`` the model stood in for because the release's own could not be
    executed (the reorder_batch_threshold of a lone file, say): check prints each as a warning."""
    return _STAND_INS.get(id(revision), ())


def _over_columns(lifted_outputs: dict[str, Any], view: Any) -> dict[str, Any]:
    """The lifted outputs evaluated with numpy over a column view (:func:`spec.proof.bruteforce.
    column_view`), as the model revisions' gates run there: each shape variable reads its column (an
    enumeration's codes), through :func:`spec.analyses.shape_grid.evaluate_z3`."""
    from spec.analyses.shape_grid import evaluate_z3

    env = {
        spec.name: value.term if isinstance(value, EnumTerm) else value
        for spec in FIELDS
        for value in (getattr(view, spec.name),)
    }
    # the V-scale correction holds the probe's uninterpreted answers: route evaluates it per registry
    names = [name for name, term in lifted_outputs.items() if z3.is_expr(term) and name != "v_scale_fix"]
    values = dict(zip(names, evaluate_z3([lifted_outputs[n] for n in names], env)))
    return {name: values.get(name, term) for name, term in lifted_outputs.items()}


# Each real revision's lifted outputs, by the revision's id() (as _STAND_INS): what
# tests/test_lifted_over_columns.py holds the numpy evaluation of the terms to, term by term.
_LIFTED: dict[int, Callable[[], dict[str, Any]]] = {}


def lifted_outputs(revision: Revision) -> dict[str, Any]:
    """Every routing answer of a real revision as the lifted term (z3, over the prover's shape variables)
    its route reads: lifted now or read from the lifted cache."""
    return _LIFTED[id(revision)]()


def _lifting_inputs(
    source: Source, tree: Path | None, origin: str, setting: tuple[tuple[str, Any], ...]
) -> list[bytes]:
    """What the lifted terms of ``source`` depend on besides mla-spec's code (the cache key of
    :mod:`spec.realcode.lifted_cache`): the file, the tree it is read in with that tree's vllm/envs.py,
    where the reorder_batch_threshold comes from, the knob setting."""
    gate_file = source.path if tree is None else tree / RELATIVE_PATH
    envs = gate_file.parents[4] / "envs.py" if len(gate_file.parents) > 4 else None
    try:
        envs_bytes = envs.read_bytes() if envs is not None else b""
    except OSError:
        envs_bytes = b""
    return [source.text.encode(), str(tree).encode(), envs_bytes, origin.encode(), repr(setting).encode()]


@cache
def _real_revision(
    source: Source, lifting: bool, tree: Path | None, setting: tuple[tuple[str, Any], ...] = ()
) -> Revision:
    threshold, origin = _threshold(source, tree)
    concrete = RealGates(source, threshold=threshold, tree=tree, setting=setting)
    symbolic = (
        RealGates(source, lifting=True, threshold=threshold, tree=tree, setting=setting) if lifting else None
    )
    lifted_cache: dict[str, Any] = {}
    columns_seen: dict[str, Any] = {}

    def outputs(s: Any) -> dict[str, Any]:
        if isinstance(s, Shape):
            return concrete.outputs(s)
        if symbolic is None:
            raise LiftingUnsupported("lifting is off")
        if not lifted_cache:
            lifted_cache.update(lifted(_lifting_inputs(source, tree, origin, setting), symbolic.lift))
        if not z3.is_expr(s.num_heads):  # a numpy table (hits): the lifted terms evaluated over its columns
            if columns_seen.get("view") is not s:  # validity and route read the same table
                columns_seen.update(view=s, outputs=_over_columns(lifted_cache, s))
            return columns_seen["outputs"]
        return lifted_cache

    def v_scale_fix(s: Any, reg: Registry, o: dict[str, Any]) -> Term:
        """The file's V-scale correction for ``s`` with the probe answered by ``reg``: its lifted term (a
        numpy table: evaluated over the table's columns), or for a concrete shape the file's code run at
        the shape's gate."""
        if concrete.v_scale is None:
            return False
        if isinstance(s, Shape):
            return concrete.v_scale_at(o["built"], s.max_qo_len, reg, s.arch, bool(o["gate"]))
        if not z3.is_expr(s.num_heads):
            view = s
            s = symbolic_shape().view
            term = registry_answer(lifted_cache["v_scale_fix"], reg, s.arch)
            return _over_columns({"v_scale_fix_answered": term}, view)["v_scale_fix_answered"]
        return registry_answer(lifted_cache["v_scale_fix"], reg, s.arch)

    def metadata_qlen(s: Any, o: dict[str, Any]) -> Term:
        """The qlen the file sizes the persistent buffers for at ``s`` (None: the file sizes none, and the
        buffers are taken to cover _mtp_decode_qlen)."""
        if not concrete.sizes_buffers:
            return None
        if isinstance(s, Shape):
            return concrete.metadata_qlen(o["built"])
        return o["metadata_qlen"]

    def route(s: Any, reg: Registry) -> Route:
        o = outputs(s)
        H = o["H"]
        droute = (
            DCP_ROUTES[o["droute"]] if isinstance(o["droute"], int) else EnumTerm(DCP_ROUTES, o["droute"])
        )
        # forward_mqa's padding of the query (not lifted: it takes tensors) is the model's
        m, head_padding, head_unpad = asm_query_heads(droute, o["cprr_heads"], H, o["m"])
        return Route(
            path=forward_path(o["gd"], o["impl_gv"], o["gate"], o["triton"], dcp_route=droute),
            use_gluon_decode=o["gd"],
            use_gluon_verify=o["impl_gv"],
            use_persistent_metadata=o["gate"],
            wants_persistent_metadata=o["wants"],
            mtp_decode_qlen=o["T"],
            metadata_qlen=metadata_qlen(s, o),
            decode_heads=H,
            head_padding=head_padding,
            padded_q_heads=m,
            head_unpad=head_unpad,
            request=asm_request(
                s,
                m,
                o["gate"],
                causal=s.causal if concrete.takes_causal else True,
                lse=s.dcp_world_size > 1,  # forward_mqa's DCP call asks for the LSE (not lifted)
                cprr=eq(droute, "cprr"),
            ),
            gluon_batch_is_one=all_of(s.num_reqs == 1, s.max_qo_len == 1)
            if concrete.flatten_verify
            else s.num_reqs == 1,
            kv_scale_passed=concrete.kv_scale_passed,
            vllm_raises=o["raises"],
            builder_use_gluon_verify=o["builder_gv"],
            v_scale_fix=v_scale_fix(s, reg, o),
            dcp_route=droute,
            dcp_raises=o["dcp_raises"],
        )

    def scope(reg: Registry) -> list[Rule]:
        rules: list[Rule] = [("the release's is_valid_num_heads", lambda s: outputs(s)["heads_valid"])]
        if not concrete.gathers_dcp:  # before 0.29 vLLM refuses DCP with this backend at startup
            rules += no_dcp(reg)
        elif not concrete.takes_causal:
            rules += causal_only(reg)
        else:
            non_causal_dcp = concrete.non_causal_dcp
            rules.append(
                (
                    "non-causal blocks only where supports_non_causal (gfx950, AITER takes causal=) "
                    "for parallel drafters"
                    + ("" if non_causal_dcp else ", at dcp 1 (no supports_non_causal_multi_token_dcp)"),
                    lambda s: implies(
                        not_(s.causal),
                        all_of(
                            eq(s.arch, "gfx950"),
                            reg.lookup_takes_causal,
                            parallel_drafting(s),
                            True if non_causal_dcp else s.dcp_world_size == 1,
                        ),
                    ),
                )
            )
        return rules

    knobs = "; ".join(k.describe() for k in concrete.knobs)
    revision = Revision(
        id=source.label + (f" [{setting_label(setting)}]" if setting else ""),
        title=f"real gates of {source.label} (reorder_batch_threshold: {origin}"
        + ("" if tree is None else f"; DCP verify default from {tree}'s vllm/envs.py")
        + (f"; {knobs}" if knobs else "")
        + (f"; proved at {setting_label(setting)}" if setting else "")
        + ")",
        source=str(source.path),
        route=route,
        reorder_batch_threshold=threshold,
        is_valid_num_heads=lambda h: (
            True
        ),  # the release's own rule is in the scope (it may need the gathered heads)
        scope=scope,
        free_inputs=concrete.knobs,
    )
    _LIFTED[id(revision)] = lambda: outputs(symbolic_shape().view)
    if threshold is reorder_batch_threshold:
        # named as the user gave it (the harness's message carries the absolute path)
        why = origin.replace(str(source.path.absolute()), source.label)
        _STAND_INS[id(revision)] = (f"the reorder_batch_threshold of {source.label} is {why}",)
    return revision
