"""The recorded GPU acceptance run (docs/results/gpu-acceptance.json) is of the GPU path as it is now.

CI has no GPU, so a change to a file the GPU replay runs (benchmarks.gpu.GPU_PATH) must land with a fresh
run of ``python -m benchmarks.gpu`` on an H200: this test recomputes the digest of those files and fails,
naming the files changed and the command, when it differs from the recorded one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks import gpu

RECORD = gpu.RECORD


def _record() -> dict:
    assert RECORD.is_file(), f"no recorded GPU acceptance run at {RECORD}: run {gpu.RERUN}"
    return json.loads(RECORD.read_text())


def test_the_recorded_run_is_of_the_gpu_path_as_it_is_now():
    recorded = _record()["gpu_path"]
    now = gpu.gpu_path_digest()
    changed = gpu.changed_files(recorded["files"], now["files"])
    assert recorded["digest"] == now["digest"] and not changed, (
        f"the GPU path changed since the recorded GPU acceptance run ({', '.join(changed[:8])}"
        f"{' ...' if len(changed) > 8 else ''}): run {gpu.RERUN} and commit {RECORD.relative_to(gpu.ROOT)}"
    )


def test_the_records_acceptance_is_recomputed_from_its_figures():
    record = _record()
    assert set(record["acceptance"]) == set(gpu.acceptance(record)), "the record's checks are not today's"
    assert record["acceptance"] == gpu.acceptance(record)  # the checks recomputed from the recorded figures
    assert record["met"] == all(record["acceptance"].values())


def _copy_gpu_path(tmp_path: Path) -> Path:
    for f in gpu.gpu_path_files():
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(gpu.ROOT / f, tmp_path / f)
    return tmp_path


def test_the_digest_changes_when_a_gpu_path_file_changes(tmp_path):
    root = _copy_gpu_path(tmp_path)
    before = gpu.gpu_path_digest(root)
    assert before == gpu.gpu_path_digest()  # a copy of the same files: the same digest
    child = root / "spec" / "realcode" / "executed" / "child.py"
    child.write_text(child.read_text() + "\n# an edit\n")
    after = gpu.gpu_path_digest(root)
    assert after["digest"] != before["digest"]
    assert gpu.changed_files(before["files"], after["files"]) == ["spec/realcode/executed/child.py"]


def test_a_new_file_on_the_gpu_path_changes_the_digest(tmp_path):
    root = _copy_gpu_path(tmp_path)
    before = gpu.gpu_path_digest(root)
    (root / "conformance" / "backends" / "new_backend.py").write_text("BACKEND = None\n")
    after = gpu.gpu_path_digest(root)
    assert gpu.changed_files(before["files"], after["files"]) == ["conformance/backends/new_backend.py"]


def test_the_gpu_path_holds_what_the_replay_runs():
    files = set(gpu.gpu_path_files())
    for f in (
        "conformance/backends/vllm.py",
        "conformance/backends/vllm_replay.py",
        "conformance/runner.py",
        "conformance/dcp_replay.py",
        "conformance/dcp_merge.py",
        "spec/realcode/executed/harness.py",
        "spec/realcode/executed/child.py",
        "spec/realcode/executed/stubs/mla_spec_stub/recorder.py",
        "mla_model/reference.py",
        "tests/generated/vllm_034/cases.jsonl",
    ):
        assert f in files, f
