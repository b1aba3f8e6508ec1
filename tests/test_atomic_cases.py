"""``mla-spec cases --out`` replaces its output whole: the old content or the new, never a mix or a half.

The solver is not what is tested here: generation returns the committed cases of tests/generated/ for the
revision asked, so each run is the writing alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.case_modules import slug
from mla_model.case import read_cases
from tests.cli import run

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "tests" / "generated"


@pytest.fixture(autouse=True)
def committed_cases(monkeypatch):
    monkeypatch.setattr(
        "conformance.cli.cases._generate", lambda job: read_cases(GENERATED / slug(job[0]) / "cases.jsonl")
    )


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_exit_2(out: subprocess.CompletedProcess, needle: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert needle in lines[0], lines[0]


def test_a_folder_that_held_another_revision_keeps_no_stale_module(tmp_path):
    """Was: the vllm-0.28 module stayed beside vllm-0.34's cases (77 failures in pytest)."""
    out = tmp_path / "suite"
    assert run("cases", "--revision", "vllm-0.28", "--out", out).returncode == 0
    assert run("cases", "--revision", "vllm-0.34", "--out", out).returncode == 0
    assert sorted(_tree(out)) == ["cases.jsonl", "test_generated_vllm_034.py"]
    assert _tree(out)["cases.jsonl"] == (GENERATED / "vllm_034" / "cases.jsonl").read_bytes()


def test_killed_midway_the_old_folder_stays_whole_and_the_next_run_clears_what_it_left(tmp_path):
    """Was: a cases.jsonl of the new revision beside the old module (or an empty one: '2 skipped', exit 0)."""
    out = tmp_path / "suite"
    assert run("cases", "--revision", "vllm-0.28", "--out", out).returncode == 0
    before = _tree(out)
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "import conformance.case_modules as modules, conformance.cli.cases as cases\n"
        "from mla_model.case import read_cases\n"
        f"generated = Path({str(GENERATED)!r})\n"
        "cases._generate = lambda job: read_cases(generated / modules.slug(job[0]) / 'cases.jsonl')\n"
        "modules.render_suite_module = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed mid-write\n"
        "from conformance.cli import main\n"
        "main(['cases', '--revision', 'vllm-0.34', '--out', sys.argv[1]])\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script, str(out)], cwd=ROOT, capture_output=True, timeout=300
    )
    assert killed.returncode == -9, killed.stderr
    assert _tree(out) == before
    assert run("cases", "--revision", "vllm-0.34", "--out", out).returncode == 0
    assert sorted(_tree(out)) == ["cases.jsonl", "test_generated_vllm_034.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite"]  # no staging folder left beside it


@pytest.mark.parametrize("style", ["suite", "jsonl", "vllm"])
def test_a_symlink_target_is_refused_and_what_it_points_to_untouched(tmp_path, style):
    """Was: the suite written into the link's folder, a file style written through the link."""
    real = tmp_path / ("real" if style == "suite" else "real.txt")
    if style == "suite":
        real.mkdir()
        (real / "cases.jsonl").write_text("")
    else:
        real.write_text("someone's file\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    before = _tree(tmp_path)
    _one_line_exit_2(
        run("cases", "--revision", "vllm-0.28", "--style", style, "--out", link), "is a symbolic link"
    )
    assert _tree(tmp_path) == before


def test_a_folder_holding_files_cases_did_not_write_is_refused_untouched(tmp_path):
    """Replacing the folder whole would delete them; writing into it would mix runs."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.md").write_text("mine\n")
    _one_line_exit_2(run("cases", "--revision", "vllm-0.28", "--out", out), "notes.md")
    assert _tree(out) == {"notes.md": b"mine\n"}


def test_a_file_where_the_folder_belongs_is_refused(tmp_path):
    out = tmp_path / "file"
    out.write_text("x")
    _one_line_exit_2(run("cases", "--revision", "vllm-0.28", "--out", out), "is a file")
    assert out.read_text() == "x" and os.listdir(tmp_path) == ["file"]
