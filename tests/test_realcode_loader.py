"""The real-code loader on files written for the tests: binding, lifting, refusal, bad input.

No network: tests/data/mini_rocm_aiter_mla.py has the shape of vLLM's file and
routes like the vllm-0.28 model revision; the crafted files below try to run
code at import time or escape the sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import PROVED, check
from spec.realcode.bind import bind
from spec.realcode.extract import RefusedCode, extract
from spec.realcode.revision import RealGates, real_revision
from spec.realcode.sandbox import LoadedCode
from spec.realcode.source import Source, resolve
from tests.cli import run

MINI = Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py"


def test_mini_file_loads_without_running_module_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    gates = RealGates(resolve(str(MINI)))
    assert not (tmp_path / "mini_rocm_aiter_mla.ran").exists()
    assert gates.code.call("use_gluon_decode", num_heads=8, max_qo_len=1, kv_cache_dtype="auto") is True
    assert gates.code.call("use_gluon_decode", num_heads=8, max_qo_len=1, kv_cache_dtype="fp8_e4m3") is False


def test_stale_lru_cache_never_leaks_between_arches():
    code = LoadedCode(extract(resolve(str(MINI))))
    code.platform.arch = "gfx950"
    assert code.call("use_gluon_decode", num_heads=8, max_qo_len=1, kv_cache_dtype="auto")
    code.platform.arch = "gfx942"
    assert not code.call("use_gluon_decode", num_heads=8, max_qo_len=1, kv_cache_dtype="auto")


def test_mini_file_is_equivalent_to_the_0_28_model_symbolically_and_bounded():
    bound = bind(str(MINI), "vllm-0.28")
    model, rows = bound.model_id, bound.rows
    assert model == "vllm-0.28"
    assert {r.function: r.verdict for r in rows if r.method == "symbolic"} == {
        name: "EQUIVALENT"
        for name in (
            "validity",
            "path",
            "use_gluon_decode",
            "use_gluon_verify",
            "use_persistent_metadata",
            "wants_persistent_metadata",
            "mtp_decode_qlen",
            "decode_heads",
            "dcp_route",
        )
    }
    bounded = {r.function: r for r in rows if r.method == "bounded"}
    assert (
        bounded["use_gluon_decode"].verdict == "EQUIVALENT" and bounded["use_gluon_decode"].checked == 294912
    )


def test_bind_reports_the_first_differing_shape_against_the_wrong_model():
    rows = bind(str(MINI), "vllm-0.27").rows
    decode = next(r for r in rows if r.method == "symbolic" and r.function == "use_gluon_decode")
    assert decode.verdict == "DIFFERENT"
    d = decode.differences[0]
    assert d["real"] != d["model"] and d["shape"]["num_heads"] < 16 and d["shape"]["max_qo_len"] == 1


def test_invariants_proved_on_the_lifted_mini_file():
    rev = real_revision(str(MINI))
    for inv in ("fp8-never-reaches-gluon", "metadata-covers-qlen", "block-n-key-exists"):
        assert check(rev, "aiter-0.1.19", INVARIANT_BY_ID[inv]).verdict == PROVED


CRAFTED = """
import os
open("{marker}", "w").write("module level ran")

class AiterMLAHelper:
    @staticmethod
    def use_gluon_decode(num_heads, max_qo_len, kv_cache_dtype):
        {body}
        return False

class B:
    def __init__(self, vllm_config):
        self._mtp_decode_qlen = 1
    def _build_decode(self, max_qo_len):
        use_persistent_metadata = max_qo_len <= self._mtp_decode_qlen
        if use_persistent_metadata:
            get_mla_metadata_v1()

class I:
    def forward_mqa(self):
        if self.num_heads < 16 and decode.max_qo_len > 1:
            mla_gluon()
"""


@pytest.mark.parametrize(
    "body, refused",
    [
        ('os.system("touch {marker}.system")', "'os'"),
        ('__import__("os").system("touch {marker}.system")', "'__import__'"),
        ("import subprocess", "'subprocess'"),
        ("().__class__.__bases__[0].__subclasses__()", "'__subclasses__'"),
        ('eval("1")', "'eval'"),
    ],
)
def test_crafted_file_runs_nothing_and_names_the_refused_call(tmp_path, body, refused):
    marker = tmp_path / "written"
    path = tmp_path / "rocm_aiter_mla.py"
    path.write_text(CRAFTED.format(marker=marker, body=body.format(marker=marker)))
    with pytest.raises(RefusedCode, match=refused):
        RealGates(Source(str(path), path, path.read_text()))
    assert not marker.exists() and not Path(f"{marker}.system").exists()


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda d: d / "missing.py", "no such file, directory or vLLM release"),
        (lambda d: (d / "broken.py").write_text("def (:\n") and d / "broken.py", "syntax error at line 1"),
        (lambda d: (d / "other.py").write_text("x = 1\n") and d / "other.py", "no class AiterMLAHelper"),
        (lambda d: d, "no vllm/v1/attention/backends/mla/rocm_aiter_mla.py in this directory"),
    ],
)
def test_bad_real_code_input_is_one_line_exit_2(tmp_path, make, needle):
    target = make(tmp_path)
    for cmd in (["check", "--vllm", str(target)], ["bind", "--vllm", str(target)], ["audit", str(target)]):
        out = run(*cmd)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2, (cmd, out.stderr)
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_vllm_tree_and_installed_package_layouts_resolve(tmp_path):
    for root in (tmp_path / "tree", tmp_path / "site" / "vllm"):
        rel = Path("v1/attention/backends/mla/rocm_aiter_mla.py")
        target = (root / "vllm" / rel) if root.name == "tree" else (root / rel)
        target.parent.mkdir(parents=True)
        target.write_text(MINI.read_text())
        assert resolve(str(root)).path == target


def test_loaded_gates_are_interpreted_never_python_functions():
    """Nothing of the file becomes a Python function, code object or frame: the interpreter's own objects."""
    import types

    from spec.realcode import interpreter

    code = LoadedCode(extract(resolve(str(MINI))))
    taken = {
        "AiterMLAHelper",
        "_gluon_mla_decode_supported",
        "_aiter_mla_small_head_mode",
        "mla_spec_builder_init",
    }
    assert taken <= set(code.namespace)
    for name in taken:
        assert isinstance(
            code.namespace[name], (interpreter.Class, interpreter.Function, interpreter.Memo)
        ), name
    python_code = [
        v
        for v in code.namespace.values()
        if isinstance(v, types.FunctionType) and str(MINI) in v.__code__.co_filename
    ]
    assert not python_code and not isinstance(code.helper.use_gluon_decode, types.FunctionType)


# Written for this test (trusted): each function's value, run by Python and by the interpreter, must agree.
SEMANTICS = """
class Route(Enum):
    PLAIN = "plain"
    CPRR = "cprr"

LIMIT = 1 << 4
CALLS = []

@functools.lru_cache(maxsize=1)
def memo(x):
    CALLS.append(x)
    return x * 2

def chained(a, b, c):
    return (a < b < c, a < b > c, 0 <= a <= b, a == b == c, a is not None is not False)

def operands(a, b):
    return (a and b, a or b, not a, a if b else "no", (a or None) is None)

def params(a, b=LIMIT, *rest, c, d=3, **more):
    return (a, b, rest, c, d, sorted(more.items()))

def loops(n):
    out, i = [], 0
    while i < n:
        i += 1
        if i == 2:
            continue
        if i == 5:
            break
        out.append(i)
    else:
        out.append("no break")
    for j in range(3):
        pass
    else:
        out.append(j)
    return out

def handled(kind):
    log = []
    try:
        try:
            if kind == 1:
                raise ValueError("v")
            if kind == 2:
                raise KeyError("k")
            log.append("body")
        except ValueError as e:
            log.append(("caught", e.args))
        else:
            log.append("else")
        finally:
            log.append("finally")
    except KeyError:
        log.append("outer")
    return log

def displays(n):
    heads = [h for h in (16, 32, 64) if h >= n]
    pairs = {h: h // 16 for h in heads}
    first = [h for h in heads if h > 16][:1] if heads else -1
    return (heads, pairs, {h % 3 for h in heads}, first, any(h > 60 for h in heads), f"{n!r}:{n:>4}|{LIMIT}")

def enums(v):
    r = Route.CPRR if v > 2 else Route.PLAIN
    return (r is Route.CPRR, r in (Route.CPRR,), r.value, r.name, [m.value for m in Route])

def arithmetic(a, b):
    return (a + b, a - b, a * b, a // b, a % b, -a, a ** 2, 1 << b, a / b, a | b, a & b, ~a, max(a, b))

def memoised(x):
    return (memo(x), memo(x), memo(x + 1), len(CALLS))

def asserting(x):
    assert x > 0, "positive"
    return x
"""


@pytest.mark.parametrize(
    "call",
    [
        "chained(1, 2, 3)",
        "chained(3, 2, 1)",
        "chained(2, 2, 2)",
        "operands(0, 5)",
        "operands(3, '')",
        "params(1, c=2)",
        "params(1, 2, 3, 4, c=5, d=6, e=7)",
        "loops(9)",
        "loops(1)",
        "handled(0)",
        "handled(1)",
        "handled(2)",
        "displays(20)",
        "displays(100)",
        "enums(3)",
        "enums(1)",
        "arithmetic(7, 3)",
        "arithmetic(-7, 2)",
        "memoised(4)",
        "asserting(2)",
    ],
)
def test_the_interpreter_computes_what_python_computes(call):
    import ast
    import enum
    import functools

    from spec.realcode import interpreter

    python: dict = {"Enum": enum.Enum, "functools": functools}
    exec(compile(SEMANTICS, "<trusted test text>", "exec"), python)  # noqa: S102 - our own text
    ours = interpreter.Module(ast.parse(SEMANTICS), "semantics", {"functools": functools}, None).namespace
    fn, args = call.split("(", 1)
    expected = eval(f"f({args}", {"f": python[fn]})  # noqa: S307 - our own text
    assert eval(f"f({args}", {"f": ours[fn]}) == expected  # noqa: S307
