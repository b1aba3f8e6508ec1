"""Behaviour-preserving rewrites of a vLLM ``rocm_aiter_mla.py``, made at run time (issue 24 item 2).

A rewrite must leave what the file does unchanged, so check on the rewritten file must say what it says on
the release: the tests hold lifting to finding the gates by what they do, not by how vLLM spells them.
The rename rewrites tokens in place (``tokenize``), so comments, layout and line numbers stay the
release's; the others rewrite the syntax tree of the routing methods (operands of ``and``/``or`` reversed,
``if`` tests through temporaries or module helpers, early returns as if/else chains, one-line helpers
inlined) and unparse the file.  tests/test_rewrites.py runs each on small methods, old and new, and
requires the same results.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

# The methods that decide a decode step's route (vLLM's names; the builder's __init__ is the class that has
# _build_decode's).
ROUTING_METHODS = frozenset(
    {
        "_build_decode",
        "use_gluon_decode",
        "use_gluon_verify",
        "is_valid_num_heads",
        "get_actual_mla_num_heads",
        "forward_mqa",
    }
)


def _routing_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    out = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = [m for m in cls.body if isinstance(m, ast.FunctionDef)]
        builder = any(m.name == "_build_decode" for m in methods)
        out += [m for m in methods if m.name in ROUTING_METHODS or (builder and m.name == "__init__")]
    return out


def _locals(fn: ast.FunctionDef) -> set[str]:
    """Names ``fn`` binds by assignment (its parameters excluded: callers pass some by keyword)."""
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def rename_locals(text: str, suffix: str = "_rw") -> tuple[str, int]:
    """Every local of the routing methods renamed to ``<name><suffix>``, each within its own method.
    Returns the text and how many names were renamed."""
    spans = [
        (fn.lineno, fn.end_lineno or fn.lineno, _locals(fn)) for fn in _routing_functions(ast.parse(text))
    ]
    renamed = set().union(*(names for _, _, names in spans)) if spans else set()
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    out = []
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        names = next((names for lo, hi, names in spans if lo <= tok.start[0] <= hi), set())
        string = tok.string
        if tok.type == tokenize.NAME and string in names:
            before = next((t for t in reversed(tokens[:i]) if t.type not in _LAYOUT), None)
            after = next((t for t in tokens[i + 1 :] if t.type not in _LAYOUT), None)
            attribute = before is not None and before.string == "."
            keyword = (
                depth > 0
                and after is not None
                and after.string == "="
                and before is not None
                and before.string in "(,"
            )
            if not attribute and not keyword:
                string += suffix
        elif tok.type == tokenize.STRING and names and re.match(r"(?i)[rb]*f", string):
            local = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names))) + r")\b")
            string = re.sub(
                r"\{[^{}]*\}", lambda m, local=local: local.sub(r"\1" + suffix, m.group()), string
            )
        out.append(tok._replace(string=string))
    return tokenize.untokenize(out), len(renamed)


_LAYOUT = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT})


# --- rewrites of the syntax tree (the file is unparsed: comments and layout go, what it does stays) -------


_PREDICATE = re.compile(r"^_?(is|has|use|supports?)_|_supported$")


def _boolean(node: ast.expr) -> bool:
    """Whether an expression's value is a bool whatever it reads (so ``a or b`` is ``b or a``)."""
    if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return True
    if isinstance(node, ast.BoolOp):
        return all(_boolean(v) for v in node.values)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return bool(_PREDICATE.search(name))
    return False


def _guards(node: ast.expr) -> bool:
    """Whether an operand may guard another's evaluation (``x is not None and x.y``, ``isinstance``):
    such operands keep their order."""
    for n in ast.walk(node):
        if isinstance(n, ast.Compare) and any(
            isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in n.ops
        ):
            if any(isinstance(c, ast.Constant) and c.value is None for c in [n.left, *n.comparators]):
                return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("isinstance", "hasattr", "getattr", "len")
        ):
            return True
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id != "self"
            and n.value.id[:1].islower()
        ):
            return True  # an attribute of a local, which an earlier operand may have checked
        if isinstance(n, (ast.Subscript, ast.NamedExpr, ast.Await, ast.Yield)):
            return True
    return False


def swap_operands(text: str) -> tuple[str, int]:
    """Every ``and``/``or`` of the routing methods whose operands are bool-valued and guard nothing, with
    its operands reversed."""
    tree = ast.parse(text)
    count = 0
    for fn in _routing_functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, ast.BoolOp) and _boolean(node) and not any(_guards(v) for v in node.values):
                node.values.reverse()
                count += 1
    return ast.unparse(tree), count


def _if_statements(fn: ast.FunctionDef) -> list[tuple[list[ast.stmt], ast.If]]:
    """Each ``if`` of ``fn`` that is no ``elif``, with the statement list it stands in."""
    elifs = {
        id(n.orelse[0])
        for n in ast.walk(fn)
        if isinstance(n, ast.If) and len(n.orelse) == 1 and isinstance(n.orelse[0], ast.If)
    }
    out = []
    for node in ast.walk(fn):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                out += [(block, s) for s in block if isinstance(s, ast.If) and id(s) not in elifs]
    return out


def introduce_temporaries(text: str) -> tuple[str, int]:
    """Every ``if`` test of the routing methods (not an ``elif``'s) computed into a temporary first."""
    tree = ast.parse(text)
    count = 0
    for fn in _routing_functions(tree):
        for block, stmt in _if_statements(fn):
            name = f"cond_rw{count}"
            block.insert(block.index(stmt), ast.Assign([ast.Name(name, ast.Store())], stmt.test, lineno=0))
            stmt.test = ast.Name(name, ast.Load())
            count += 1
    return ast.unparse(ast.fix_missing_locations(tree)), count


def _bound(fn: ast.FunctionDef) -> set[str]:
    args = fn.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return params | _locals(fn)


def extract_helpers(text: str) -> tuple[str, int]:
    """Every ``if`` test of the routing methods (not an ``elif``'s) moved into a module function of the
    method's locals it reads, called in its place."""
    tree = ast.parse(text)
    helpers: list[ast.stmt] = []
    for fn in _routing_functions(tree):
        bound = _bound(fn)
        for _, stmt in _if_statements(fn):
            inner = {
                n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            reads = sorted({n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)} & bound - inner)
            name = f"_rw_test_{len(helpers)}"
            body = ast.Return(stmt.test)
            helpers.append(
                ast.FunctionDef(
                    name,
                    ast.arguments([], [ast.arg(r) for r in reads], None, [], [], None, []),
                    [body],
                    [],
                    None,
                    lineno=0,
                )
            )
            stmt.test = ast.Call(ast.Name(name, ast.Load()), [ast.Name(r, ast.Load()) for r in reads], [])
    tree.body.extend(helpers)
    return ast.unparse(ast.fix_missing_locations(tree)), len(helpers)


def _returns(block: list[ast.stmt]) -> bool:
    """Whether a statement list always leaves its function (ends in return or raise, or in an if whose
    every branch does)."""
    if not block:
        return False
    last = block[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _returns(last.body) and _returns(last.orelse)


def if_chains(text: str) -> tuple[str, int]:
    """Every early return of the routing methods turned into an if/else chain: ``if a: return x`` followed
    by ``S`` becomes ``if a: return x`` ``else: S`` (the releases write early returns; this is the other
    spelling of the same chain)."""
    tree = ast.parse(text)
    count = 0

    def chain(block: list[ast.stmt]) -> list[ast.stmt]:
        nonlocal count
        for stmt in block:
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(stmt, field, chain(inner))
        for i, stmt in enumerate(block[:-1]):
            if isinstance(stmt, ast.If) and not stmt.orelse and _returns(stmt.body):
                stmt.orelse = chain(block[i + 1 :])
                count += 1
                return block[: i + 1]
        return block

    for fn in _routing_functions(tree):
        fn.body = chain(fn.body)
    return ast.unparse(tree), count


def _single_return(fn: ast.FunctionDef) -> ast.expr | None:
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) else fn.body
    args = fn.args
    simple = not (args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults)
    if simple and len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: dict[str, ast.expr]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.values.get(node.id, node)


def inline_helpers(text: str) -> tuple[str, int]:
    """Every call, in the routing methods, of a module function whose body is one ``return`` (and whose
    arguments are names or constants, so nothing is evaluated twice) replaced by that expression."""
    import copy

    tree = ast.parse(text)
    helpers = {
        fn.name: (fn, expr)
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef)
        and not fn.decorator_list
        and (expr := _single_return(fn)) is not None
    }
    count = 0

    class Inline(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.expr:
            self.generic_visit(node)
            if not (isinstance(node.func, ast.Name) and node.func.id in helpers):
                return node
            fn, expr = helpers[node.func.id]
            params = [a.arg for a in fn.args.args]
            given = dict(zip(params, node.args)) | {k.arg: k.value for k in node.keywords if k.arg}
            if set(given) != set(params) or not all(
                isinstance(v, (ast.Name, ast.Constant)) for v in given.values()
            ):
                return node
            nonlocal count
            count += 1
            return _Substitute(given).visit(copy.deepcopy(expr))

    for fn in _routing_functions(tree):
        Inline().visit(fn)
    return ast.unparse(tree), count


# Applied in this order by :func:`all_rewrites` (helpers inlined first: the extracted ones must stay).
REWRITES = {
    "inline-helpers": inline_helpers,
    "swap-operands": swap_operands,
    "temporaries": introduce_temporaries,
    "if-chains": if_chains,
    "extract-helpers": extract_helpers,
}


def all_rewrites(text: str) -> tuple[str, dict[str, int]]:
    """Every rewrite of REWRITES in turn, then every local renamed: the text and how many places each
    rewrote."""
    counts = {}
    for name, rewrite in REWRITES.items():
        text, counts[name] = rewrite(text)
    text, counts["rename-locals"] = rename_locals(text)
    return text, counts
