"""The grid: every shape of the bounded box that a set of validity rules accepts, laid out for numpy.

:mod:`spec.analyses.diff` evaluates two routes on every shape valid under both
revisions.  Enumerating the box naively is billions of shapes; this module
makes it millions of cells, exactly:

1. Values no term can tell apart are one value.  Every z3 term (the route
   keys, the validity rules) sees a field only through its maximal subterms
   that read that field alone (``spec_method in (mtp, deepseek_mtp)``,
   ``num_reqs >= 32``); values on which all those subterms agree are
   interchangeable, so one representative is laid out and weighted by the
   class size.  (A field used in arithmetic with another, like heads in
   ``dcp * heads``, keeps every value.)
2. Fields tied together by a validity rule form a component; each component's
   valid rows are enumerated field by field, pruned as soon as a rule can be
   evaluated (the layout of :mod:`spec.proof.bruteforce`).  Fields only validity
   reads are summed out as weights; fields nothing reads multiply every count
   by their box size.
3. The grid is the product of the components, one numpy axis each, so every
   cell is valid and each term spans only the axes it reads.

z3 terms are evaluated on the grid by :func:`evaluate_z3`, so a revision that
answers in z3 (real code lifted by :mod:`spec.realcode.symexec`) runs on the
same grid as the numpy interpretation of the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial, reduce
from types import SimpleNamespace
from typing import Any

import numpy as np
import z3

from mla_model.logic import EnumTerm
from mla_model.shape import ARCHS, FIELD_BY_NAME, FIELDS, FP8_KV_CACHE_DTYPES, Q_DTYPES, Shape
from spec.analyses.regions import Axis
from spec.proof.terms import box_constraints, fields_of

CompiledRule = tuple[
    Any, frozenset
]  # a validity rule as (z3 term, the fields it reads); cf. revisions.base.Rule


def _combine(fn: Any, *args: Any) -> Any:
    """An n-ary and/or: operands of one shape first (no broadcast), then the results, smallest first.

    A lifted path condition conjoins literals over several axes; combining it in this order makes
    one full-size array instead of one per literal.
    """
    groups: dict[tuple, list[Any]] = {}
    for a in args:
        groups.setdefault(np.shape(a), []).append(a)
    return reduce(fn, sorted((reduce(fn, g) for g in groups.values()), key=np.size))


_NUMPY_OF_Z3: dict[int, Any] = {
    z3.Z3_OP_AND: partial(_combine, np.logical_and),
    z3.Z3_OP_OR: partial(_combine, np.logical_or),
    z3.Z3_OP_NOT: np.logical_not,
    z3.Z3_OP_IMPLIES: lambda a, b: np.logical_or(np.logical_not(a), b),
    z3.Z3_OP_XOR: np.logical_xor,
    z3.Z3_OP_ITE: np.where,
    z3.Z3_OP_EQ: np.equal,
    z3.Z3_OP_DISTINCT: np.not_equal,
    z3.Z3_OP_LE: np.less_equal,
    z3.Z3_OP_LT: np.less,
    z3.Z3_OP_GE: np.greater_equal,
    z3.Z3_OP_GT: np.greater,
    z3.Z3_OP_ADD: lambda *a: reduce(np.add, a),
    z3.Z3_OP_SUB: lambda *a: reduce(np.subtract, a),
    z3.Z3_OP_MUL: lambda *a: reduce(np.multiply, a),
    z3.Z3_OP_UMINUS: np.negative,
    z3.Z3_OP_IDIV: lambda a, b: _euclid(a, b)[0],
    z3.Z3_OP_MOD: lambda a, b: _euclid(a, b)[1],
}


def _euclid(a: Any, b: Any) -> tuple[Any, Any]:
    """z3's (SMT-LIB's) integer div and mod: Euclidean, the remainder never negative.  numpy's floor
    division agrees only for a positive divisor, the only kind the releases' gates use (16 % h, x / 16); an
    edited file may divide by anything.  z3 leaves a zero divisor unspecified, so it is refused."""
    b = np.asarray(b)
    if np.any(b == 0):
        raise ValueError("cannot evaluate a z3 division by zero with numpy (z3 leaves it unspecified)")
    r = np.mod(a, np.abs(b))
    return (a - r) // b, r


class Program:
    """z3 terms compiled once for numpy: their shared DAG as operations in topological order.

    Walking a z3 term through the Python API costs far more than the numpy operations it stands
    for, so each term is walked once, through z3's C API (no Python wrapper per node), and
    evaluated many times.
    """

    def __init__(self, terms: list[Any]) -> None:
        self.terms = terms  # kept alive: their AST ids key the cache, their nodes are read below
        self.ops: list[
            tuple[Any, tuple[int, ...]]
        ] = []  # (numpy function, or a field's name; operand indices)
        self.fields: list[frozenset] = []  # the Shape fields each operation reads
        ctx = terms[0].ctx.ref() if terms else None
        index: dict[int, int] = {}
        stack = [(t.as_ast(), False) for t in terms]
        while stack:
            ast, expanded = stack.pop()
            key = z3.Z3_get_ast_id(ctx, ast)
            if key in index:
                continue
            kids = _operands(ctx, ast)
            if kids and not expanded:
                stack.append((ast, True))
                stack.extend((k, False) for k in kids)
                continue
            args = tuple(index[z3.Z3_get_ast_id(ctx, k)] for k in kids)
            index[key] = len(self.ops)
            op = _operation(ctx, ast, len(args))
            self.ops.append((op, args))
            self.fields.append(
                frozenset([op]) if isinstance(op, str) else frozenset().union(*[self.fields[i] for i in args])
            )
        self.roots = [index[t.get_id()] for t in terms]
        # Per operation, the operands whose last reader it is (a root is read at the end): their arrays
        # are dropped there, so a grid evaluation holds the live values only, not every intermediate
        # (0.33.0 -> 0.34.0's diff peaked at 11 GB with every one kept).
        last = {a: i for i, (_, args) in enumerate(self.ops) for a in args}
        for r in self.roots:
            last[r] = len(self.ops)
        self.dead_after: list[tuple[int, ...]] = [() for _ in self.ops]
        for a, i in last.items():
            if i < len(self.ops):
                self.dead_after[i] += (a,)

    def __call__(self, env: Mapping[str, Any], only: set[int] | None = None) -> list[Any]:
        """The terms' values on ``env`` (field -> codes); with ``only``, just those operations' values
        (every one kept)."""
        values: list[Any] = [None] * len(self.ops)
        for i, (op, args) in enumerate(self.ops):
            if only is not None and i not in only:
                continue
            values[i] = env[op] if isinstance(op, str) else op(*[values[a] for a in args])
            if only is None:
                for a in self.dead_after[i]:
                    values[a] = None
        return values if only is not None else [values[r] for r in self.roots]


def _operands(ctx: Any, ast: Any) -> list[Any]:
    if z3.Z3_get_ast_kind(ctx, ast) != z3.Z3_APP_AST:
        return []
    app = z3.Z3_to_app(ctx, ast)
    return [z3.Z3_get_app_arg(ctx, app, i) for i in range(z3.Z3_get_app_num_args(ctx, app))]


def _operation(ctx: Any, ast: Any, arity: int) -> Any:
    """A z3 node's numpy function (a constant as a nullary one), or the name of the field it is."""
    if z3.Z3_get_ast_kind(ctx, ast) == z3.Z3_NUMERAL_AST:
        number = int(z3.Z3_get_numeral_string(ctx, ast))
        return lambda: number
    decl = z3.Z3_get_app_decl(ctx, z3.Z3_to_app(ctx, ast))
    kind = z3.Z3_get_decl_kind(ctx, decl)
    if kind in (z3.Z3_OP_TRUE, z3.Z3_OP_FALSE):
        value = kind == z3.Z3_OP_TRUE
        return lambda: value
    if kind == z3.Z3_OP_UNINTERPRETED and arity == 0:
        return z3.Z3_get_symbol_string(ctx, z3.Z3_get_decl_name(ctx, decl))
    if kind not in _NUMPY_OF_Z3 or (kind == z3.Z3_OP_DISTINCT and arity != 2):
        raise ValueError(
            f"cannot evaluate z3 operator {z3.Z3_get_symbol_string(ctx, z3.Z3_get_decl_name(ctx, decl))!r} "
            "with numpy"
        )
    return _NUMPY_OF_Z3[kind]


_PROGRAMS: dict[tuple[int, ...], Program] = {}


def compiled(terms: list[Any]) -> Program:
    """The program of these terms, compiled once per session."""
    key = tuple(t.get_id() for t in terms)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = Program(terms)
    return _PROGRAMS[key]


def evaluate_z3(terms: list[Any], env: Mapping[str, Any]) -> list[Any]:
    """Evaluate z3 terms over Shape fields in numpy; ``env`` maps each field to its codes (they broadcast)."""
    return compiled(terms)(env)


# --- values -------------------------------------------------------------------------------------------


def box_codes(name: str) -> np.ndarray:
    """A field's box values as codes: enum index, bool, int."""
    spec = FIELD_BY_NAME[name]
    if spec.kind == "enum":
        return np.arange(len(spec.values), dtype=np.int64)
    return np.array(spec.box, dtype=bool if spec.kind == "bool" else np.int64)


def decode_value(name: str, code: Any) -> Any:
    spec = FIELD_BY_NAME[name]
    return spec.values[int(code)] if spec.kind == "enum" else bool(code) if spec.kind == "bool" else int(code)


def default_codes(name: str, cols: Mapping[str, np.ndarray]) -> Any:
    """The Shape default of a field, per row where it follows another field (q_dtype, gluon_build)."""
    spec = FIELD_BY_NAME[name]
    if name == "q_dtype" and "kv_cache_dtype" in cols:
        fp8 = np.isin(
            cols["kv_cache_dtype"],
            [FIELD_BY_NAME["kv_cache_dtype"].values.index(d) for d in FP8_KV_CACHE_DTYPES],
        )
        return np.where(fp8, Q_DTYPES.index("fp8"), Q_DTYPES.index("bf16"))
    if name == "gluon_build" and "arch" in cols:
        return cols["arch"] == ARCHS.index("gfx950")
    default = getattr(Shape(), name)
    return spec.values.index(default) if spec.kind == "enum" else default


def _z3_value(name: str, code: Any) -> Any:
    return z3.BoolVal(bool(code)) if FIELD_BY_NAME[name].kind == "bool" else z3.IntVal(int(code))


def value_classes(program: Program) -> dict[str, list[np.ndarray]]:
    """Per field a program's terms read, its box codes grouped into classes that no term tells apart."""
    # The maximal operations that read one field only: such an operand of one that reads more, or such a root.
    maximal: dict[str, set[int]] = {}
    for i, (_, args) in enumerate(program.ops):
        for a in args:
            if len(program.fields[a]) == 1 and program.fields[a] != program.fields[i]:
                maximal.setdefault(next(iter(program.fields[a])), set()).add(a)
    for r in program.roots:
        if len(program.fields[r]) == 1:
            maximal.setdefault(next(iter(program.fields[r])), set()).add(r)
    out = {}
    for name, occurrences in maximal.items():
        codes = box_codes(name)
        below = {i for i, f in enumerate(program.fields) if f <= {name}}
        values = program({name: codes}, only=below)
        signature = np.stack(
            [np.broadcast_to(values[i], codes.shape).astype(np.int64) for i in sorted(occurrences)], axis=1
        )
        _, inverse = np.unique(signature, axis=0, return_inverse=True)
        out[name] = [codes[inverse.ravel() == c] for c in range(int(inverse.max()) + 1)]
    return out


def _representative(name: str, members: np.ndarray) -> Any:
    """The value a class is laid out as: the Shape default where the class holds it, else its first."""
    default = default_codes(name, {})
    return default if (members == default).any() else members[0]


# --- rules --------------------------------------------------------------------------------------------


def relevant_rule(term: Any, variables: dict[str, Any]) -> CompiledRule:
    """A rule over the fields it really depends on within the box (z3's proof, not the term's syntax).

    A term lifted from real code names every field on any path explored (a release's
    is_valid_num_heads, folded over all paths, mentions eight).  Fields that a random sample of
    the box suggests are idle are fixed to their defaults, and z3 proves the result equal to the
    term on the whole box; where it is not, each field is tried alone.
    """
    term = z3.simplify(term)
    names = list(fields_of(term))
    rng = np.random.default_rng(0)
    sample = {n: rng.choice(box_codes(n), 4096) for n in names}
    base = np.broadcast_to(evaluate_z3([term], sample)[0], (4096,))
    idle = [
        n
        for n in names
        if (
            np.broadcast_to(evaluate_z3([term], {**sample, n: rng.choice(box_codes(n), 4096)})[0], (4096,))
            == base
        ).all()
    ]
    if idle and not _equal_on_box(term, _fixed(term, idle, variables), variables):
        idle = [n for n in idle if _equal_on_box(term, _fixed(term, [n], variables), variables)]
    term = _fixed(term, idle, variables)
    return term, frozenset(fields_of(term))


def _fixed(term: Any, names: list[str], variables: dict[str, Any]) -> Any:
    if not names:
        return term
    return z3.simplify(
        z3.substitute(term, *[(variables[n], _z3_value(n, default_codes(n, {}))) for n in names])
    )


def _equal_on_box(a: Any, b: Any, variables: dict[str, Any]) -> bool:
    s = z3.Solver()
    domain = []
    for spec in FIELDS:
        var = variables[spec.name]
        if spec.kind == "enum":
            domain += [var >= 0, var < len(spec.values)]
    s.add(*domain, *box_constraints(variables), a != b)
    return s.check() == z3.unsat


# --- components and the grid --------------------------------------------------------------------------


def components(fields: set[str], rules: list[CompiledRule]) -> list[list[str]]:
    """Groups of fields tied together by some rule (union-find), each in FIELDS order."""
    parent = {f: f for f in fields}

    def root(f: str) -> str:
        while parent[f] != f:
            f = parent[f]
        return f

    for _, reads in rules:
        first, *rest = sorted(reads) or [None]
        for other in rest:
            parent[root(other)] = root(first)
    groups: dict[str, list[str]] = {}
    for spec in FIELDS:
        if spec.name in fields:
            groups.setdefault(root(spec.name), []).append(spec.name)
    return list(groups.values())


def enumerate_valid(
    fields: list[str], rules: list[CompiledRule], classes: dict[str, list[np.ndarray]]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every combination of the fields' values (class representatives) that the rules accept, and the
    number of box shapes each stands for."""
    if any(not reads and z3.is_false(term) for term, reads in rules):
        return {name: np.zeros(0, dtype=np.int64) for name in fields}, np.zeros(0, dtype=np.int64)
    cols: dict[str, np.ndarray] = {}
    weight = np.ones(1, dtype=np.int64)
    laid: set[str] = set()
    for name in fields:
        groups = classes.get(name) or [np.array([c]) for c in box_codes(name)]
        values = np.array([_representative(name, g) for g in groups], dtype=box_codes(name).dtype)
        sizes = np.array([len(g) for g in groups], dtype=np.int64)
        cols = {k: np.repeat(v, len(values)) for k, v in cols.items()}
        cols[name] = np.tile(values, len(weight))
        weight = np.repeat(weight, len(values)) * np.tile(sizes, len(weight))
        laid.add(name)
        keep = np.ones(len(weight), dtype=bool)
        for term, reads in rules:
            if name in reads and reads <= laid:
                keep &= np.broadcast_to(evaluate_z3([term], cols)[0], keep.shape)
        cols = {k: v[keep] for k, v in cols.items()}
        weight = weight[keep]
    return cols, weight


def count_valid(rules: list[CompiledRule], classes: dict[str, list[np.ndarray]]) -> int:
    """Shapes of the box that every rule accepts."""
    read = set().union(*[reads for _, reads in rules])
    total = 1
    for group in components(read, rules):
        total *= int(enumerate_valid(group, [r for r in rules if r[1] <= set(group)], classes)[1].sum())
    for spec in FIELDS:
        if spec.name not in read:
            total *= len(spec.box)
    return total


@dataclass
class Component:
    """One axis of the grid: the valid rows of a group of fields the routes read."""

    fields: tuple[str, ...]
    rows: dict[str, np.ndarray]  # field -> value codes (class representatives), one per row
    weight: np.ndarray  # box shapes each row stands for
    rest: dict[
        str, np.ndarray
    ]  # fields only validity reads: one valid value per row, the default where it can be
    classes: dict[str, list[np.ndarray]]  # field -> its value classes (codes)

    @property
    def size(self) -> int:
        return len(self.weight)

    def axis(self) -> Axis:
        """The rows as positions in each field's box, with the positions each one stands for."""
        positions, members = {}, {}
        for f in self.fields:
            box = box_codes(f)
            positions[f] = np.searchsorted(box, self.rows[f])
            members[f] = {
                int(np.searchsorted(box, _representative(f, g))): np.searchsorted(box, g)
                for g in self.classes.get(f) or [np.array([c]) for c in box]
            }
        return Axis(self.fields, positions, members)


def _project(
    group: list[str],
    key_fields: set[str],
    cols: dict[str, np.ndarray],
    weight: np.ndarray,
    classes: dict[str, list[np.ndarray]],
) -> Component:
    """The rows of a component over the fields the routes read; validity-only fields sum into the weight."""
    shown = [f for f in group if f in key_fields]
    rest = [f for f in group if f not in key_fields]
    n = len(weight)
    surprise = (
        sum((cols[f] != default_codes(f, cols)).astype(np.int64) for f in rest)
        if rest
        else np.zeros(n, np.int64)
    )
    key = np.zeros(n, dtype=np.int64)
    for f in shown:
        col = cols[f].astype(np.int64)
        key = key * (int(col.max() - col.min()) + 1) + (col - col.min())
    order = np.lexsort((surprise, key))
    _, first = np.unique(key[order], return_index=True)
    rows = order[first]
    return Component(
        tuple(shown),
        {f: cols[f][rows] for f in shown},
        np.add.reduceat(weight[order], first),
        {f: cols[f][rows] for f in rest},
        {f: classes[f] for f in shown if f in classes},
    )


@dataclass
class Grid:
    """Every shape valid under the rules: the product of the components, times ``factor``."""

    components: list[Component]
    factor: int  # shapes each cell's weight is multiplied by (fields nothing reads, validity-only components)
    env: dict[
        str, Any
    ]  # field -> codes, broadcast along the field's axis; defaults for the fields not laid out
    view: SimpleNamespace  # the same as a Shape-like view for the numpy interpretation

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c.size for c in self.components)

    @property
    def shapes(self) -> int:
        return self.factor * int(np.prod([int(c.weight.sum()) for c in self.components]))

    def evaluate(self, terms: list[Any]) -> list[Any]:
        """z3 terms on the grid.  Each axis is first cut to the distinct rows of the fields the terms
        read (a term over kv alone needs one row per kv class, not per (kv, q) pair), then the values
        are spread back."""
        program = compiled(terms)
        read = frozenset().union(*[program.fields[r] for r in program.roots])
        env, spread = dict(self.env), []
        for i, c in enumerate(self.components):
            fields = [f for f in c.fields if f in read]
            if not fields:
                continue
            key = np.zeros(c.size, dtype=np.int64)
            for f in fields:
                col = c.rows[f].astype(np.int64)
                key = key * (int(col.max() - col.min()) + 1) + (col - col.min())
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            shape = [1] * len(self.components)
            shape[i] = len(first)
            env.update({f: c.rows[f][first].reshape(shape) for f in fields})
            if len(first) < c.size:
                spread.append((i, inverse.ravel()))
        out = []
        for value in program(env):
            for i, inverse in spread:
                if np.ndim(value) and value.shape[i] > 1:
                    value = np.take(value, inverse, axis=i)
            out.append(value)
        return out


def build_grid(key_fields: set[str], rules: list[CompiledRule], classes: dict[str, list[np.ndarray]]) -> Grid:
    """The grid over ``key_fields`` of every shape the rules accept."""
    read = key_fields.union(*[reads for _, reads in rules])
    laid_out, factor = [], 1
    for group in components(read, rules):
        cols, weight = enumerate_valid(group, [r for r in rules if r[1] <= set(group)], classes)
        if key_fields & set(group):
            laid_out.append(_project(group, key_fields, cols, weight, classes))
        else:
            factor *= int(weight.sum())
    for spec in FIELDS:
        if spec.name not in read:
            factor *= len(spec.box)
    env = {spec.name: np.asarray(default_codes(spec.name, {})) for spec in FIELDS}
    for i, c in enumerate(laid_out):
        shape = [1] * len(laid_out)
        shape[i] = c.size
        env.update({f: v.reshape(shape) for f, v in c.rows.items()})
    view = {}
    for spec in FIELDS:
        if spec.name not in key_fields:
            view[spec.name] = decode_value(spec.name, env[spec.name])
        else:
            view[spec.name] = EnumTerm(spec.values, env[spec.name]) if spec.kind == "enum" else env[spec.name]
    return Grid(laid_out, factor, env, SimpleNamespace(**view))
