"""``mla-spec vllm-tests``: a release's shipped ROCm AITER MLA tests, run unmodified over the harness stubs.

The release runs are marked ``network`` (they use the cached sdists, downloaded
with pip on first use, like tests/test_realcode_releases.py).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.cli import main
from spec.realcode.shipped_tests import MARKER, TESTS_DIR, run_shipped_tests, run_test_files, shipped_files

RELEASE = "0.28.0"


def _cli(*args: str):
    return CliRunner().invoke(main, ["vllm-tests", *args], catch_exceptions=False)


def test_bad_against_is_bad_input(tmp_path):
    with pytest.raises(SystemExit) as e:
        main.main(["vllm-tests", "--vllm", RELEASE, "--against", str(tmp_path / "nope.py")])
    assert e.value.code == 2


def test_not_a_release_is_bad_input(capsys):
    with pytest.raises(SystemExit) as e:
        main.main(["vllm-tests", "--vllm", "not-a-version"])
    assert e.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.network
def test_files_selected_by_name():
    from spec.realcode.source import release_tree

    names = [p.name for p in shipped_files(release_tree(RELEASE))]
    assert names == ["test_rocm_aiter_mla_fp8_decode_routing.py", "test_rocm_aiter_mla_mtp_split.py"]
    assert all(MARKER in n for n in names)


@pytest.mark.network
@pytest.mark.slow
def test_release_against_itself_all_pass():
    r = run_shipped_tests(RELEASE)
    assert r["release"] == RELEASE and r["against"] == f"vllm=={RELEASE}"
    assert r["items"] > 400
    assert r["passed"] == r["items"] and not r["failed"] and not r["errors"] and not r["not_runnable"]


@pytest.mark.slow  # 5 s (README command: issue 26's 3 minutes)
@pytest.mark.network
def test_fp8_routing_tests_fail_on_older_release():
    r = run_shipped_tests(RELEASE, against="0.27.1")
    failing = {f["item"].split("::")[0].rsplit("/", 1)[-1] for f in r["failures"]}
    assert "test_rocm_aiter_mla_fp8_decode_routing.py" in failing
    assert any("test_fp8_never_routes_to_gluon" in f["item"] for f in r["failures"])
    assert r["failed"] + r["errors"] > 0


@pytest.mark.network
def test_cli_json_and_exit_status():
    res = _cli("--vllm", RELEASE, "--format", "json", "-k", "test_padded_query_is_contiguous")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert set(data) >= {
        "release",
        "against",
        "files",
        "items",
        "passed",
        "failed",
        "errors",
        "skipped",
        "not_runnable",
        "failures",
    }
    assert data["items"] == data["passed"] == 10
    res = _cli("--vllm", RELEASE, "--against", "0.27.1", "-k", "test_padded_query_is_contiguous")
    assert res.exit_code == 1
    assert "FAILED" in res.output


@pytest.mark.network
def test_lone_mutant_file_borrows_the_release_tree(tmp_path):
    from spec.realcode.source import release_tree

    src = (release_tree(RELEASE) / "vllm/v1/attention/backends/mla/rocm_aiter_mla.py").read_text()
    guard = (
        "        if is_quantized_kv_cache(kv_cache_dtype):\n            return False\n        mode = _aiter"
    )
    assert guard in src
    mutant = tmp_path / "rocm_aiter_mla.py"
    mutant.write_text(src.replace(guard, "        mode = _aiter", 1))
    r = run_shipped_tests(RELEASE, against=str(mutant), select="test_fp8_never_routes_to_gluon")
    assert r["against"] == str(mutant) and Path(r["tree"]) == release_tree(RELEASE)
    assert r["failed"] > 0


_SYNTHETIC = """
import pytest
import torch

from vllm.platforms import current_platform
from vllm.v1.attention.backends.mla import rocm_aiter_mla


def test_passes():
    assert current_platform.is_rocm() and hasattr(rocm_aiter_mla, "AiterMLAHelper")


def test_fails():
    assert rocm_aiter_mla.AiterMLAHelper is None


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_errors(broken):
    pass


def test_skips():
    pytest.skip("the test's own reason")


def test_needs_gpu():
    torch.zeros(1, device="cuda")


def test_needs_unstubbed_name():
    from vllm.config import SomethingOutsideTheBackend  # noqa: F401


needs_device = pytest.mark.skipif(not torch.accelerator.is_available(), reason="needs a ROCm GPU")


@needs_device
def test_gate_under_a_device_skip():
    assert current_platform.is_rocm()


@needs_device
def test_device_under_a_device_skip():
    torch.accelerator.set_device_index(0)


def test_kernel_output_never_computed():
    from aiter.mla import mla_decode_fwd

    q = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
    kv = torch.zeros(8, 1, 1, 576, dtype=torch.bfloat16)
    o = torch.zeros(2, 16, 512, dtype=torch.bfloat16)
    ind = torch.tensor([0, 1, 2], dtype=torch.int32)
    mla_decode_fwd(
        q, kv, o, ind, ind, torch.tensor([0, 1], dtype=torch.int32), torch.ones(2, dtype=torch.int32), 1
    )
    assert True  # passes, but only because nothing computed the output
"""


@pytest.mark.network
def test_item_classification(tmp_path):
    """Each outcome lands where it belongs; a stub-only pass is never a pass."""
    from spec.realcode.source import RELATIVE_PATH, release_tree

    tree = release_tree(RELEASE)
    folder = tmp_path / "attention"
    folder.mkdir()
    (folder / "test_synthetic_aiter_mla.py").write_text(textwrap.dedent(_SYNTHETIC))
    r = run_test_files(folder, ["test_synthetic_aiter_mla.py"], tree / RELATIVE_PATH, tree)
    by = lambda rows: {x["item"].rsplit("::", 1)[1]: x for x in rows}  # noqa: E731
    assert r["items"] == 9
    assert r["passed"] == 2 and r["failed"] == 1 and r["errors"] == 1 and r["skipped"] == 1
    assert set(by(r["failures"])) == {"test_fails", "test_errors"}
    nr = by(r["not_runnable"])
    assert set(nr) == {
        "test_needs_gpu",
        "test_needs_unstubbed_name",
        "test_kernel_output_never_computed",
        "test_device_under_a_device_skip",
    }
    assert "GPU" in nr["test_needs_gpu"]["reason"]
    assert "GPU" in nr["test_device_under_a_device_skip"]["reason"]
    assert r["by_file"] == {
        str(TESTS_DIR / "test_synthetic_aiter_mla.py"): {
            "passed": 2,
            "skipped": 1,
            "failed": 1,
            "error": 1,
            "not_runnable": 4,
        }
    }
    assert "SomethingOutsideTheBackend" in nr["test_needs_unstubbed_name"]["reason"]
    assert "mla_decode_fwd" in nr["test_kernel_output_never_computed"]["reason"]
    assert str(TESTS_DIR) in r["not_runnable"][0]["item"]


DCP_FILES = {
    "cprr": str(TESTS_DIR / "test_rocm_aiter_mla_dcp_cprr.py"),
    "numerics": str(TESTS_DIR / "test_rocm_aiter_mla_dcp_cprr_numerics.py"),
    "gfx942": str(TESTS_DIR / "test_rocm_aiter_mla_dcp_verify_gfx942.py"),
}


@pytest.mark.network
@pytest.mark.slow
def test_0_34_0_dcp_files_pass_against_0_34_0():
    """0.34.0's DCP files: every gate item runs and passes; what needs the real kernel on a GPU says so."""
    r = run_shipped_tests("0.34.0", select="dcp_cprr or dcp_verify_gfx942")
    assert not r["failed"] and not r["errors"]
    files = r["by_file"]
    assert files[DCP_FILES["cprr"]]["passed"] == 30 and sum(files[DCP_FILES["cprr"]].values()) == 30
    numerics = files[DCP_FILES["numerics"]]
    assert numerics == {"passed": 1, "skipped": 0, "failed": 0, "error": 0, "not_runnable": 5}
    gpu = [x for x in r["not_runnable"] if x["item"].startswith(DCP_FILES["numerics"])]
    assert all("needs a GPU" in x["reason"] for x in gpu)
    assert not any("test_cprr_kernel_is_selected_for_the_k3_shape" in x["item"] for x in gpu)
    assert files[DCP_FILES["gfx942"]]["skipped"] == 7  # the file's own arch skip: the stub platform is gfx950


@pytest.mark.network
@pytest.mark.slow
def test_0_34_0_gfx942_dcp_verify_needs_a_gpu():
    r = run_shipped_tests("0.34.0", arch="gfx942", select="dcp_verify_gfx942")
    assert r["by_file"][DCP_FILES["gfx942"]] == {
        "passed": 0,
        "skipped": 0,
        "failed": 0,
        "error": 0,
        "not_runnable": 7,
    }
    gfx942 = [x for x in r["not_runnable"] if x["item"].startswith(DCP_FILES["gfx942"])]
    assert all("needs a GPU" in x["reason"] for x in gfx942)
