"""Escape attempts on the AST path: a gate file from a pull request runs nothing (issue 23, item 1).

Each attempt is written at run time into a copy of tests/data/mini_rocm_aiter_mla.py (a gate body, a helper
the gates reach, module level, a default argument, a decorator or a class body).  Run by Python with real
builtins, each would create a sentinel file; under ``check --vllm FILE``, ``check FILE`` and ``diff OLD NEW``
the sentinel must never exist, the exit status is 2 or 3, and the output names the refused construct in one
line, with no traceback.  The frame walk through a generator is the one issue 23 showed running
``os.system`` during those three commands.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import run

MINI = Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py"
GATE = "    def use_gluon_decode(num_heads: int, max_qo_len: int, kv_cache_dtype: str) -> bool:\n"
HELPER = "def _aiter_mla_small_head_mode() -> str:\n"
CLASS = "    PS_QLEN = 4\n"
# The frame walk, word for word but for the command it runs.
FRAME_WALK = """_box=[]
def _g(): yield _box[0].gi_frame.f_back
_box.append(_g())
for _f in _box[0]: break
while _f is not None and 'builtins' not in _f.f_globals: _f=_f.f_back
_b=_f.f_globals["builtins"]; _b.getattr(_b,"__import__")("os").system("touch {S}")
"""
GEN = "(x for x in [0])"
BUILTINS_OF_GEN = f'getattr({GEN}, "gi_frame").f_globals["__builtins__"]'

# (name, where, code, what the one line names); where: gate body, helper body, module (the gate calls
# or reads _ESCAPE), default (argument of the helper), decorator (of the helper), class (AiterMLAHelper body)
ATTEMPTS = [
    ("frame-walk-in-gate", "gate", FRAME_WALK, "a nested definition (_g inside use_gluon_decode)"),
    (
        "frame-walk-via-module-generator",
        "module",
        "_box = []\ndef _g():\n    yield _box[0].gi_frame.f_back\n"
        + "def _ESCAPE():\n"
        + "".join("    " + line + "\n" for line in FRAME_WALK.splitlines()[2:]),
        "yield",
    ),
    (
        "generator-frame-by-getattr",
        "gate",
        f"{BUILTINS_OF_GEN}['open']('{{S}}', 'w')",
        "'gi_frame' of a generator",
    ),
    (
        "coroutine-frame",
        "module",
        "async def _ESCAPE():\n    pass\n\n\n"
        "_ESCAPE().cr_frame.f_globals['__builtins__']['open']('{S}', 'w')\n",
        "async def",
    ),
    (
        "traceback-dunder",
        "gate",
        "try:\n    1 / 0\nexcept Exception as e:\n"
        "    e.__traceback__.tb_frame.f_globals['__builtins__']['open']('{S}', 'w')\n",
        "'__traceback__'",
    ),
    (
        "traceback-computed-name",
        "gate",
        "try:\n    1 / 0\nexcept Exception as e:\n"
        "    t = getattr(e, '_' * 2 + 'traceback' + '_' * 2)\n"
        "    t.tb_frame.f_globals['__builtins__']['open']('{S}', 'w')\n",
        "getattr with a computed or private attribute name",
    ),
    (
        "traceback-by-sys",
        "gate",
        "import sys\nsys.exc_info()[2].tb_frame.f_builtins['open']('{S}', 'w')\n",
        "'sys'",
    ),
    (
        "attribute-walk-by-strings",
        "helper",
        "f = getattr(logger, 'warning_once')\n"
        "getattr(getattr(f, 'im' + '_self'), 'f' + '_globals')['__builtins__']['open']('{S}', 'w')",
        "getattr with a computed or private attribute name",
    ),
    (
        "format-field-access",
        "gate",
        "'{{0.__init__.__globals__[__builtins__][open]}}'.format(logger)('{S}', 'w')\n",
        "str.format",
    ),
    (
        "format-map-field-access",
        "gate",
        "'{{x.__init__.__globals__}}'.format_map({{'x': logger}})['__builtins__']['open']('{S}', 'w')\n",
        "str.format_map",
    ),
    (
        "format-spec-width",
        "gate",
        "f'{{kv_cache_dtype:>{{1 << 40}}}}'\n",
        "format with a width past",
    ),
    (
        "decorator-runs-code",
        "decorator",
        "_deco",
        "the decorator @_deco",
    ),
    ("default-argument", "default", f"{BUILTINS_OF_GEN}['open']('{{S}}', 'w')", "'gi_frame' of a generator"),
    (
        "class-body-statement",
        "class",
        "for _i in (0,):\n    _W = " + BUILTINS_OF_GEN + "['open']('{S}', 'w')\n",
        "a For statement in the body of class AiterMLAHelper",
    ),
    (
        "class-body-expression",
        "class",
        f"_W = {BUILTINS_OF_GEN}['open']('{{S}}', 'w')\n",
        "'gi_frame' of a generator",
    ),
    ("globals", "gate", "globals()['__builtins__']['open']('{S}', 'w')\n", "'globals'"),
    ("vars", "gate", "vars(logger)['__builtins__']['open']('{S}', 'w')\n", "'vars'"),
    (
        "lambda",
        "gate",
        f"(lambda g: g.gi_frame.f_globals['__builtins__']['open']('{{S}}', 'w'))({GEN})\n",
        "a lambda",
    ),
    (
        "walrus",
        "gate",
        f"if (g := {GEN}):\n    getattr(g, 'gi_frame').f_globals['__builtins__']['open']('{{S}}', 'w')\n",
        "an assignment expression (:=)",
    ),
    (
        "match",
        "gate",
        f"match kv_cache_dtype:\n    case _:\n        {BUILTINS_OF_GEN}['open']('{{S}}', 'w')\n",
        "a match statement",
    ),
    ("star-import-in-gate", "gate", "from vllm.envs import *\n", "a star import"),
    ("star-import-of-os", "module", "from os import *\n_ESCAPE = system\n", "'system'"),
    ("huge-string-literal", "gate", "_s = '" + "A" * 20_000 + "'\n", "a literal of 20000 characters"),
    ("huge-display", "gate", "_l = [" + "0, " * 2_000 + "]\n", "a display of 2000 items"),
    ("huge-repetition", "gate", "_s = 'A' * (1 << 40)\n", "repeat a str"),
    ("huge-power", "gate", "_n = 10 ** 10 ** 8\n", "a number past 65536 bits"),
    ("module-level-constant", "module", "_ESCAPE = __import__('os').system('touch {S}')\n", "'__import__'"),
    (
        "type-trick",
        "gate",
        f"type(kv_cache_dtype).mro()\n{BUILTINS_OF_GEN}['open']('{{S}}', 'w')\n",
        "'type'",
    ),
    ("builtins-name", "gate", "__builtins__['open']('{S}', 'w')\n", "'__builtins__'"),
    (
        "builtins-by-getattr",
        "gate",
        "getattr(logger, '__builtins__')['open']('{S}', 'w')\n",
        "getattr with a computed",
    ),
    (
        "operator-attrgetter",
        "gate",
        f"import operator\nf = operator.attrgetter('gi_frame')({GEN})\n"
        "f.f_globals['__builtins__']['open']('{S}', 'w')\n",
        "'operator'",
    ),
    (
        "stub-module-walk",
        "helper",
        "import functools as ft\nft.update_wrapper.__globals__['__builtins__']['open']('{S}', 'w')\n",
        "'__globals__'",
    ),
    (
        "stub-module-public-walk",
        "gate",
        "functools.reduce\n",
        "reading attribute 'reduce' of module functools",
    ),
    ("eval", "gate", "eval(\"open('{S}', 'w')\")\n", "'eval'"),
    ("global-declaration", "gate", "global _box\n", "global"),
    (
        "enum-with-method",
        "module",
        "class _E(Enum):\n    A = 1\n    def leak(self):\n        return "
        + BUILTINS_OF_GEN
        + "\n_ESCAPE = _E.A\n",
        "a method in enum _E",
    ),
]


def _indent(code: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in code.splitlines())


def attack(where: str, code: str, sentinel: Path) -> str:
    """The mini gate file with ``code`` (its ``{S}`` the sentinel's path) injected ``where``."""
    text, code = MINI.read_text(), code.replace("{S}", str(sentinel)).replace("{{", "{").replace("}}", "}")
    if where == "gate":
        return text.replace(GATE, GATE + _indent(code, 8))
    if where == "helper":
        return text.replace(HELPER, HELPER + _indent(code, 4))
    if where == "class":
        return text.replace(CLASS, CLASS + _indent(code, 4))
    if where == "default":
        return text.replace(HELPER, HELPER.replace("()", f"(_d={code})"))
    if where == "decorator":
        deco = f"def _deco(f):\n    {BUILTINS_OF_GEN}['open']('{sentinel}', 'w')\n    return f\n\n\n"
        return text.replace(HELPER, f"{deco}@{code}\n{HELPER}")
    assert where == "module"
    top = text.index("@functools.lru_cache")
    gate = text.replace(GATE, GATE + "        _ESCAPE\n")
    return gate[:top] + code + "\n\n" + gate[top:]


COMMANDS = {
    "check --vllm FILE": lambda f, clean: (
        "check",
        "--vllm",
        f,
        "--registry",
        "aiter-0.1.20",
        "--invariant",
        "total",
    ),
    "check FILE": lambda f, clean: ("check", f, "--registry", "aiter-0.1.20", "--invariant", "total"),
    "diff OLD NEW": lambda f, clean: ("diff", clean, f),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Every attempt's file (written once for the three commands) and a clean copy for diff's OLD."""
    root = tmp_path_factory.mktemp("escape")
    clean = root / "clean_rocm_aiter_mla.py"
    clean.write_text(MINI.read_text())
    files = {}
    for name, where, code, _ in ATTEMPTS:
        sentinel = root / f"{name}.pwned"
        path = root / f"{name}.py"
        path.write_text(attack(where, code, sentinel))
        files[name] = (path, sentinel)
    return root, clean, files


def test_the_corpus_is_large_and_every_attempt_is_injected():
    assert len(ATTEMPTS) >= 25 and len({a[0] for a in ATTEMPTS}) == len(ATTEMPTS)
    for name, where, code, _ in ATTEMPTS:
        assert attack(where, code, Path("/s")) != MINI.read_text(), name


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name, needle", [(a[0], a[3]) for a in ATTEMPTS], ids=[a[0] for a in ATTEMPTS])
def test_escape_attempt_runs_nothing_and_is_refused_in_one_line(corpus, command, name, needle):
    root, clean, files = corpus
    path, sentinel = files[name]
    out = run(*COMMANDS[command](path, clean), cwd=root)
    assert not sentinel.exists(), f"{name}: the input ran under {command}"
    assert out.returncode in (2, 3), (out.returncode, out.stdout, out.stderr)
    text = out.stdout + out.stderr
    assert "Traceback" not in text
    if out.returncode == 2:
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert needle in " ".join(text.split()), text


def test_module_level_code_never_runs_and_the_file_is_still_checked(tmp_path):
    sentinel = tmp_path / "module.pwned"
    path = tmp_path / "rocm_aiter_mla.py"
    path.write_text(MINI.read_text() + f"\nimport os\nos.system('touch {sentinel}')\n")
    for args in (("check", "--vllm", path), ("check", path), ("diff", MINI, path)):
        out = run(
            *args, "--registry", "aiter-0.1.20", *(("--invariant", "total") if args[0] == "check" else ())
        )
        assert not sentinel.exists()
        assert out.returncode in (0, 1) and "Traceback" not in out.stdout + out.stderr, out.stderr


def test_a_gate_cannot_catch_the_deadline_or_outlast_it_in_finally(tmp_path):
    """The deadline's stop passes through the input's ``except Exception`` and ``finally`` (a gate that
    swallowed it would loop for ever: the timer fires once)."""
    path = tmp_path / "rocm_aiter_mla.py"
    body = (
        "while True:\n    try:\n        while True:\n            pass\n    except Exception:\n        pass\n"
    )
    path.write_text(MINI.read_text().replace(GATE, GATE + _indent(body, 8)))
    done = subprocess.run(
        [sys.executable, "-c", "from conformance.cli import main; main()", "check", "--vllm", str(path)]
        + ["--registry", "aiter-0.1.20"]
        + ["--invariant", "total", "--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 3 and "ran past the 1 s limit" in " ".join(done.stdout.split()), done.stdout


ARG_UTILS = """
class EngineArgs:
    @classmethod
    def get_batch_defaults(cls, world_size):
{body}        device_memory = current_platform.get_device_total_memory()
        name = current_platform.get_device_name().lower()
        tokens = {{UsageContext.OPENAI_API_SERVER: 8192}}
        seqs = {{UsageContext.OPENAI_API_SERVER: 1024 if device_memory >= 160 * GiB_bytes else 256}}
        return (tokens, seqs)
"""


@pytest.mark.parametrize(
    "body, needle",
    [
        ("", None),
        (_indent(FRAME_WALK, 8), "a nested definition (_g inside get_batch_defaults)"),
        (_indent(f"{BUILTINS_OF_GEN}['open']('{{S}}', 'w')", 8), "'gi_frame' of a generator"),
        (_indent("current_platform.gpu.memory = 0", 8), "'gpu' of a _Platform"),
    ],
    ids=["plain", "frame-walk", "generator-frame", "platform-internals"],
)
def test_vllms_batch_defaults_beside_the_file_are_interpreted_too(tmp_path, body, needle):
    """memory's default max_num_seqs reads EngineArgs.get_batch_defaults from the vLLM tree beside the file:
    the same interpreter evaluates it, and an escape there is refused in one line."""
    from spec.analyses.memory import ARG_UTILS as RELATIVE
    from spec.analyses.memory import tree_default_max_num_seqs
    from spec.realcode.source import SourceError

    sentinel = tmp_path / "pwned"
    (tmp_path / RELATIVE).parent.mkdir(parents=True)
    (tmp_path / RELATIVE).write_text(ARG_UTILS.format(body=body.replace("{S}", str(sentinel))))
    if needle is None:
        assert tree_default_max_num_seqs(tmp_path, "gfx950") == 1024
        assert tree_default_max_num_seqs(tmp_path, "gfx942") == 1024
        return
    with pytest.raises(SourceError) as refused:
        tree_default_max_num_seqs(tmp_path, "gfx950")
    assert not sentinel.exists()
    assert needle in str(refused.value) and len(str(refused.value).splitlines()) == 1
