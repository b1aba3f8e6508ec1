"""The executing harness: real release code over the stubs, and the model against it.

Marked ``network``: the release trees come from the sdists (downloaded once,
cached in ~/.cache/mla-spec).  CI runs them.
"""

from __future__ import annotations

import pytest

from mla_model.registry import load_registry
from mla_model.revisions import get_revision
from mla_model.shape import Shape
from spec.realcode.executed.differential import differential, padding_kind, random_shapes
from spec.realcode.executed.harness import HarnessError, ReleaseCode, execute, release_code
from tests.params import regular_and_slow

pytestmark = pytest.mark.network

KIMI_K3_TP8_FP8 = Shape(arch="gfx950", kv_cache_dtype="fp8", num_heads=12, max_qo_len=1, num_reqs=4)


def test_0_28_0_sends_kimi_k3_tp8_fp8_to_the_persistent_asm_kernel_with_the_cache_scale():
    (row,) = execute(release_code("0.28.0"), [KIMI_K3_TP8_FP8])
    assert row["outcome"] == "ran"
    (call,) = row["calls"]
    assert call["entry"] == "mla_decode_fwd" and call["persistent"]
    assert call["q_shape"][1] == 16 and padding_kind(call["head_map"]) == "tile"
    assert call["kv_scale"] == 0.5 and call["q_scale"] == 0.25
    assert row["sizing"]["max_seqlen_qo"] == 1 and row["sizing"]["num_heads"] == 16


def test_0_27_1_sizes_eagle_metadata_for_qlen_1_while_the_scheduler_admits_4():
    shape = Shape(
        arch="gfx942", num_heads=16, max_qo_len=4, num_reqs=2, spec_method="eagle", num_spec_tokens=3
    )
    (old,) = execute(release_code("0.27.1"), [shape])
    (new,) = execute(release_code("0.28.0"), [shape])
    assert old["threshold"] == new["threshold"] == 4
    assert old["mtp_decode_qlen"] == 1 and not old["decode"]["has_persistent_metadata"]
    assert new["mtp_decode_qlen"] == 4 and new["decode"]["has_persistent_metadata"]


@pytest.mark.parametrize(
    "release, model",
    regular_and_slow(
        [("0.27.1", "vllm-0.27"), ("0.28.0", "vllm-0.28")], ("0.28.0", "vllm-0.28"), unpack=True, ids="-".join
    ),
)
def test_the_model_agrees_with_the_executed_release(release, model):
    revision, reg = get_revision(model), load_registry("aiter-0.1.20")
    result = differential(release_code(release), revision, random_shapes(revision, reg, 300, seed=7))
    assert result.valid >= 300
    assert result.compared["path"] > 200 and result.compared["kernel"] > 100
    assert not result.disagreements, [d.to_json() for d in result.disagreements[:5]]


def test_an_arch_probe_changed_on_purpose_shows_as_disagreements():
    revision, reg = get_revision("vllm-0.28"), load_registry("aiter-0.1.20")
    shapes = [s for s in random_shapes(revision, reg, 300, seed=3) if s.arch == "gfx942"]
    result = differential(release_code("0.28.0"), revision, shapes, options={"probe_arch": "gfx950"})
    fields = {d.field for d in result.disagreements}
    assert "path" in fields or "kernel" in fields, fields


def test_a_name_outside_the_stubs_is_an_error_that_names_it(tmp_path):
    real = release_code("0.28.0")
    mutant = tmp_path / "rocm_aiter_mla.py"
    mutant.write_text(
        real.file.read_text().replace(
            "from vllm.logger import init_logger", "from vllm.logger import init_logger, NotStubbedName"
        )
    )
    with pytest.raises(HarnessError, match="NotStubbedName"):
        execute(ReleaseCode("mutant", mutant, real.tree), [KIMI_K3_TP8_FP8])


def test_a_module_outside_the_stubs_is_an_error_that_names_it(tmp_path):
    real = release_code("0.28.0")
    mutant = tmp_path / "rocm_aiter_mla.py"
    mutant.write_text("import vllm.model_executor.not_a_stub_module\n" + real.file.read_text())
    with pytest.raises(HarnessError, match="vllm.model_executor.not_a_stub_module"):
        execute(ReleaseCode("mutant", mutant, real.tree), [KIMI_K3_TP8_FP8])


def test_an_installed_vllm_is_never_imported(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise SystemExit('the installed vllm was imported')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    (row,) = execute(release_code("0.28.0"), [KIMI_K3_TP8_FP8])
    assert row["outcome"] == "ran"


def test_the_cpu_rendering_of_the_page_index_kernel_matches_tritons_interpreter():
    pytest.importorskip("triton")
    import subprocess
    import sys

    script = (
        "import os, sys, json\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "import torch, triton, triton.language as tl\n"
        "src = open(sys.argv[1]).read()\n"
        "start = src.index('@triton.jit\\ndef _expand_page_indices_kernel')\n"
        "end = src.index('\\nclass ', start)\n"
        "ns = {'triton': triton, 'tl': tl}\n"
        "exec(src[start:end], ns)\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from mla_spec_stub.kernels import launch\n"
        "g = torch.Generator().manual_seed(0)\n"
        "for k in (1, 16):\n"
        "    lens = torch.tensor([5, 40, 1, 33], dtype=torch.int32)\n"
        "    table = torch.randint(0, 50, (4, 48), generator=g, dtype=torch.int32)\n"
        "    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), lens.cumsum(0).to(torch.int32)])\n"
        "    a = torch.full((100 * 16,), -1, dtype=torch.int32); b = a.clone()\n"
        "    ns['_expand_page_indices_kernel'][(4,)](a, table, table.stride(0), indptr, lens,"
        " KERNEL_BLOCK_SIZE=k, BLOCK_SIZE=16)\n"
        "    launch('_expand_page_indices_kernel', (4,), (b, table, table.stride(0), indptr, lens),"
        " {'KERNEL_BLOCK_SIZE': k, 'BLOCK_SIZE': 16})\n"
        "    assert torch.equal(a, b), (k, a, b)\n"
        "print('same')\n"
    )
    from spec.realcode.executed.child import STUBS

    out = subprocess.run(
        [sys.executable, "-c", script, str(release_code("0.28.0").file), str(STUBS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.stdout.strip() == "same", out.stderr[-2000:]


def test_padding_kind_reads_the_head_map():
    assert padding_kind([0, 1, 2, 3]) == "none"
    assert padding_kind([0, 0, 1, 1]) == "repeat_interleave"
    assert padding_kind([0, 1, 2, 0]) == "tile"
    assert padding_kind([0, -1, 2, 3]) == "other"


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fnuz", "float32"])
def test_head_map_names_the_query_head_each_kernel_head_copies(dtype):
    torch = pytest.importorskip("torch")
    from spec.realcode.executed.child import head_map

    q = torch.randn(6, 4, 576, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    assert head_map(q, q.repeat_interleave(4, dim=1)) == [i // 4 for i in range(16)]
    assert head_map(q, q.repeat(1, 4, 1)) == [i % 4 for i in range(16)]
    assert head_map(q, torch.cat([q, torch.zeros_like(q)], dim=1)) == [0, 1, 2, 3, -1, -1, -1, -1]
    changed = q.repeat_interleave(2, dim=1)
    changed[5, 3] = q[0, 0]  # head 3 copies head 1 on every token but the last: a copy of no head
    assert head_map(q, changed) == [0, 0, 1, -1, 2, 2, 3, 3]
    twins = torch.cat([q[:, :1], q[:, :1], q[:, 2:]], dim=1)  # query heads 0 and 1 equal: the lowest
    assert head_map(twins, twins.flip(1)) == [3, 2, 0, 0]
    assert head_map(q.to(torch.bfloat16), q.to(torch.bfloat16).float()) == [0, 1, 2, 3]  # by value


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fnuz"])
def test_head_map_of_a_record_only_query_reads_as_the_full_comparison(dtype):
    """A record-only batch's query is random on its first token and zero after it (configs.batch): the
    one-pass confirmation gives the full comparison's answer, a later token set on a padded head included."""
    torch = pytest.importorskip("torch")
    from spec.realcode.executed.child import head_map

    q = torch.zeros(6, 4, 576).to(getattr(torch, dtype))
    q[0] = torch.randn(4, 576, generator=torch.Generator().manual_seed(1)).to(q.dtype)
    changed = q.repeat_interleave(2, dim=1)
    changed[3, 5] = q[0, 0]  # head 5 copies head 2's first token, but not its zero tokens
    paddings = [
        q.repeat_interleave(4, dim=1),
        q.repeat(1, 4, 1),
        torch.cat([q, torch.zeros_like(q)], dim=1),
        changed,
        q.flip(1),
    ]
    for padded in paddings:
        assert head_map(q, padded, rest_zero=True) == head_map(q, padded)
    assert head_map(q, changed, rest_zero=True) == [0, 0, 1, 1, 2, -1, 3, 3]


def test_the_harness_leaves_no_scratch_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    execute(release_code("0.28.0"), [KIMI_K3_TP8_FP8])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("mla-spec-exec-")]


def test_every_counterexample_of_vllm_0_27_fails_in_0_27_1_as_check_predicts():
    """Each solver-found counterexample, executed in 0.27.1: the outcome (ran / AITER's failure / vLLM
    raising), path and kernel facts are the ones the model's failure order predicts for it."""
    from spec.analyses.cases import generate

    revision = get_revision("vllm-0.27")
    cases = [c for c in generate("vllm-0.27") if "invariant " in c.origin]
    assert len(cases) >= 20
    result = differential(release_code("0.27.1"), revision, [c.shape for c in cases])
    assert result.compared["outcome"] == len(cases)
    assert not result.disagreements, [d.to_json() for d in result.disagreements[:5]]


def test_children_keep_bytecode_in_the_cache_only_where_torch_has_none(tmp_path, monkeypatch):
    """A torch installed without bytecode (read-only, ``--no-compile``) costs every child 2 s of
    compiling; the children then share bytecode under the mla-spec cache.  With torch's bytecode in place
    they write none."""
    import importlib.machinery
    import importlib.util
    import sys

    from spec.realcode.executed import confine

    source = tmp_path / "site" / "torch" / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text("")
    found = importlib.machinery.ModuleSpec("torch", None, origin=str(source))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: found if name == "torch" else None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env = confine.allowed_environment()
    assert env["PYTHONPYCACHEPREFIX"] == str(
        tmp_path / "cache" / "mla-spec" / "bytecode" / sys.implementation.cache_tag
    )
    assert "PYTHONDONTWRITEBYTECODE" not in env

    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "cache" / "mla-spec" / "bytecode"))
    assert "PYTHONPYCACHEPREFIX" in confine.allowed_environment()  # a child under the prefix passes it on
    compiled = source.parent / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    compiled.parent.mkdir()
    compiled.write_bytes(b"")
    env = confine.allowed_environment()
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and "PYTHONPYCACHEPREFIX" not in env
