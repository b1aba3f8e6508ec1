"""Model vs code: is a model revision what a vLLM release really does?

Two checks, both reported per function:

* **symbolic** (over unbounded integers): the release's gates are lifted into
  z3 (:mod:`spec.realcode.symexec`) and every routing field of the real
  revision's Route is compared with the model revision's under both validity
  rules; a difference comes back as the smallest differing shape, re-run
  concretely on both sides.  Validity itself is compared too.
* **bounded**: each AiterMLAHelper predicate is called concretely on every
  point of its box (every enum value x heads 1..256 x qlen 1..32 x DCP
  1/2/4/8, both sides of the 2 GiB bound, causal or not) and compared with the
  model's gate of the same name, called the same way.  Where lifting fails the
  symbolic rows say UNSUPPORTED with the reason; the bounded rows still stand.
"""

from __future__ import annotations

import inspect
import itertools
import time
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import z3

from mla_model.decision import decide
from mla_model.logic import EnumTerm
from mla_model.registry import load_registry
from mla_model.revisions import RELEASE_OF_REVISION, get_revision
from mla_model.revisions.base import Revision
from mla_model.route import DCP_ROUTES, PATHS
from mla_model.shape import (
    ARCHS,
    ASM_PADDING_MODES,
    DCP_WORLD_SIZES,
    FIELD_BY_NAME,
    GIB,
    KV_CACHE_DTYPES,
    Shape,
)
from spec.proof.prover import MINIMISE_ORDER, canonical_model, minimise_in_order, problem
from spec.proof.terms import as_z3
from spec.realcode import sandbox
from spec.realcode.revision import RealGates, real_revision, threshold_origin
from spec.realcode.source import Source, release_tree, resolve, tree_of
from spec.realcode.symexec import LiftingUnsupported

# Release -> the model revision that claims to describe it.
MODEL_OF_RELEASE = {release.rsplit(".", 1)[0]: model for model, release in RELEASE_OF_REVISION.items()}
ROUTE_FIELDS = (
    "path",
    "use_gluon_decode",
    "use_gluon_verify",
    "use_persistent_metadata",
    "wants_persistent_metadata",
    "mtp_decode_qlen",
    "decode_heads",
    "dcp_route",
)
BOX_HEADS = range(1, 257)
BOX_QLEN = range(1, 33)


@dataclass
class Comparison:
    function: str
    method: str  # "symbolic" | "bounded"
    verdict: str  # EQUIVALENT | DIFFERENT | UNSUPPORTED
    checked: int = 0  # bounded: points compared
    seconds: float = 0.0
    differences: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    real_calls_per_second: float = 0.0  # bounded: calls of the real function alone

    def to_json(self) -> dict[str, Any]:
        return {
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in self.__dict__.items()
            if v not in ("", None)
        }


def default_model(label: str) -> str | None:
    version = label.split("==", 1)[-1]
    return MODEL_OF_RELEASE.get(".".join(version.split(".")[:2]))


# Route fields that are enumerations: a revision may hold one as a plain name (pre-DCP revisions: "plain").
_ENUM_FIELDS = {"path": PATHS, "dcp_route": DCP_ROUTES}


def route_field(route: Any, name: str) -> Any:
    value = getattr(route, name)
    if isinstance(value, str) and name in _ENUM_FIELDS:
        return z3.IntVal(_ENUM_FIELDS[name].index(value))
    return value


def symbolic_comparison(
    real: Revision,
    model: Revision,
    registry_id: str = "aiter-0.1.20",
    max_differences: int = 3,
    timeout_ms: int | None = None,
    fields: tuple[str, ...] = ROUTE_FIELDS,
) -> list[Comparison]:
    """Per field: EQUIVALENT (unsat), DIFFERENT (with concrete shapes), UNSUPPORTED (no lifting), or
    UNKNOWN (z3 gave up within ``timeout_ms`` before finding a difference)."""
    out = []
    try:
        pr, pm = problem(real, registry_id), problem(model, registry_id)
    except LiftingUnsupported as e:
        return [Comparison(f, "symbolic", "UNSUPPORTED", reason=str(e)) for f in (*fields, "validity")]
    valid_r = z3.And(*pr.constraints)
    valid_m = z3.And(*pm.constraints)
    reg = load_registry(registry_id)
    checks = [("validity", z3.And(*pr.symbolic.domain), valid_r != valid_m)]
    for name in fields:
        a, b = as_z3(route_field(pr.decision.route, name)), as_z3(route_field(pm.decision.route, name))
        checks.append((name, z3.And(valid_r, valid_m), a != b))
    for name, context, differs in checks:
        start = time.perf_counter()
        s = z3.Solver()
        if timeout_ms is not None:
            s.set("timeout", timeout_ms)
        s.add(context, differs)
        diffs: list[dict[str, Any]] = []
        answer = s.check()
        while len(diffs) < max_differences and answer == z3.sat:
            found = smallest_witness(s, pr.symbolic.variables)
            shape = pr.symbolic.to_shape(found)
            diffs.append(_concrete_difference(name, shape, real, model, reg))
            s.add(
                z3.Or(
                    *[
                        v != found.eval(v, model_completion=True)
                        for v in (
                            pr.symbolic.variables["num_heads"],
                            pr.symbolic.variables["max_qo_len"],
                            pr.symbolic.variables["kv_cache_dtype"],
                            pr.symbolic.variables["arch"],
                        )
                    ]
                )
            )
            answer = s.check()
        verdict = "DIFFERENT" if diffs else "UNKNOWN" if answer == z3.unknown else "EQUIVALENT"
        out.append(
            Comparison(name, "symbolic", verdict, seconds=time.perf_counter() - start, differences=diffs)
        )
    return out


def smallest_witness(s: z3.Solver, variables: dict[str, Any]) -> z3.ModelRef:
    """The smallest shape of a satisfiable difference, minimised as check minimises a counterexample
    (fewest heads, then qlen, then speculative tokens, ...; then the Shape defaults where they fit).  The
    pins live inside a push/pop, so ``s`` keeps asking for further differences afterwards; where z3 gives
    up minimising, its first model stands."""
    first = s.model()
    s.push()
    try:
        objectives = [(variables[n], FIELD_BY_NAME[n].minimum) for n in MINIMISE_ORDER]
        least = minimise_in_order(s, objectives, first)
        if least is None:
            return first
        return canonical_model(s, variables, fixed=MINIMISE_ORDER, model=least) or least
    finally:
        s.pop()


def _concrete_difference(
    name: str, shape: Shape, real: Revision, model: Revision, reg: Any
) -> dict[str, Any]:
    if name == "validity":
        return {
            "shape": shape.to_json(),
            "real": bool(real.is_valid(shape, reg)),
            "model": bool(model.is_valid(shape, reg)),
        }
    rv = decide(real, reg, shape).route.to_json()[name]
    mv = decide(model, reg, shape).route.to_json()[name]
    return {"shape": shape.to_json(), "real": rv, "model": mv}


def _model_function(model_id: str, name: str) -> Any:
    revision = get_revision(model_id)
    if name in revision.gates:
        return revision.gates[name]
    return getattr(inspect.getmodule(revision.route), name, None)


_AXES: dict[str, Sequence[Any]] = {
    "arch": ARCHS,
    "asm_padding_mode": ASM_PADDING_MODES,
    "num_heads": BOX_HEADS,
    "max_qo_len": BOX_QLEN,
    "kv_cache_dtype": KV_CACHE_DTYPES,
    "dcp_world_size": DCP_WORLD_SIZES,
    "causal": (True, False),
    "kv_cache_bytes": (2 * GIB, 2 * GIB + 1),
}
_PLATFORM = ("arch", "asm_padding_mode")


def _box(params: tuple[str, ...]) -> list[str]:
    """The axes a predicate is compared on: the platform, then its own parameters."""
    return list(dict.fromkeys([*_PLATFORM, *[p for p in params if p in _AXES]]))


def _model_values(
    model_fn: Any, params: tuple[str, ...], names: list[str], platform: dict[str, str], reg: Any
) -> np.ndarray:
    """The model's gate on every point of one platform's slice of the box, at once (numpy interpretation).

    Points are in ``itertools.product`` order over ``names`` after the platform, as the real calls are.
    """
    rest = names[len(_PLATFORM) :]
    index = [i.ravel() for i in np.indices([len(_AXES[n]) for n in rest])]
    columns = {}
    for name, i in zip(rest, index):
        spec = FIELD_BY_NAME[name]
        columns[name] = (
            EnumTerm(spec.values, np.array([spec.values.index(v) for v in _AXES[name]])[i])
            if spec.kind == "enum"
            else np.asarray(_AXES[name])[i]
        )
    args = {k: {**platform, **columns}[k] for k in params if k in names}
    if "s" in params:
        args["s"] = types.SimpleNamespace(**platform)
    if "reg" in params:
        args["reg"] = reg
    return np.broadcast_to(np.asarray(model_fn(**args)), index[0].shape)


def _real_values(fn: Any, params: tuple[str, ...], rest: list[str], points: list[tuple]) -> list[Any]:
    """The real predicate on every point, given the parameters of its signature the box has.

    Positionally where those lead the signature (no keyword dict per call), else by keyword.
    """
    boxed = [n for n in params if n in rest]
    at = [rest.index(n) for n in boxed]
    if boxed != list(params[: len(boxed)]):
        return [fn(**{n: p[i] for n, i in zip(boxed, at)}) for p in points]
    if at != list(range(len(rest))):
        points = [tuple(p[i] for i in at) for p in points]
    return [fn(*p) for p in points]


def _differs(real: Any, model: Any) -> bool:
    return bool(real) != bool(model) or (not isinstance(real, bool) and int(real) != int(model))


def bounded_comparison(gates: RealGates, model_id: str, max_differences: int = 3) -> list[Comparison]:
    """Each predicate against the model's gate on every point of its box.

    The real function is called point by point (it is the code under test); the model's gate is
    evaluated on a whole platform slice at once, and only the points where the two answers are not
    ``==`` are compared exactly (``==`` implies agreement, so that misses nothing).
    """
    out = []
    reg = load_registry("aiter-0.1.20")
    for name in ("use_gluon_decode", "use_gluon_verify", "is_valid_num_heads", "get_actual_mla_num_heads"):
        real_params = gates.code.params(name) if gates.code.has(name) else ()
        model_fn = _model_function(model_id, name)
        if not real_params or model_fn is None:
            out.append(
                Comparison(
                    name,
                    "bounded",
                    "UNSUPPORTED",
                    reason=f"{'the release' if not real_params else model_id} has no {name}",
                )
            )
            continue
        model_params = tuple(inspect.signature(model_fn).parameters)
        names = _box(real_params + model_params)
        start = time.perf_counter()
        code = gates.code
        real_fn = getattr(code.helper, name)
        rest = names[len(_PLATFORM) :]
        differing: list[tuple[int, dict[str, Any]]] = []  # (point number, record), one past the reported
        real_seconds, points_done = 0.0, 0
        try:
            for platform in itertools.product(*[_AXES[n] for n in _PLATFORM]):
                code.platform.arch, code.platform.mode = platform
                code.refresh_caches()
                points = list(itertools.product(*[_AXES[n] for n in rest]))
                t0 = time.perf_counter()
                with sandbox.deadline(
                    sandbox.CALL_LIMIT_S, f"{code.label}: {name} on {len(points):,} points"
                ):
                    reals = _real_values(real_fn, real_params, rest, points)
                real_seconds += time.perf_counter() - t0
                models = _model_values(model_fn, model_params, names, dict(zip(_PLATFORM, platform)), reg)
                for i in np.flatnonzero(np.asarray(reals) != models):
                    if len(differing) > max_differences:
                        break
                    if _differs(reals[i], models[i]):
                        differing.append(
                            (
                                points_done + int(i),
                                {
                                    "inputs": dict(zip(names, platform + points[i])),
                                    "real": reals[i],
                                    "model": models[i].item(),
                                },
                            )
                        )
                points_done += len(points)
        except (
            sandbox.GateRunaway,
            RecursionError,
        ) as e:  # a loop, recursion or runaway number: not compared
            reason = str(e) if isinstance(e, sandbox.GateRunaway) else f"{name} recurses past Python's limit"
            out.append(
                Comparison(name, "bounded", "UNKNOWN", seconds=time.perf_counter() - start, reason=reason)
            )
            continue
        diffs = [d for _, d in differing[:max_differences]]
        # As a point-by-point scan would report it: it stops at the first difference beyond those shown.
        compared = differing[max_differences][0] + 1 if len(differing) > max_differences else points_done
        out.append(
            Comparison(
                name,
                "bounded",
                "DIFFERENT" if diffs else "EQUIVALENT",
                checked=compared,
                seconds=time.perf_counter() - start,
                differences=diffs,
                real_calls_per_second=points_done / real_seconds if real_seconds else 0.0,
            )
        )
    return out


def executed_comparison(
    spec: str,
    model_id: str,
    count: int = 2000,
    seed: int = 0,
    registry_id: str = "aiter-0.1.20",
    tree: Path | None = None,
) -> Any:
    """The executed differential: the release's real decode path run on the model revision's solver-found
    cases and ``count`` seeded random valid shapes, every routing fact compared (spec.realcode.executed).
    ``tree``: the vLLM tree a file that sits in none is run in (:attr:`Bound.tree`)."""
    from spec.analyses.cases import generate
    from spec.realcode.executed.differential import differential, random_shapes
    from spec.realcode.executed.harness import release_code

    model = get_revision(model_id)
    reg = load_registry(registry_id)
    shapes = [c.shape for c in generate(model_id, registry_id)] + random_shapes(model, reg, count, seed)
    if Path(spec).exists():  # the child runs in a scratch folder, where a relative path names nothing
        spec = str(Path(spec).absolute())
    return differential(release_code(spec, tree), model, shapes, registry_id)


def bind(
    spec: str, model_id: str | None = None, symbolic: bool = True, timeout_ms: int | None = None
) -> Bound:
    """The bounded and (unless ``symbolic`` is off)
    symbolic comparison of a release with a model revision; ``timeout_ms`` bounds each solver call and each
    run of the real code (a runaway is UNKNOWN).

    Without ``model_id``, a release is compared with the revision that models it, a file with the one that
    models the release it comes from (:func:`spec.realcode.release_of.release_of`: its tree's stated
    version, else the closest by content).  A file that sits in no vLLM tree reads its
    reorder_batch_threshold and environment defaults from that release's tree, as ``check`` does
    (:func:`spec.realcode.revision.real_revision`'s ``tree``: that tree's builder gives the threshold), and
    ``why`` names the stand-in; ``tree`` is that tree, in which :func:`executed_comparison` runs the file
    (confined, as bind runs any file it executes)."""
    if timeout_ms is not None:
        sandbox.set_call_limit(timeout_ms / 1000)
    source = resolve(spec)
    RealGates(source)  # refuses a file that is not a loadable backend before anything else
    release, why = origin_of_source(source)
    if model_id is not None:
        why = "given with --revision"
    else:
        model_id = default_model(release)
        if model_id is None:
            raise ValueError(f"no model revision is known for {source.label} ({why}); pass --revision")
        why = f"the model of {release}, {why}"
    tree = stand_in_tree(source, release)
    if tree is not None:
        why += f"; reorder_batch_threshold {threshold_origin(spec, tree)}"
    gates = RealGates(source, tree=tree)
    rows = bounded_comparison(gates, model_id)
    if symbolic:
        real = real_revision(spec, tree=tree)
        rows = symbolic_comparison(real, get_revision(model_id), timeout_ms=timeout_ms) + rows
    return Bound(source.label, model_id, why, rows, tree)


@dataclass(frozen=True)
class Bound:
    """What :func:`bind` compared and found."""

    label: str  # the release ("vllm==0.34.0") or the path as given
    model_id: str  # the model revision compared with
    why: str  # why that revision, and the tree standing in for a lone file's
    rows: list[Comparison]
    tree: Path | None = None  # the release tree standing in for the one a lone file sits in


def stand_in_tree(source: Source, release: str) -> Path | None:
    """The tree of ``release`` (the one ``source`` comes from), where ``source`` is a file in no vLLM tree."""
    lone = not source.label.startswith("vllm==") and tree_of(source.path) is None
    return release_tree(release) if lone else None


def origin_of_source(source: Source) -> tuple[str, str]:
    """The release a release's or a file's source is (or comes from), and how that is known."""
    if source.label.startswith("vllm=="):
        return source.label.removeprefix("vllm=="), "the release given"
    from spec.realcode.release_of import release_of

    origin = release_of(source.path, source.text)
    return origin.release, f"the release the file comes from ({origin.how})"


def executed_for_releases(releases: Iterable[str], count: int) -> dict[str, Any]:
    """Each release's executed differential against the model revision that describes it (None: no model),
    keyed by the label check gives the release's column; a file's, against the model of the release it comes
    from (:func:`origin_of_source`).  Raises SourceError / HarnessError."""
    from spec.realcode.source import release_version

    out: dict[str, Any] = {}
    for spec in releases:
        version = release_version(spec)
        label = f"vllm=={version}" if version else spec  # as check labels the release's column
        source = resolve(spec)
        release, _ = origin_of_source(source)  # a file: the release it comes from
        model = default_model(release)
        tree = stand_in_tree(source, release)
        out[label] = executed_comparison(spec, model, count, tree=tree) if model else None
    return out
