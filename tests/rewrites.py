"""Behaviour-preserving rewrites of a vLLM ``rocm_aiter_mla.py``, made at run time (issue 24 item 2).

A rewrite must leave what the file does unchanged, so check on the rewritten file must say what it says on
the release: the tests hold lifting to finding the gates by what they do, not by what vLLM calls its locals.
Tokens are rewritten in place (``tokenize``), so comments, layout and line numbers stay the release's.
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
