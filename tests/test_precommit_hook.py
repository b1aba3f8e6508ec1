"""The CI proof step a vLLM checkout adopts (issue 15 item 7, docs/how-to/adopt-in-a-vllm-checkout.md): the
pre-commit hook (.pre-commit-hooks.yaml) run through ``pre-commit try-repo`` on this repository, and the
GitHub Action (action.yml).

try-repo clones this repository (with its uncommitted changes to tracked files, and staged files, in a
shadow repository) and pip-installs it into a virtualenv for the hook (z3-solver, numpy, matplotlib, ...;
no torch), then runs the hook in a small git tree that holds vLLM's ``rocm_aiter_mla.py``. It builds that
environment in a throwaway store of its own on every call (pre-commit's ``try_repo`` makes
``Store(tempdir)`` and does not use PRE_COMMIT_HOME for it), so each try-repo test pays one build: about
14 s with pip's cache warm, 38 s cold, on the 2-core CI machine, plus about 9 s for the check itself.
PRE_COMMIT_HOME still points at a directory of the test session, so pre-commit's own store stays out of
``~/.cache/pre-commit``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spec.realcode.source import RELATIVE_PATH

ROOT = Path(__file__).resolve().parents[1]
HOWTO = ROOT / "docs" / "how-to" / "adopt-in-a-vllm-checkout.md"
RELEASE = "0.34.0"
# 0.34.0's fp8 test in use_gluon_decode negated: an fp8 cache reaches Gluon (fp8-never-reaches-gluon, and
# gluon-fp8-batch-one with aiter-0.1.19, get classes 0.34.0, the file's baseline, does not have).
MUTANT = "use_gluon_decode/negate/L2571.11"
HOOK_ID = "mla-spec-check"
# The how-to's failure block: the hook's output recorded from a run, and checked against a fresh one.
RECORDED = re.compile(r"<!-- hook-output[^>]*-->\n```text\n(.*?)```\n<!-- /hook-output -->", re.S)
# git variables that would point the temporary tree's git (or try-repo's clone) somewhere else.
GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


@pytest.fixture(scope="session")
def pre_commit_env(tmp_path_factory):
    """The environment try-repo runs in: a session PRE_COMMIT_HOME, 80 columns, no colour."""
    if importlib.util.find_spec("pre_commit") is None:
        pytest.skip("pre-commit is not installed (it is in the test extra: pip install -e '.[test]')")
    if shutil.which("git") is None:
        pytest.skip("git is not installed: pre-commit needs it")
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: try-repo clones the repository")
    env = {k: v for k, v in os.environ.items() if k not in GIT_REDIRECTS}
    env.update(
        PRE_COMMIT_HOME=str(tmp_path_factory.mktemp("pre-commit-home")),
        COLUMNS="80",
        NO_COLOR="1",
        TERM="dumb",
    )
    return env


@pytest.fixture(scope="session")
def gate_texts():
    """0.34.0's rocm_aiter_mla.py (from the sdist, cached in ~/.cache/mla-spec) and its mutant."""
    from spec.analyses.mutants import release_mutants

    text, mutants = release_mutants(RELEASE)
    by_id = {m.id: m for m in mutants}
    assert MUTANT in by_id, f"no mutant {MUTANT} of {RELEASE}: its fp8 test in use_gluon_decode moved?"
    return {"release": text, "mutant": by_id[MUTANT].apply(text.encode())}


def try_repo(tree: Path, gate: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``pre-commit try-repo ROOT mla-spec-check --files rocm_aiter_mla.py`` in a fresh git tree that
    holds ``gate`` at vLLM's path."""
    path = tree / RELATIVE_PATH
    path.parent.mkdir(parents=True)
    path.write_text(gate)
    for args in (("init", "-q"), ("add", str(RELATIVE_PATH))):
        subprocess.run(["git", *args], cwd=tree, env=env, check=True, capture_output=True)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", "--color=never", str(ROOT), HOOK_ID]
        + ["--files", str(RELATIVE_PATH)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def hook_output(stdout: str) -> str:
    """What pre-commit prints from the hook's line on (before it: the try-repo config, install notes)."""
    start = stdout.index("mla-spec check (")
    return "\n".join(line.rstrip() for line in stdout[start:].rstrip().splitlines())


@pytest.mark.network
@pytest.mark.slow
def test_try_repo_passes_the_release_file_unchanged(tmp_path, pre_commit_env, gate_texts):
    r = try_repo(tmp_path, gate_texts["release"], pre_commit_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"mla-spec check \(.*\)\.+Passed", r.stdout), r.stdout


@pytest.mark.network
@pytest.mark.slow
def test_try_repo_fails_a_gate_change_that_breaks_an_invariant_and_names_the_surprise(
    tmp_path, pre_commit_env, gate_texts
):
    r = try_repo(tmp_path, gate_texts["mutant"], pre_commit_env)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert re.search(r"mla-spec check \(.*\)\.+Failed", r.stdout), out
    assert "- exit code: 1" in r.stdout, out  # check's surprise status, not a crash (2) or a timeout (3)
    # the file sits in no vLLM tree (the hook's git tree holds it alone): its baseline is the release whose
    # file it nearly is
    assert "against vllm==0.34.0 (no vLLM version around the file: the release closest by content" in out
    assert re.search(r"\d+ surprises against the baseline vllm==0\.34\.0 \(\d+ NEW, \d+ GONE\):", r.stdout), (
        out
    )
    surprise = f"! {RELATIVE_PATH} / aiter-0.1.20 / fp8-never-reaches-gluon: 2 NEW classes"
    assert surprise in r.stdout, out
    # The how-to shows this run's output as what a failure looks like: it must still be what the hook prints.
    recorded = RECORDED.search(HOWTO.read_text())
    assert recorded, f"{HOWTO.name} has no <!-- hook-output --> block"
    fresh = hook_output(r.stdout)
    assert recorded.group(1).rstrip() == fresh, (
        f"{HOWTO.relative_to(ROOT)}'s recorded failure differs from the hook's output today; paste this "
        f"into its hook-output block:\n{fresh}"
    )


# --- action.yml -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def action():
    yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of pre-commit) is not installed")
    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_the_action_is_a_composite_that_proves_the_gate_file_and_uploads_the_sarif(action):
    assert action["runs"]["using"] == "composite"
    inputs = action["inputs"]
    assert inputs["gate-file"]["default"] == str(RELATIVE_PATH)
    assert inputs["expect"]["default"] == "" and inputs["sarif"]["default"].endswith(".sarif")
    assert inputs["baseline"]["default"] == ""  # the release the gate file comes from
    steps = action["runs"]["steps"]
    assert [s.get("uses", "").split("@")[0] for s in steps] == [
        "actions/setup-python",
        "",
        "",
        "github/codeql-action/upload-sarif",
        "",
    ]
    setup, install, check, upload, fail = steps
    assert "${{ github.action_path }}" in install["env"].values() and "pip install" in install["run"]
    assert check["id"] == "check" and "set +e" in check["run"] and "--format sarif" in check["run"]
    assert "always()" in upload["if"]
    assert upload["with"] == {"sarif_file": "${{ steps.check.outputs.sarif }}", "category": "mla-spec"}
    assert "always()" in fail["if"] and fail["env"]["STATUS"] == "${{ steps.check.outputs.exit-code }}"
    assert action["outputs"]["exit-code"]["value"] == "${{ steps.check.outputs.exit-code }}"
    for step in (install, check, fail):
        assert step["shell"] == "bash"  # a composite step's run needs one
        assert "${{" not in step["run"], "inputs reach scripts through env, never spliced into them"
    assert "secrets." not in (ROOT / "action.yml").read_text()


def run_step(step: dict, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One of the action's run steps under bash, as the runner runs it (``bash -e {0}``)."""
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("status", [0, 1, 2])
def test_the_action_uploads_whatever_check_found_and_then_fails_with_its_status(action, tmp_path, status):
    """The check step with a stand-in mla-spec: it succeeds whatever check's status, saves the status and
    the SARIF path as outputs and logs the unexpected results; the last step exits with the status."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    _, _, check, _, fail = action["runs"]["steps"]
    sarif = {
        "version": "2.1.0",
        "runs": [
            {
                "results": [
                    {"level": "error", "message": {"text": "the surprise"}},
                    {
                        "level": "error",
                        "message": {"text": "expected"},
                        "suppressions": [{"kind": "external", "justification": "its reason"}],
                    },
                ]
            }
        ],
    }
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    fake = bin_dir / "mla-spec"
    body = "" if status == 2 else f"cat <<'EOF'\n{json.dumps(sarif)}\nEOF\n"
    fake.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\n{body}exit {status}\n')
    fake.chmod(0o755)
    outputs = tmp_path / "github_output"
    outputs.touch()
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", GITHUB_OUTPUT=str(outputs))
    step_env = dict(
        env, GATE_FILE=str(RELATIVE_PATH), BASELINE="0.33.0", EXPECT="ours.toml", SARIF="out/mla-spec.sarif"
    )
    r = run_step(check, tmp_path, step_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "args").read_text().split() == [
        "check",
        str(RELATIVE_PATH),
        "--format",
        "sarif",
        "--baseline",
        "0.33.0",
        "--expect",
        "ours.toml",
    ]
    saved = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert saved["exit-code"] == str(status)
    assert saved.get("sarif") == (None if status == 2 else "out/mla-spec.sarif")  # no upload of an empty log
    if status != 2:
        assert "error: the surprise" in r.stdout and "error: expected" not in r.stdout
    assert run_step(fail, tmp_path, dict(env, STATUS=saved["exit-code"])).returncode == status
