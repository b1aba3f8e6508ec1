"""Run the vLLM drop-in module here, without vLLM or a ROCm GPU: the release executed over the harness stubs.

``mla-spec cases --style vllm`` writes a module for tests/v1/attention/ of a
vLLM checkout.  This shim runs it against a release before anyone copies it
there:

    python -m conformance.vllm_shim --vllm 0.34.0 test_rocm_aiter_mla_mlaspec_routing.py [pytest args]
    python -m conformance.vllm_shim --vllm edited/rocm_aiter_mla.py --tree VLLM_TREE MODULE [pytest args]

It puts ``mla_spec_drop_in`` in ``sys.modules``; the module hands it every
case's shape at once.  :meth:`Harness.observe` runs the release's real
``AiterMLAMetadataBuilder``, ``build`` and ``forward_mqa`` for each shape in
one confined harness child (:func:`spec.realcode.executed.harness.execute`,
AITER's entry points recorded) and reduces each record to the module's facts
(:func:`conformance.drop_in.facts` over
:func:`spec.realcode.executed.differential.observed`).  :meth:`Harness.replay`
runs the same steps with the ``vllm`` backend's stand-in kernels
(:mod:`conformance.backends.vllm_replay`) and judges the output against the float32
reference (:func:`conformance.backends.vllm.judge`); DCP steps stay out of the numeric part here (one
rank's output is not the step's: :mod:`conformance.dcp_replay` merges the ranks).  The module monkeypatches
nothing on this path: the stubs answer the arch, the Gluon build and the
small-head mode from each shape.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
from typing import Any

from spec.realcode.source import SourceError

SHIM = "mla_spec_drop_in"
REPLAY_KV_LEN = 64  # the conform default (conformance.runner): keys per request in a numeric step


class Harness:
    """The release the module runs against: a version, a vLLM tree, or a rocm_aiter_mla.py inside one or
    with ``tree`` (the vLLM tree the rest of the release is read from)."""

    def __init__(self, release: str, tree: str | None = None) -> None:
        from spec.realcode.executed.harness import release_code

        self.code = release_code(release, tree)

    def observe(self, registry: str, shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per shape, the facts one executed decode step of the release shows."""
        from conformance.drop_in import facts
        from mla_model.shape import Shape
        from spec.realcode.executed.differential import observed
        from spec.realcode.executed.harness import execute

        rows = execute(self.code, [Shape.from_json(s) for s in shapes], registry)
        return [facts(observed(row), row.get("threshold", 0)) for row in rows]

    def replay(self, registry: str, shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per shape (DCP 1: one rank's output is the whole step), the numeric verdict (``status``,
        ``detail``) of its step replayed on the stand-ins, all in one harness child."""
        from conformance.backends.vllm import REPLAY, judge
        from mla_model.shape import Shape
        from spec.realcode.executed.harness import execute

        steps = [Shape.from_json(s) for s in shapes]
        if any(s.dcp_world_size > 1 for s in steps):
            raise ValueError("the shim replays DCP 1 steps only (a DCP step's output is one rank's part)")
        options = {"replay": REPLAY, "device": "cpu", "kv_len": REPLAY_KV_LEN}
        rows = execute(self.code, steps, registry, options)
        return [{k: v for k, v in judge(row).items() if k in ("status", "detail")} for row in rows]


def main(argv: list[str] | None = None) -> int:
    import pytest

    args = list(sys.argv[1:] if argv is None else argv)
    tree = None
    if len(args) > 3 and args[2] == "--tree":
        tree = args[3]
        del args[2:4]
    if len(args) < 3 or args[0] != "--vllm":
        print(
            "usage: python -m conformance.vllm_shim --vllm RELEASE|PATH [--tree VLLM_TREE] TEST_MODULE "
            "[pytest args]",
            file=sys.stderr,
        )
        return 2
    try:
        harness = Harness(args[1], tree)
    except SourceError as e:
        print(f"mla-spec: error: {e}", file=sys.stderr)
        return 2
    module = types.ModuleType(SHIM, "mla-spec's stand-in for vLLM: conformance.vllm_shim.Harness")
    module.observe, module.replay = harness.observe, harness.replay  # type: ignore[attr-defined]
    sys.modules[SHIM] = module
    # Isolated: rootdir and an empty ini in a scratch folder, no conftest.py, no cache, no autoloaded plugin;
    # nothing beside the module or in the working folder configures the run.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with tempfile.TemporaryDirectory(prefix="mla-spec-shim-") as scratch:
        ini = os.path.join(scratch, "pytest.ini")
        with open(ini, "w") as f:
            f.write("[pytest]\n")
        isolated = ["-p", "no:cacheprovider", "--rootdir", scratch, "-c", ini, "--confcutdir", scratch]
        return int(pytest.main([*args[2:], *isolated, "--noconftest"]))


if __name__ == "__main__":
    sys.exit(main())
