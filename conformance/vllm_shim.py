"""Run the vLLM drop-in module here, without vLLM or a ROCm GPU: the release executed over the harness stubs.

``mla-spec cases --style vllm`` writes a module for tests/v1/attention/ of a
vLLM checkout.  This shim runs it against a release before anyone copies it
there:

    python -m conformance.vllm_shim --vllm 0.34.0 test_rocm_aiter_mla_mlaspec_routing.py [pytest args]
    python -m conformance.vllm_shim --vllm edited/rocm_aiter_mla.py --tree VLLM_TREE MODULE [pytest args]
    python -m conformance.vllm_shim --vllm 0.28.0 --device cuda MODULE   # the stand-ins on an NVIDIA GPU

The whole pytest session runs in one confined child (the trust boundary:
:mod:`spec.realcode.executed.confine`), a copy of the module in its scratch
folder, in which

* ``vllm.*`` and ``aiter.*`` are the harness stubs, with the release's
  ``rocm_aiter_mla.py`` (:func:`spec.realcode.executed.child.install`);
* ``tests.v1.attention.utils`` holds the release's own ``BatchSpec`` and
  ``create_common_attn_metadata`` (:mod:`mla_spec_stub.test_utils`), so the
  module's numeric part builds its steps with vLLM's test utilities;
* ``mla_spec_drop_in`` answers the module: :func:`observe` runs one decode step
  of the release per case (``AiterMLAMetadataBuilder``, ``build``,
  ``forward_mqa``, AITER's entry points recorded and checked against mla-spec's
  registry) and reduces each to the module's facts
  (:func:`conformance.drop_in.facts`); :func:`numeric` hands the numeric part
  what vLLM's engine would (configs, the KV-cache spec, the layer, the impl's
  arguments, dtypes and scales: :mod:`spec.realcode.executed.configs`) with the
  ``vllm`` backend's stand-in kernels filling AITER's outputs
  (:mod:`conformance.backends.vllm_replay`).

The module monkeypatches nothing on this path: the stubs answer the arch, the
Gluon build and the small-head mode from each shape.  DCP steps stay out of the
numeric part (one rank's output is not the step's: :mod:`conformance.dcp_replay`
merges the ranks).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import types
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from spec.realcode.source import SourceError

SHIM = "mla_spec_drop_in"
REPLAY_KV_LEN = 64  # the conform default (conformance.runner): the harness's max_model_len follows it
DEVICES = ("cpu", "cuda")
USAGE = (
    "usage: python -m conformance.vllm_shim --vllm RELEASE|PATH [--tree VLLM_TREE] [--device cpu|cuda] "
    "TEST_MODULE [pytest args]"
)


class ShimError(ValueError):
    """The command line or the module cannot be used: one line, exit 2."""


def parse(argv: list[str]) -> tuple[str, str | None, str, Path, list[str]]:
    """``(release, tree, device, module, pytest args)`` from the command line."""
    options: dict[str, str] = {}
    args = list(argv)
    while args and args[0] in ("--vllm", "--tree", "--device"):
        if len(args) < 2:
            raise ShimError(f"{args[0]} needs a value")
        options[args[0][2:]] = args[1]
        del args[:2]
    if "vllm" not in options or not args:
        raise ShimError(USAGE.removeprefix("usage: "))
    device = options.get("device", "cpu")
    if device not in DEVICES:
        raise ShimError(f"--device {device}: not one of {', '.join(DEVICES)}")
    if device == "cuda" and not _cuda_visible():
        # observe and numeric put the release's tensors there: without a device every test would fail
        raise ShimError("--device cuda: no CUDA device is visible here")
    module = Path(args[0])
    if module.suffix != ".py" or not module.is_file():
        raise ShimError(f"{module}: not a Python test module")
    return options["vllm"], options.get("tree"), device, module, args[1:]


def _cuda_visible() -> bool:
    """Whether torch sees a CUDA device, asked through NVML so this process starts no CUDA context."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--child"]:
        return child_main()
    from spec.realcode.executed import confine
    from spec.realcode.executed.harness import child_env, release_code

    try:
        release, tree, device, module, pytest_args = parse(args)
        code = release_code(release, tree)
    except (ShimError, SourceError) as e:
        print(f"mla-spec: error: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mla-spec-shim-") as scratch:
        shutil.copyfile(module, Path(scratch) / module.name)
        request = {
            "file": str(code.file),
            "tree": str(code.tree) if code.tree else None,
            "device": device,
            "pytest": [module.name, *pytest_args],
        }
        # Isolated: no plugin autoload, no PYTEST_ADDOPTS; on the CPU no GPU is visible to the release.
        env = child_env("PYTEST_")
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        if device == "cpu":
            env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
        proc = confine.run(
            [sys.executable, "-m", "conformance.vllm_shim", "--child"],
            input=json.dumps(request),
            cwd=scratch,
            env=env,
            steps=2,  # torch loaded, the release imported; then the session has the time limit
            device=device,
        )
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.timed_out:
        print(
            f"mla-spec: error: the module ran past the {confine.time_limit():g} s limit; killed",
            file=sys.stderr,
        )
        return 2
    return proc.returncode


# ----------------------------------------------------------------------------------------------- child side


class DropIn:
    """``mla_spec_drop_in``: what the module asks of the release, answered in this child."""

    def __init__(self, release: Any, file: Path, device: str) -> None:
        self.release, self.file, self.device = release, file, device

    def observe(self, registry: str, shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per shape, the facts one executed decode step of the release shows (seeded as
        :func:`spec.realcode.executed.harness.execute` seeds them)."""
        from conformance.drop_in import facts
        from mla_model.registry import load_registry
        from spec.realcode.executed.child import Step, run_all
        from spec.realcode.executed.differential import observed
        from spec.realcode.executed.harness import worker_count

        lines = io.StringIO()
        # On the session's device: with a GPU visible the stubs launch the release's own Triton helpers
        # (expand_page_indices), which need their tensors there.
        step = Step(self.release, self.file, {"device": self.device})
        with redirect_stdout(lines):
            ok = run_all(step, load_registry(registry), shapes, 0, worker_count(len(shapes), self.device))
        rows = [json.loads(line) for line in lines.getvalue().splitlines()]
        if not ok:
            raise RuntimeError(f"mla-spec's harness failed: {rows[-1].get('fatal') if rows else 'no output'}")
        return [facts(observed(row), row.get("threshold", 0)) for row in rows]

    def numeric(self, registry: str, shape_json: dict[str, Any]) -> types.SimpleNamespace:
        """What vLLM's engine hands the backend for one DCP-1 step of ``shape_json``, the stand-in kernels
        answering AITER's calls: ``backend`` (the release's ``AiterMLABackend``), ``vllm_config``,
        ``kv_cache_spec``, ``layer_name``, ``layer``, ``impl_args``, ``device``, ``block_size``, and the
        stored dtypes and dequantising scales of the cache and the query."""
        from conformance.backends.vllm import REPLAY
        from mla_model.registry import load_registry
        from mla_model.shape import Shape
        from spec.realcode.executed import configs
        from spec.realcode.executed.child import Step

        shape = Shape.from_json(shape_json)
        if shape.dcp_world_size > 1:
            raise ValueError("the shim's numeric steps are DCP 1 (a DCP step's output is one rank's part)")
        options = {"replay": REPLAY, "device": self.device, "kv_len": REPLAY_KV_LEN}
        device = Step(self.release, self.file, options).enter(shape, load_registry(registry))
        vllm_config, kv_cache_spec = configs.vllm_config(shape, options)
        kv_dtype, kv_scale, q_dtype, q_scale = configs.quantisation(shape, options)
        return types.SimpleNamespace(
            backend=self.release.AiterMLABackend,
            vllm_config=vllm_config,
            kv_cache_spec=kv_cache_spec,
            layer_name=configs.LAYER,
            layer=configs.layer(shape, options, device),
            impl_args=configs.impl_args(shape),
            device=device,
            block_size=int(configs.option(options, "block_size")),
            kv_dtype=kv_dtype,
            kv_scale=kv_scale,
            q_dtype=q_dtype,
            q_scale=q_scale,
        )


def child_main() -> int:
    """The child: stubs and the release in place, vLLM's test utilities and the shim module, then pytest."""
    request = json.loads(sys.stdin.read())
    from spec.realcode.executed import confine
    from spec.realcode.executed.child import STUBS, install, loaded_torch

    sys.path.insert(0, str(STUBS))
    loaded_torch()
    from mla_spec_stub import StubMissing, test_utils

    file = Path(request["file"]).resolve()
    try:
        release = install(file, Path(request["tree"]) if request.get("tree") else None)
        test_utils.install()
    except StubMissing as e:
        print(f"mla-spec: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (the release's own import failed: said in one line)
        print(
            f"mla-spec: error: cannot import {file.name} over the stubs: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 2
    confine.beat()
    import pytest

    drop_in = DropIn(release, file, request["device"])
    module = types.ModuleType(SHIM, "mla-spec's stand-in for vLLM: conformance.vllm_shim.DropIn")
    module.observe, module.numeric = drop_in.observe, drop_in.numeric  # type: ignore[attr-defined]
    sys.modules[SHIM] = module
    # Isolated: rootdir and an empty ini in the scratch folder, no conftest.py, no cache; nothing beside the
    # module or in the caller's working folder configures the run.
    Path("pytest.ini").write_text("[pytest]\n")
    isolated = ["-p", "no:cacheprovider", "--rootdir", ".", "-c", "pytest.ini", "--confcutdir", "."]
    return int(pytest.main([*request["pytest"], *isolated, "--noconftest"]))


if __name__ == "__main__":
    sys.exit(main())
