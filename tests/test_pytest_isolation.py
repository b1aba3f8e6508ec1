"""conform and vllm-tests run pytest isolated: no conftest.py, pytest.ini, pyproject.toml, tox.ini or
setup.cfg beside or above the cases file, or in the working folder, is read (the sentinel a conftest.py
would write never appears, and ini files that would break the run do not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import run

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "generated" / "vllm_028" / "cases.jsonl"
BREAKING_INI = "minversion = 99\naddopts = --no-such-option\n"


def _trap(folder: Path, sentinel: Path) -> None:
    """Every file pytest would read from ``folder``: each writes ``sentinel`` or breaks the run."""
    code = f"open({str(sentinel)!r}, 'a').write('{folder.name}\\n')\n"
    (folder / "conftest.py").write_text(code)
    (folder / "__init__.py").write_text(code)
    (folder / "pytest.ini").write_text("[pytest]\n" + BREAKING_INI)
    (folder / "tox.ini").write_text("[pytest]\n" + BREAKING_INI)
    (folder / "setup.cfg").write_text("[tool:pytest]\n" + BREAKING_INI)
    (folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\nminversion = '99'\n")


@pytest.fixture
def trapped(tmp_path):
    sentinel = tmp_path / "SENTINEL"
    above = tmp_path / "above"
    beside = above / "beside"
    beside.mkdir(parents=True)
    for folder in (above, beside):
        _trap(folder, sentinel)
    cases = beside / "cases.jsonl"
    cases.write_text("".join(CASES.read_text().splitlines(keepends=True)[:3]))
    return beside, cases, sentinel


def test_conform_reads_nothing_beside_or_above_the_cases_file(trapped, tmp_path):
    beside, cases, sentinel = trapped
    r = run(
        "conform",
        "--backend",
        "model",
        "--device",
        "cpu",
        "--cases",
        cases,
        "--out",
        tmp_path / "r.jsonl",
        "--format",
        "json",
        cwd=beside,
    )
    assert not sentinel.exists(), sentinel.read_text()
    assert r.returncode == 0, r.stdout + r.stderr
    assert sum(json.loads(r.stdout)["statuses"].values()) == 3


@pytest.mark.network  # 0.28.0's shipped tests
def test_vllm_tests_reads_nothing_in_the_working_folder(trapped):
    beside, _, sentinel = trapped
    r = run("vllm-tests", "--vllm", "0.28.0", "-k", "gluon", "--format", "json", cwd=beside)
    assert not sentinel.exists(), sentinel.read_text()
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert json.loads(r.stdout)["items"] > 0


@pytest.mark.network  # 0.28.0's release file
def test_vllm_shim_reads_nothing_beside_the_module(trapped):
    beside, _, sentinel = trapped
    for init in (beside / "__init__.py", beside.parent / "__init__.py"):  # a package's own code, not config
        init.unlink()
    (beside / "test_plain.py").write_text("def test_runs():\n    pass\n")
    r = subprocess.run(
        [sys.executable, "-m", "conformance.vllm_shim", "--vllm", "0.28.0", "test_plain.py", "-q"],
        capture_output=True,
        text=True,
        cwd=beside,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert not sentinel.exists(), sentinel.read_text()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
