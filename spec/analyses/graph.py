"""The routing graph: forward_mqa's decisions -> the five paths -> the kernels, with z3 reachability.

The decisions are forward_mqa's tests in vLLM's order (``forward_path`` in
:mod:`mla_model.revisions.base`: Gluon decode, Gluon verify, [Triton verify],
else ASM persistent / non-persistent), read off the revision's own ``Route.path``
term so the graph is the model that is proved.  A leaf is what one step finally
runs: the ASM kernel AITER resolves (``registry.resolved_kernel``, per arch), the
Gluon kernel (by the KV dtype it reads), vLLM's Triton verify kernel, or the
first failure on the step's path (``spec.proof.views.failure_kind``: no ASM kernel,
get_block_n_fp8 KeyError, ...).

A node or edge is *reachable* when some shape that the engine accepts
(``Revision.is_valid``) gets there; z3 decides it over unbounded integers.
ASM kernels and failure leaves are found by enumeration (block the leaf's
lookup key and repeat), so only reachable ones appear; the decisions, the paths
and the Gluon/Triton leaves are always drawn, dead ones marked dead.  Every
reachable node carries a witness Shape, re-run through the plain-Python route
(:func:`leaf_of`) before it is kept.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import z3

from mla_model.decision import Decision, decide
from mla_model.derived import kernel_kv_dtype
from mla_model.failures import FAILURE_BY_KIND, SILENT_WRONG_OUTPUT, WRONG_OUTPUTS, failure_kind
from mla_model.logic import EnumTerm
from mla_model.registry import NO_KERNEL, Registry, resolved_kernel
from mla_model.revisions.base import Revision
from mla_model.route import ASM_PATHS, DCP_ROUTES, GLUON_PATHS, PATHS
from mla_model.shape import FIELD_BY_NAME, FP8_KV_CACHE_DTYPES, GIB, Shape
from spec.proof.prover import Problem, canonical_model, problem
from spec.proof.terms import as_z3, free_constants
from spec.proof.verdict import DEFAULT_TIMEOUT_MS

# forward_mqa's gate for each path (vLLM's names; use_triton_verify is 0.34's local, the DCP routes are
# _DCPDecodeRoute's members from 0.31 on and use_segmented_dcp_verify before).
DECISIONS = {
    "gluon_decode": "use_gluon_decode",
    "gluon_verify": "use_gluon_verify",
    "triton_verify": "use_triton_verify",
    "triton_dcp_verify": "dcp_route is TRITON",
    "segmented_dcp_verify": "dcp_route is SEGMENTED",
    "asm_persistent": "use_persistent_metadata",
}
GLUON_BF16, GLUON_FP8, TRITON = "gluon_kernel_bf16_kv", "gluon_kernel_fp8_kv", "triton_verify_kernel"
TRITON_DCP, SEGMENTED = "triton_dcp_verify_kernel", "segmented_mla_kernel"
# Drawn whether or not reachable: (kind, label, condition on the edge into it).  Gluon's kernel follows the KV
# dtype (registry.GluonCheck: bh16bn64 for bf16, bh16bn128 for fp8); no revision hands Gluon the cache's KV
# scale (Route.kv_scale_passed), so an fp8 cache there is read unscaled (fp8-never-reaches-gluon).  Where a
# valid shape reaches the fp8 leaf, its label adds what that does, in the words check uses
# (mla_model.failures.WRONG_OUTPUTS).
FIXED_LEAVES = {
    GLUON_BF16: ("kernel", "Gluon kernel (mla_gluon), bf16 KV", "kv bf16: mla_gluon bh16bn64"),
    GLUON_FP8: (
        "failure",
        "Gluon kernel, fp8 KV read with kv_scale=1.0 (#51011)",
        "kv fp8: mla_gluon bh16bn128, unscaled",
    ),
    TRITON: ("kernel", "vLLM Triton MLA verify kernel", "vLLM's Triton verify (CDNA3)"),
    TRITON_DCP: ("kernel", "vLLM split-KV Triton decode, DCP row view", "vLLM's Triton DCP verify (gfx942)"),
    SEGMENTED: ("kernel", "AITER segmented MLA (Triton), DCP row view", "AITER segmented MLA decode"),
}
# The path each fixed leaf hangs off.
_FIXED_LEAF_PATHS = {
    GLUON_BF16: GLUON_PATHS,
    GLUON_FP8: GLUON_PATHS,
    TRITON: ("triton_verify",),
    TRITON_DCP: ("triton_dcp_verify",),
    SEGMENTED: ("segmented_dcp_verify",),
}
_SHORT = {
    "num_heads": "heads",
    "max_qo_len": "qlen",
    "kv_cache_dtype": "kv",
    "q_dtype": "q",
    "asm_padding_mode": "mode",
    "spec_method": "drafter",
    "num_spec_tokens": "k",
    "dcp_world_size": "dcp",
    "num_reqs": "reqs",
    "kv_cache_bytes": "kv bytes",
    "gluon_build": "gluon build",
}
_FLIP = {"<": "≥", "≤": ">", ">": "≤", "≥": "<", "==": "≠", "≠": "=="}


class Undecided(RuntimeError):
    """z3 answered unknown: a node cannot be marked reachable or dead."""


# --- reading a z3 condition ------------------------------------------------------------


class ConditionText:
    """A z3 gate term as a short line: ``heads<16 ∧ qlen==1 ∧ kv not fp8 ∧ mode≠asm ∧ gfx950``.

    Subterms that read one enumeration field only (e.g. the builder's normalised
    KV dtype) print as the set of values they hold for, equalities of one int
    term with constants as a set, and named subterms (the decode head count, the
    padded head count) as their name.
    """

    def __init__(
        self,
        variables: dict[str, Any],
        names: dict[int, str],
        enums: dict[int, tuple[str, tuple[str, ...]]] | None = None,
    ) -> None:
        self.field_of = {v.get_id(): name for name, v in variables.items()}
        self.variables = variables
        self.names = names
        self.enums = enums or {}  # derived enumeration terms (the DCP route): id -> (name, values)

    def _enum_value(self, t: Any) -> str | None:
        """``route==value`` of a named derived enumeration, as the value's name."""
        if z3.is_eq(t) and t.arg(0).get_id() in self.enums and z3.is_int_value(t.arg(1)):
            name, values = self.enums[t.arg(0).get_id()]
            return values[t.arg(1).as_long()]
        return None

    def __call__(self, t: Any, top: bool = True) -> str:
        if t.get_id() in self.names:
            return self.names[t.get_id()]
        if z3.is_true(t) or z3.is_false(t):
            return "always" if z3.is_true(t) else "never"
        if (name := self._enum_field(t)) is not None:
            return self._members(t, name)
        kind = t.decl().kind()
        if kind in (z3.Z3_OP_AND, z3.Z3_OP_OR):
            return self._junction(t, kind, top)
        if kind == z3.Z3_OP_NOT:
            inner = t.arg(0)
            op = _comparison(inner)
            return (
                f"{self(inner.arg(0), False)}{_FLIP[op]}{self(inner.arg(1), False)}"
                if op
                else f"¬{self(inner, False)}"
            )
        if (value := self._enum_value(t)) is not None:
            return f"{self.enums[t.arg(0).get_id()][0]}={value}"
        if op := _comparison(t):
            return f"{self(t.arg(0), False)}{op}{self(t.arg(1), False)}"
        if kind == z3.Z3_OP_ITE:
            cond = z3.simplify(t.arg(0))
            if z3.is_true(cond) or z3.is_false(cond):
                return self(t.arg(1) if z3.is_true(cond) else t.arg(2), top)
            return f"({self(t.arg(0), False)} ? {self(t.arg(1), False)} : {self(t.arg(2), False)})"
        if z3.is_int_value(t):
            n = t.as_long()
            return f"{n // GIB} GiB" if n >= GIB and n % GIB == 0 else str(n)
        if kind == z3.Z3_OP_ADD:
            return "(" + " + ".join(self(c, False) for c in t.children()) + ")"
        if kind == z3.Z3_OP_IDIV:
            return f"{self(t.arg(0), False)}/{self(t.arg(1), False)}"
        if kind == z3.Z3_OP_MUL:
            return "·".join(
                self(c, False) for c in t.children() if not (z3.is_int_value(c) and c.as_long() == 1)
            )
        if t.get_id() in self.field_of:
            return _SHORT.get(self.field_of[t.get_id()], self.field_of[t.get_id()])
        return str(t)

    def _junction(self, t: Any, kind: int, top: bool) -> str:
        """∧ / ∨ of the flattened children, one enumeration field or one int's equalities printed as a set."""
        join, unit, zero = (z3.And, "always", "never") if kind == z3.Z3_OP_AND else (z3.Or, "never", "always")
        groups: dict[Any, list[Any]] = {}
        for c in _flat(t, kind):
            name = self._enum_field(c)
            int_eq = kind == z3.Z3_OP_OR and z3.is_eq(c) and z3.is_int_value(c.arg(1))
            key = ("enum", name) if name else ("eq", c.arg(0).get_id()) if int_eq else ("one", c.get_id())
            groups.setdefault(key, []).append(c)
        parts = []
        for (what, ident), members in groups.items():
            if what == "enum":
                parts.append(self._members(join(*members), ident))
            elif what == "eq" and len(members) > 1:
                shown = [self._enum_value(c) or str(c.arg(1)) for c in members]
                subject = self.enums.get(ident, (None,))[0] or self(members[0].arg(0), False)
                parts.append(f"{subject}∈{{{','.join(shown)}}}")
            else:
                parts.extend(self(c, False) for c in members)
        if zero in parts:
            return zero
        parts = [p for p in parts if p != unit] or [unit]
        text = (" ∧ " if kind == z3.Z3_OP_AND else " ∨ ").join(parts)
        return text if top or len(parts) == 1 else f"({text})"

    def _enum_field(self, t: Any) -> str | None:
        """The enumeration field a boolean term reads, when it reads nothing else."""
        if not z3.is_bool(t):
            return None
        read = free_constants(t)
        if len(read) != 1 or read[0].get_id() not in self.field_of:
            return None
        name = self.field_of[read[0].get_id()]
        return name if FIELD_BY_NAME[name].kind == "enum" else None

    def _members(self, t: Any, name: str) -> str:
        """The values of enumeration field ``name`` for which ``t`` holds, as the shortest reading."""
        values = FIELD_BY_NAME[name].values
        var = self.variables[name]
        holds = [
            v for i, v in enumerate(values) if z3.is_true(z3.simplify(z3.substitute(t, (var, z3.IntVal(i)))))
        ]
        rest = [v for v in values if v not in holds]
        short = _SHORT.get(name, name)
        if not rest or not holds:
            return "always" if not rest else "never"
        if name == "kv_cache_dtype" and set(FP8_KV_CACHE_DTYPES) in (set(holds), set(rest)):
            return "kv fp8" if set(holds) == set(FP8_KV_CACHE_DTYPES) else "kv not fp8"
        if name == "arch" and len(holds) == 1:
            return holds[0]
        if len(holds) == 1 or len(rest) == 1:
            return f"{short}={holds[0]}" if len(holds) == 1 else f"{short}≠{rest[0]}"
        return (
            f"{short}∈{{{','.join(holds)}}}" if len(holds) <= len(rest) else f"{short}∉{{{','.join(rest)}}}"
        )


def _flat(t: Any, kind: int) -> list[Any]:
    out = []
    for c in t.children():
        out.extend(_flat(c, kind) if z3.is_app(c) and c.decl().kind() == kind else [c])
    return out


def _comparison(t: Any) -> str | None:
    ops = {z3.Z3_OP_LT: "<", z3.Z3_OP_LE: "≤", z3.Z3_OP_GT: ">", z3.Z3_OP_GE: "≥", z3.Z3_OP_EQ: "=="}
    if not z3.is_app(t):
        return None
    if t.decl().kind() == z3.Z3_OP_DISTINCT and t.num_args() == 2:
        return "≠"
    op = ops.get(t.decl().kind())
    return op if op and not z3.is_bool(t.arg(0)) else None


def _essential(conjuncts: list[Any], earlier: list[Any], solver: z3.Solver) -> list[Any]:
    """The conjuncts a reader needs: drop those that restate an earlier decision's "no" (``¬use_gluon_decode``
    inside the persistent gate) and those the engine's validity rules and the kept conjuncts imply."""
    kept = [
        c
        for c in conjuncts
        if not (z3.is_not(c) and any(_check(solver, z3.Xor(c, no)) == z3.unsat for no in earlier))
    ]
    for c in list(kept):
        others = [o for o in kept if not o.eq(c)]
        if _check(solver, *others, z3.Not(c)) == z3.unsat:
            kept = others
    return kept


# --- solving -----------------------------------------------------------------------------


def _check(solver: z3.Solver, *extra: Any) -> Any:
    solver.push()
    solver.add(*extra)
    answer = solver.check()
    solver.pop()
    if answer == z3.unknown:
        raise Undecided(f"z3: {solver.reason_unknown()}")
    return answer


def _canonical(p: Problem, solver: z3.Solver, *where: Any) -> Shape:
    """The canonical valid shape satisfying ``where`` (which must be satisfiable)."""
    solver.push()
    solver.add(*where)
    model = canonical_model(solver, p.symbolic.variables) if solver.check() == z3.sat else None
    solver.pop()
    if model is None:
        raise Undecided("z3 could not pin a witness shape")
    return p.symbolic.to_shape(model)


def _distinct(solver: z3.Solver, base: list[Any], terms: list[Any]) -> list[tuple[list[Any], z3.ModelRef]]:
    """Every distinct value tuple of ``terms`` under ``base``, a model of each: find one, block it, repeat."""
    found = []
    solver.push()
    solver.add(*base)
    while (answer := solver.check()) == z3.sat:
        model = solver.model()
        values = [model.eval(t, model_completion=True) for t in terms]
        found.append((values, model))
        solver.add(z3.Or(*[t != v for t, v in zip(terms, values)]))
    solver.pop()
    if answer == z3.unknown:
        raise Undecided(f"z3: {solver.reason_unknown()}")
    return found


# --- leaves ------------------------------------------------------------------------------


def leaf_of(registry: Registry, d: Decision) -> str:
    """The leaf one concrete step ends in (plain Python): a failure, a Gluon/Triton leaf or an ASM kernel."""
    s, r = d.shape, d.route
    failure = failure_kind(d)
    if failure != "none":
        return f"failure:{s.arch}:{failure}"
    if r.path in GLUON_PATHS:
        return GLUON_FP8 if kernel_kv_dtype(s) == "fp8" else GLUON_BF16
    for leaf, paths in _FIXED_LEAF_PATHS.items():
        if r.path in paths and leaf not in (GLUON_BF16, GLUON_FP8):
            return leaf
    name = resolved_kernel(registry, s.arch, r.request, d.asm)
    assert name != NO_KERNEL, f"failure_kind 'none' but no kernel for {s}"
    return f"asm:{s.arch}:{name}"


def _leaf_terms(d: Decision, path: str) -> list[Any]:
    """What tells this path's leaves apart: arch, failure and, on success, the lookup key (else held at 0)."""
    s, a = d.shape, d.asm
    failure = failure_kind(d)
    ok = failure.term == failure.code("none")
    detail = (
        [s.q_dtype, d.route.request.kv_dtype, a.gqa, a.ps, a.qseqlen, a.causal, a.lse, a.cprr]
        if path in ASM_PATHS
        else [kernel_kv_dtype(s)]
        if path in GLUON_PATHS
        else []
    )

    def held(t: Any) -> Any:
        t = as_z3(t)
        t = z3.IntVal(t) if isinstance(t, int) else t
        return z3.If(ok, t, z3.BoolVal(False) if z3.is_bool(t) else z3.IntVal(0))

    return [as_z3(s.arch), failure.term, *[held(t) for t in detail]]


def _leaf_node(d: Decision, leaf: str, registry: Registry) -> tuple[dict[str, Any], str]:
    """The node attributes of a leaf and the condition on the edge into it, from one concrete step."""
    if leaf in FIXED_LEAVES:
        kind, label, condition = FIXED_LEAVES[leaf]
        effects = [e for e in WRONG_OUTPUTS if e.symptom == SILENT_WRONG_OUTPUT and e.applies(d)]
        if kind == "failure" and effects:  # what check says of this step
            label += ": " + "; ".join(e.message(d, registry) for e in effects)
        return {"kind": kind, "label": label, "arch": None}, condition
    req, a = d.route.request, d.asm
    what, arch, rest = leaf.split(":", 2)
    if what == "failure":
        return {
            "kind": "failure",
            "label": f"{arch}: {FAILURE_BY_KIND[rest].label}",
            "arch": arch,
        }, f"{arch} ∧ {rest}"
    lookup = {
        "q": req.q_dtype,
        "kv": req.kv_dtype,
        "gqa": int(a.gqa),
        "qseqlen": int(a.qseqlen),
        "ps": int(bool(a.ps)),
        "causal": int(bool(a.causal)),
        "lse": int(bool(a.lse)),
        "cprr": int(bool(a.cprr)),
    }
    key = ", ".join(f"{k}' {v}" if k not in ("q", "kv") else f"{k} {v}" for k, v in lookup.items())
    return {
        "kind": "kernel",
        "label": rest,
        "arch": arch,
        "key": key,
        "lookup": lookup,
    }, f"AITER key {arch}: {key}"


# --- the graph ---------------------------------------------------------------------------


def _decisions(path_term: Any) -> list[tuple[str, Any]]:
    """(path, condition) of forward_mqa's if/elif chain, read off the route's ``path`` term."""
    chain, t = [], path_term
    while z3.is_app_of(t, z3.Z3_OP_ITE):
        chain.append((PATHS[t.arg(1).as_long()], t.arg(0)))
        t = t.arg(2)
    assert [p for p, _ in chain] == list(DECISIONS), f"unexpected forward_mqa chain {chain}"
    return chain


def routing_graph(revision: str | Revision, registry: str | Registry) -> nx.DiGraph:
    """The routing DAG of one revision against one AITER registry, with reachability and witnesses.

    A leaf edge's witness is the model z3 found it with (any valid shape that gets there);
    :func:`pin_witnesses` replaces them by canonical shapes for readers.
    """
    p = problem(revision, registry)
    d, reg = p.decision, p.registry
    solver = _solver(p)
    route = d.route
    text = ConditionText(
        p.symbolic.variables,
        {
            as_z3(route.decode_heads).get_id(): "heads",
            as_z3(route.request.padded_heads).get_id(): "padded heads",
        },
        enums={as_z3(route.dcp_route.term).get_id(): ("dcp route", DCP_ROUTES)}
        if isinstance(route.dcp_route, EnumTerm)
        else {},
    )
    g = nx.DiGraph(revision=p.revision.id, registry=reg.id, title=p.revision.title, problem=p)
    path_is = {name: route.path.term == route.path.code(name) for name in PATHS}

    # Decisions, in forward_mqa's order; each is reached when every earlier one said no.
    earlier: list[Any] = []
    chain = _decisions(route.path.term)
    for i, (path, cond) in enumerate(chain):
        gate = DECISIONS[path]
        g.add_node(gate, kind="decision", label=f"{gate}?")
        kept = _essential(_flat(cond, z3.Z3_OP_AND) if z3.is_and(cond) else [cond], earlier, solver)
        condition = text(z3.And(*kept)) if len(kept) != 1 else text(kept[0])
        g.add_edge(gate, path, kind="yes", condition=condition)
        no_to = DECISIONS[chain[i + 1][0]] if i + 1 < len(chain) else "asm_nonpersistent"
        g.add_edge(gate, no_to, kind="no", condition=f"¬{gate}")
        earlier.append(z3.Not(cond))

    for path in PATHS:
        g.add_node(path, kind="path", label=path)
    for leaf, (kind, label, condition) in FIXED_LEAVES.items():
        g.add_node(leaf, kind=kind, label=label, arch=None)
        for path in _FIXED_LEAF_PATHS[leaf]:
            g.add_edge(path, leaf, kind="leaf", condition=condition, witness=None)

    # Leaves: enumerate each path's distinct outcomes and name each in plain Python from its model.
    for path in PATHS:
        terms = _leaf_terms(d, path)
        for values, model in _distinct(solver, [path_is[path]], terms):
            shape = p.symbolic.to_shape(model)
            concrete = _confirmed(p, shape, path)
            leaf = leaf_of(reg, concrete)
            attrs, condition = _leaf_node(concrete, leaf, reg)
            if leaf not in g:
                g.add_node(leaf, **attrs)
            elif leaf in FIXED_LEAVES and g.edges[path, leaf].get("witness") is None:
                g.nodes[leaf]["label"] = attrs["label"]  # reached: the label says what happens there
            if g.edges.get((path, leaf), {}).get("witness") is None:
                where = (path_is[path], *[t == v for t, v in zip(terms, values)])
                g.add_edge(path, leaf, kind="leaf", condition=condition, witness=shape, where=where)
    g.graph["asm_kernels"] = {
        arch: (
            len({n for n, a in g.nodes.items() if a["kind"] == "kernel" and a.get("arch") == arch}),
            len({r.name for r in reg.kernels if r.arch == arch}),
        )
        for arch in FIELD_BY_NAME["arch"].values
    }
    _propagate(g)
    return g


def pin_witnesses(g: nx.DiGraph) -> None:
    """Replace each witness a node shows by the canonical shape of its leaf edge
    (``spec.proof.prover.canonical_model``: Shape defaults where allowed, else the least value), the same
    on every run; about 25 solver calls a node."""
    p = g.graph["problem"]
    solver = _solver(p)
    reached = (_first_reached(g, n) for n, a in g.nodes.items() if a["kind"] != "decision")
    shown = {r for r in reached if r is not None}
    for path, leaf in sorted(shown):
        a = g.edges[path, leaf]
        a["witness"] = _canonical(p, solver, *a["where"])
        assert leaf_of(p.registry, _confirmed(p, a["witness"], path)) == leaf, (path, leaf, a["witness"])
    _propagate(g)


def _solver(p: Problem) -> z3.Solver:
    solver = z3.Solver()
    solver.set("timeout", DEFAULT_TIMEOUT_MS)
    solver.add(*p.constraints)
    return solver


def _confirmed(p: Problem, shape: Shape, path: str) -> Decision:
    """The plain-Python decision of a z3 witness, which must be valid and take ``path``."""
    concrete = decide(p.revision, p.registry, shape)
    assert p.revision.is_valid(shape, p.registry) and concrete.route.path == path, (path, shape)
    return concrete


def _first_reached(g: nx.DiGraph, n: str) -> tuple[str, str] | None:
    """The leaf edge a path or leaf takes its witness from: the first reached of its leaf edges."""
    edges = (
        [(n, v) for v in g.successors(n)]
        if g.nodes[n]["kind"] == "path"
        else [(u, n) for u in g.predecessors(n)]
    )
    return next((e for e in edges if g.edges[e]["witness"] is not None), None)


def _propagate(g: nx.DiGraph) -> None:
    """Node witnesses and reachability from the leaf edges: a leaf or path is reached iff one of its leaf
    edges is, a decision iff some path at or after its own is."""
    for n, a in g.nodes.items():
        if a["kind"] != "decision":
            edge = _first_reached(g, n)
            a["witness"] = g.edges[edge]["witness"] if edge else None
    for path, gate in DECISIONS.items():
        g.nodes[gate]["witness"] = next(
            (g.nodes[q]["witness"] for q in PATHS[PATHS.index(path) :] if g.nodes[q]["witness"] is not None),
            None,
        )
    for a in g.nodes.values():
        a["reachable"] = a["witness"] is not None
    for (u, v), a in g.edges.items():
        a["reachable"] = (
            g.nodes[u]["reachable"]
            and g.nodes[v]["reachable"]
            and (a["witness"] is not None if a["kind"] == "leaf" else True)
        )


def graph_json(g: nx.DiGraph) -> dict[str, Any]:
    """The graph as JSON: ``{"revision", "registry", "nodes": [{"id", "kind", "reachable", ...}],
    "edges": [{"from", "to", "condition"}]}``."""
    rank = {n: i for i, n in enumerate(n for n, a in g.nodes.items() if a["kind"] in ("decision", "path"))}
    order = lambda n: (rank.get(n, len(rank)), n)  # noqa: E731  decisions and paths in forward_mqa's order, then leaves by id
    return {
        "revision": g.graph["revision"],
        "registry": g.graph["registry"],
        "nodes": [
            {
                "id": n,
                "kind": g.nodes[n]["kind"],
                "reachable": g.nodes[n]["reachable"],
                "label": g.nodes[n]["label"],
                "witness": g.nodes[n]["witness"].to_json() if g.nodes[n]["witness"] is not None else None,
            }
            for n in sorted(g.nodes, key=order)
        ],
        "edges": [
            {
                "from": u,
                "to": v,
                "condition": g.edges[u, v]["condition"],
                "reachable": g.edges[u, v]["reachable"],
            }
            for u, v in sorted(g.edges, key=lambda e: (order(e[0]), order(e[1])))
        ],
    }
