"""Lift real Python predicates into z3 by path exploration.

The real function runs on symbolic values: :class:`SymInt` (a z3 integer),
:class:`SymStr` (an enumeration value over a z3 code) and :class:`SymBool`.
Arithmetic and comparisons build z3 terms; the moment Python needs a concrete
truth value (``if``, ``and``/``or``/``not``, ``max``, ``x in (...)``) the
:class:`Explorer` picks a side, records the condition, and later re-runs the
function down the other side, pruning sides that are infeasible.  The result
is the list of (path condition, return value) pairs, folded into one z3 term
per output.  That term is the real code's meaning over unbounded integers.

Where Python needs a concrete integer (``range(2, n + 1)``, an index) a symbol
takes each value the path allows, one path each, when there are at most
:data:`MAX_CONCRETE`; ``set``/``frozenset`` test membership member by member.
Constructs the symbolic values cannot follow (a symbol with more values used
as an index, hashing a symbol, too many paths) raise
:class:`LiftingUnsupported`; callers fall back to the bounded check and say so.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import z3

from mla_model.logic import EnumTerm, all_of, built_once, is_in

MAX_PATHS = 20_000
MAX_CONCRETE = 64  # the most values a symbolic integer may take where Python needs a concrete one


class LiftingUnsupported(Exception):
    """The real code did something path exploration does not follow."""


_current: list[Explorer] = []


def _decide(cond: Any) -> bool:
    if not _current:
        raise LiftingUnsupported("a symbolic value was branched on outside an exploration")
    return _current[-1].decide(cond)


def term_of(x: Any) -> Any:
    """The z3 term of a symbolic or plain value."""
    if isinstance(x, (SymInt, SymBool)):
        return x.term
    if isinstance(x, SymStr):
        return x.enum.term
    if isinstance(x, bool):
        return z3.BoolVal(x)
    if isinstance(x, int):
        return z3.IntVal(x)
    raise LiftingUnsupported(f"cannot turn {type(x).__name__} {x!r} into a z3 term")


class SymBool:
    __slots__ = ("term",)

    def __init__(self, term: Any) -> None:
        self.term = term

    def __bool__(self) -> bool:
        return _decide(self.term)

    def __invert__(self) -> SymBool:
        return SymBool(z3.Not(self.term))

    def __eq__(self, other: Any) -> Any:
        return SymBool(self.term == term_of(other))

    def __hash__(self) -> int:
        raise LiftingUnsupported("a symbolic boolean was hashed")


def _int_term(x: Any) -> Any:
    if isinstance(x, SymInt):
        return x.term
    if isinstance(x, bool) or not isinstance(x, int):
        raise LiftingUnsupported(f"integer arithmetic with {type(x).__name__}")
    return _int_val(x)


@lru_cache(maxsize=4096)
def _int_val(x: int) -> Any:
    """``z3.IntVal(x)``, built once per constant (the code compares with the same few constants)."""
    return z3.IntVal(x)


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


class SymInt:
    __slots__ = ("term",)

    def __init__(self, term: Any) -> None:
        self.term = term

    def _op(self, other: Any, op: str, reflected: bool = False) -> Any:
        """The z3 term of ``self op other`` (``other op self`` reflected), built once per operands."""
        a, b = self.term, _int_term(other)
        return built_once(op, (a, b), reflected, lambda: _OPS[op](b, a) if reflected else _OPS[op](a, b))

    def _bin(self, other: Any, op: str, reflected: bool = False) -> SymInt:
        return SymInt(self._op(other, op, reflected))

    def __add__(self, o):
        return self._bin(o, "+")

    def __radd__(self, o):
        return self._bin(o, "+", True)

    def __sub__(self, o):
        return self._bin(o, "-")

    def __rsub__(self, o):
        return self._bin(o, "-", True)

    def __mul__(self, o):
        return self._bin(o, "*")

    def __rmul__(self, o):
        return self._bin(o, "*", True)

    def __floordiv__(self, o):
        if not isinstance(o, int) or o <= 0:
            raise LiftingUnsupported("floor division by a symbol or a non-positive constant")
        return SymInt(self.term / o)  # z3 integer division floors for a positive divisor

    def __truediv__(self, o):
        return SymOpaque(f"true division of a symbolic integer by {o!r}")

    def __rtruediv__(self, o):
        return SymOpaque("true division by a symbolic integer")

    def __rfloordiv__(self, o):
        raise LiftingUnsupported("floor division by a symbol")

    def __mod__(self, o):
        if not isinstance(o, int) or o <= 0:
            raise LiftingUnsupported("modulo by a symbol or a non-positive constant")
        return SymInt(self.term % o)

    def __rmod__(self, o):
        if not isinstance(o, int):
            raise LiftingUnsupported("modulo of a non-integer")
        # o % x for x in 1..o is a finite case split; outside it, z3's own (non-linear) mod.
        term = z3.IntVal(o) % self.term
        for d in range(o, 0, -1):
            term = z3.If(self.term == d, z3.IntVal(o % d), term)
        return SymInt(term)

    def __neg__(self):
        return SymInt(-self.term)

    def __lt__(self, o):
        return SymBool(self._op(o, "<"))

    def __le__(self, o):
        return SymBool(self._op(o, "<="))

    def __gt__(self, o):
        return SymBool(self._op(o, ">"))

    def __ge__(self, o):
        return SymBool(self._op(o, ">="))

    def __eq__(self, o):
        if o is None or isinstance(o, str):
            return False
        return SymBool(self._op(o, "=="))

    def __ne__(self, o):
        if o is None or isinstance(o, str):
            return True
        return SymBool(self._op(o, "!="))

    def __bool__(self) -> bool:
        return _decide(self.term != 0)

    def __index__(self) -> int:
        """A concrete value where Python needs one (``range(2, n + 1)``, an index): each value the path
        allows, in turn, where there are at most :data:`MAX_CONCRETE` (:meth:`Explorer.concretize`)."""
        if not _current:
            raise LiftingUnsupported("a symbolic integer was used as an index outside an exploration")
        return _current[-1].concretize(self.term)

    __int__ = __index__

    def __hash__(self) -> int:
        raise LiftingUnsupported("a symbolic integer was hashed")


class SymOpaque:
    """A value the lifting cannot represent (a float ratio for a log message): fine until used."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def _refuse(self, *a: Any) -> Any:
        raise LiftingUnsupported(f"the code branches on or computes with {self.why}")

    __bool__ = __index__ = __int__ = __float__ = __hash__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse


class SymStr:
    """An enumeration string (kv-cache dtype, mode, arch) over a z3 code."""

    __slots__ = ("enum",)

    def __init__(self, enum: EnumTerm) -> None:
        self.enum = enum

    def _is(self, names: Sequence[str]) -> SymBool:
        return SymBool(is_in(self.enum, [n for n in names if n in self.enum.values]))

    def __eq__(self, o):
        return self._is([o]) if isinstance(o, str) else False

    def __ne__(self, o):
        return ~self._is([o]) if isinstance(o, str) else True

    def startswith(self, prefix: str) -> SymBool:
        return self._is([v for v in self.enum.values if v.startswith(prefix)])

    def lower(self) -> SymStr:
        if any(v != v.lower() for v in self.enum.values):
            raise LiftingUnsupported("lower() of an enumeration with upper-case values")
        return self

    def __bool__(self) -> bool:
        if all(self.enum.values):
            return True
        return _decide(self._is([v for v in self.enum.values if v]).term)

    def __hash__(self) -> int:
        raise LiftingUnsupported("a symbolic string was hashed")


def sym_int_builtin(x: Any = 0, *args: Any) -> Any:
    """``int`` inside the sandbox during lifting: symbols pass through unchanged."""
    if isinstance(x, SymInt):
        return x
    if isinstance(x, (SymBool, SymStr)):
        raise LiftingUnsupported(f"int() of a {type(x).__name__}")
    return builtins.int(x, *args)


class LiftedSet:
    """``set``/``frozenset`` inside the sandbox during lifting: membership by equality, element by element
    (``int(max_qo_len) in self._fp8_v_scale_fix_qlens``, 0.34.0 L2187), so a symbolic element decides
    ``x == v`` for each member instead of being hashed.  Its members are hashable values (the code builds
    it from concrete ones); only membership, iteration and ``len`` are offered."""

    __slots__ = ("members",)

    def __init__(self, iterable: Any = ()) -> None:
        self.members = tuple(dict.fromkeys(iterable))

    def __contains__(self, x: Any) -> bool:
        return any(bool(x == v) for v in self.members)

    def __iter__(self) -> Any:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)


LIFTING_BUILTINS = {"int": sym_int_builtin, "set": LiftedSet, "frozenset": LiftedSet}


class Explorer:
    """Depth-first exploration of every feasible path of a function on symbolic inputs.

    Each path runs the function again from the start, down the decisions of an earlier path
    (``forced``) to the one it takes the other side of.  Two things make the replayed decisions cheap:

    * a decision's condition is simplified, tested for a constant and negated once per distinct
      condition (:meth:`_settle`), not once per path that passes it;
    * every decision has a solver scope of its own, holding its condition, and the scopes of the
      decisions a new path shares with the last stay asserted: only the decisions past the shared
      prefix are popped, asserted and asked about;
    * a condition the path has already decided (the code tests it again) takes the same side without
      asking the solver: the path asserts it, so the other side is infeasible.
    """

    def __init__(self, assumptions: Sequence[Any] = ()) -> None:
        self.assumptions = tuple(assumptions)
        self.solver = z3.Solver()
        self.solver.add(*assumptions)
        self.forced: tuple[bool, ...] = ()
        self.trace: list[bool] = []
        self.conds: list[Any] = []
        self.both_feasible: list[bool] = []
        self.asserted: list[bool] = []  # the choices of the decisions whose scopes are on the solver
        self.decided: dict[int, bool] = {}  # this path's choice per condition (its simplified AST's address)
        self._settled: dict[int, tuple[Any, Any, bool | None, Any]] = {}

    def _feasible(self, extra: Any) -> bool:
        """Whether the path so far (asserted on the solver as it is decided) allows ``extra``: one check
        under an assumption, nothing re-asserted."""
        answer = self.solver.check(extra)
        if answer == z3.unknown:
            raise LiftingUnsupported("z3 could not decide a path condition")
        return answer == z3.sat

    def _settle(self, cond: Any) -> tuple[Any, bool | None, Any]:
        """(simplified condition, its constant value or None, its negation), once per condition (by its
        AST's address, which z3 shares between equal terms; the entry keeps the condition alive)."""
        key = cond.ast.value
        hit = self._settled.get(key)
        if hit is None:
            simple = z3.simplify(cond)
            const = True if z3.is_true(simple) else False if z3.is_false(simple) else None
            hit = self._settled[key] = (cond, simple, const, z3.Not(simple))
        return hit[1], hit[2], hit[3]

    def decide(self, cond: Any) -> bool:
        cond, const, negated = self._settle(cond)
        i = len(self.trace)
        known = self.decided.get(cond.ast.value)
        if i < len(self.asserted):  # shared with the last path: decided and asserted already
            choice, both = self.asserted[i], False
        else:
            if const is not None:
                choice, both = const, False
            elif i < len(self.forced):
                choice, both = self.forced[i], False
            elif known is not None:
                choice, both = known, False
            else:
                # The path so far is feasible, so at least one side is: ask the other only when needed.
                can_true = self._feasible(cond)
                can_false = self._feasible(negated) if can_true else True
                choice, both = can_true, (can_true and can_false)
            self.solver.push()
            if const is None and known is None:
                self.solver.add(cond if choice else negated)
            self.asserted.append(choice)
        self.decided[cond.ast.value] = choice
        self.trace.append(choice)
        self.both_feasible.append(both)
        self.conds.append(cond if choice else negated)
        return choice

    def concretize(self, term: Any) -> int:
        """``term``'s value on this path.  The values the path allows are found first, all of them (a set,
        whatever order z3's models come in, so a replayed path asks the same decisions); each but the
        greatest is one decision ``term == v``, in increasing order, and the path forks there.  A term with
        more than :data:`MAX_CONCRETE` values is not followed."""
        # A solver of its own over this path's conditions so far: the shared one may hold the scopes of
        # decisions a replayed path is yet to reach (:meth:`_keep_shared`).
        solver = z3.Solver()
        solver.add(*self.assumptions, *self.conds)
        values: list[int] = []
        while True:
            answer = solver.check()
            if answer == z3.unknown:
                raise LiftingUnsupported("z3 could not enumerate a symbolic integer used as an index")
            if answer == z3.unsat:
                break
            v = solver.model().eval(term, model_completion=True)
            if not z3.is_int_value(v):
                raise LiftingUnsupported("a symbolic integer used as an index has no integer value")
            values.append(v.as_long())
            if len(values) > MAX_CONCRETE:
                raise LiftingUnsupported(
                    f"a symbolic integer with more than {MAX_CONCRETE} values was used as an index"
                )
            solver.add(term != values[-1])
        if not values:
            raise LiftingUnsupported("a symbolic integer used as an index has no value on a feasible path")
        values.sort()
        for v in values[:-1]:
            if self.decide(term == v):
                return v
        return values[-1]

    def _keep_shared(self, forced: tuple[bool, ...]) -> None:
        """Pop the scopes of the decisions past the prefix ``forced`` shares with the asserted ones."""
        shared = 0
        while shared < min(len(forced), len(self.asserted)) and forced[shared] == self.asserted[shared]:
            shared += 1
        if len(self.asserted) > shared:
            self.solver.pop(len(self.asserted) - shared)
            del self.asserted[shared:]

    def explore(self, fn: Callable[[], Any]) -> list[tuple[list[Any], Any]]:
        paths: list[tuple[list[Any], Any]] = []
        pending: list[tuple[bool, ...]] = [()]
        _current.append(self)
        try:
            while pending:
                if len(paths) >= MAX_PATHS:
                    raise LiftingUnsupported(f"more than {MAX_PATHS} paths")
                self.forced, self.trace, self.conds, self.both_feasible = pending.pop(), [], [], []
                self.decided = {}
                self._keep_shared(self.forced)
                try:
                    value = fn()
                except LiftingUnsupported:
                    raise
                except Exception as e:  # the real code raises on this path
                    raise LiftingUnsupported(
                        f"the code raises {type(e).__name__} on a feasible path: {e}"
                    ) from None
                paths.append((PathConditions(self.conds), value))
                for i in range(len(self.forced), len(self.trace)):
                    if self.both_feasible[i]:
                        pending.append(tuple(self.trace[:i]) + (not self.trace[i],))
        finally:
            _current.pop()
            self._keep_shared(())
        return paths


_ITE_REF = {z3.Z3_BOOL_SORT: z3.BoolRef, z3.Z3_INT_SORT: z3.ArithRef}  # the wrapper of an ite of that sort


class PathConditions(list):
    """The conditions a path took, in order, with their conjunction (:attr:`condition`), built once for
    every output folded over the path."""

    @property
    def condition(self) -> Any:
        if not hasattr(self, "_condition"):
            self._condition = all_of(*self)
        return self._condition


def fold(paths: list[tuple[list[Any], Any]], pick: Callable[[Any], Any] = lambda v: v) -> Any:
    """One z3 term from the paths' values: the value of the path whose condition holds (a chain of
    if-then-else over the paths, made through z3's C API: the operands are z3 terms already, so the
    Python layer's coercions are skipped)."""
    terms = [
        (conds.condition if isinstance(conds, PathConditions) else all_of(*conds), term_of(pick(value)))
        for conds, value in paths
    ]
    result = terms[-1][1]
    for cond, value in reversed(terms[:-1]):
        wrap = _ITE_REF.get(value.sort_kind())
        if wrap is not None and value.sort_kind() == result.sort_kind():
            ctx = result.ctx
            result = wrap(z3.Z3_mk_ite(ctx.ref(), cond.as_ast(), value.as_ast(), result.as_ast()), ctx)
        else:
            result = z3.If(cond, value, result)
    return result
