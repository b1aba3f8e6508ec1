"""Knobs the model does not know (issue 24 item 3): read off the gate code, taken as free inputs.

A pull request that adds an environment knob to the gates must not turn check's results UNKNOWN: the knob's
values that route differently are those the code compares it with (and unset), check proves the file at
each, and names the knob and the values at which something NEW appears.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from spec.realcode.knobs import ENVS, OS, Knob, knobs_of, setting_label, variants
from tests.cli import run

# 0.34.0's use_gluon_decode (L2566-2568): the fp8 guard a knob relaxes below.
FP8_GUARD = (
    "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        mode = _aiter"
)
KNOB = "VLLM_ROCM_AITER_MLA_FP8_GLUON"


def _knobs(code: str) -> dict[str, tuple]:
    return {k.name: (k.via, k.values) for k in knobs_of(ast.parse(code))}


def test_the_values_that_matter_are_unset_and_each_constant_the_code_compares_with():
    code = (
        "import os\n"
        "def f(x):\n"
        '    a = os.environ.get("VLLM_A", "x").lower()\n'
        '    if a in ("on", "yes") or os.getenv("VLLM_B") == "2":\n'
        "        return 1\n"
        '    if int(os.environ["VLLM_C"]) == 3 or envs.VLLM_D is True:\n'
        "        return 2\n"
        '    if os.getenv("VLLM_E") or envs.VLLM_ROCM_AITER_MLA_ASM_PADDING == "asm":\n'
        "        return 3\n"
    )
    assert _knobs(code) == {
        "VLLM_A": (OS, (None, "on", "yes")),
        "VLLM_B": (OS, (None, "2")),
        "VLLM_C": (OS, (None, "3")),  # the environment holds strings: int(...) == 3 is "3"
        "VLLM_D": (ENVS, (None, True)),
        "VLLM_E": (OS, (None, "1")),  # tested for truth only
    }  # the modelled mode knob is the model's, not a free input


def test_each_knob_is_proved_at_each_set_value_the_others_unset():
    knobs = (Knob("VLLM_A", OS, 3, (None, "on", "yes")), Knob("VLLM_B", OS, 4, (None, "2")))
    assert variants(knobs) == [(("VLLM_A", "on"),), (("VLLM_A", "yes"),), (("VLLM_B", "2"),)]
    assert setting_label((("VLLM_B", "2"),)) == "VLLM_B=2"
    assert "taken as a free input (values unset, 'on', 'yes')" in knobs[0].describe()


@pytest.mark.parametrize(
    "use", ['os.system("true")', "os.path.exists('x')", "os", 'getattr(os, "system")("true")']
)
def test_os_beyond_the_environment_is_refused_naming_it(tmp_path, use):
    from spec.realcode.extract import RefusedCode
    from spec.realcode.revision import RealGates
    from spec.realcode.source import Source

    mini = (Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py").read_text()
    anchor = "        mode = _aiter_mla_small_head_mode()\n"  # in use_gluon_decode, which the gates call
    assert mini.count(anchor) == 1
    path = tmp_path / "rocm_aiter_mla.py"
    path.write_text("import os\n" + mini.replace(anchor, f"        {use}\n{anchor}"))
    with pytest.raises(RefusedCode, match="'os'"):
        RealGates(Source(str(path), path, path.read_text()))


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_a_new_knob_that_lets_fp8_reach_gluon_is_violated_when_set_and_named(tmp_path):
    from spec.analyses.mutants import shadow_tree
    from spec.realcode.source import fetch_release

    text = fetch_release("0.34.0").read_text()
    assert text.count(FP8_GUARD) == 1
    edited = text.replace("import functools\n", "import functools\nimport os\n", 1).replace(
        FP8_GUARD,
        FP8_GUARD.replace(
            "if is_quantized_kv_cache(kv_cache_dtype):",
            f'if is_quantized_kv_cache(kv_cache_dtype) and os.environ.get("{KNOB}") != "1":',
        ),
    )
    file = shadow_tree("0.34.0", edited, tmp_path / "tree")
    out = run("check", file, "--invariant", "fp8-never-reaches-gluon", "--format", "json", "--no-execute")
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert not any(r["verdict"] == "UNKNOWN" for r in data["results"])
    (knob,) = data["knobs"]
    assert (knob["name"], knob["values"]) == (KNOB, [None, "1"])
    assert [v["value"] for v in knob["violated_when"]] == ["1"]
    assert knob["violated_when"][0]["invariants"] == ["fp8-never-reaches-gluon"]
    unset = [r for r in data["results"] if r["revision"] == str(file)]
    assert unset and all(r["baseline"]["new"] == 0 for r in unset)  # unset, the file is its release
    text_out = run("check", file, "--invariant", "fp8-never-reaches-gluon", "--no-execute")
    assert f"violated when {KNOB}='1' (fp8-never-reaches-gluon)" in text_out.stdout.replace("\n", "")
    sarif = json.loads(
        run(
            "check", file, "--invariant", "fp8-never-reaches-gluon", "--format", "sarif", "--no-execute"
        ).stdout
    )
    notes = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert any(KNOB in n["message"]["text"] for n in notes)


def test_a_stand_in_for_the_release_s_own_threshold_is_a_warning_in_every_format(tmp_path):
    """A lone file with no baseline tree to read it in cannot have its reorder_batch_threshold executed:
    check says so in one warning line (text, JSON, SARIF), not only in the revision's title."""
    mini = Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py"
    args = (
        "check",
        "--vllm",
        mini,
        "--baseline",
        "none",
        "--no-expect",
        "--no-execute",
        "--invariant",
        "total",
    )
    text = run(*args).stdout
    assert "warning: the reorder_batch_threshold of" in text and "0.28.0's formula" in text
    (line,) = json.loads(run(*args, "--format", "json").stdout)["stand_ins"]
    assert line.startswith(f"the reorder_batch_threshold of {mini} is 0.28.0's formula")
    notes = json.loads(run(*args, "--format", "sarif").stdout)["runs"][0]["invocations"][0][
        "toolExecutionNotifications"
    ]
    assert {"level": "warning", "message": {"text": line}} in notes
