"""Conformance backends: what runs a case's decode step.

``model``        the route emulators of :mod:`mla_model.emulation` (CPU or GPU)
``aiter-triton`` AITER's own Triton MLA decode kernel from the ``amd-aiter`` wheel (a CUDA or ROCm GPU)
``vllm``         a vLLM release's real decode path executed by the harness (spec.realcode.executed),
                 its recorded kernel calls replayed on a stand-in inside the kernel's contract (CPU or GPU)

Each module exposes ``BACKEND``, an object with:

* ``name``;
* ``unavailable(device) -> str | None``: why it cannot run here (the run is skipped with that reason);
* ``run(case, decision, registry, inputs, watch, fault) -> (output, info)``: the ``[R*Q, H, 512]``
  output of the step and a JSON-ready dict of what it did; it raises
  :class:`mla_model.emulation.NoKernel` where the routed stack has no kernel and times its kernel with
  ``watch`` (:class:`conformance.runner.Stopwatch`).

AITER's ASM and Gluon kernels run only on AMD GPUs; their replay is the numeric part of the vLLM
drop-in module (``mla-spec cases --style vllm``), run where vLLM runs, not a backend here.

This module imports nothing heavy, so the pytest plugin can validate ``--mla-backend`` without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

BACKENDS = {
    "model": "conformance.backends.model",
    "aiter-triton": "conformance.backends.aiter_triton",
    "vllm": "conformance.backends.vllm",
}
# Backends that take a fault-injection switch (the others run real kernels).
FAULT_BACKENDS = ("model",)

# The verdicts of a case (conformance.runner says what each means), kept here, free of torch, for the
# plugin and the conform command.
# ERROR is a harness fault (mla-spec's own code failed, not the kernel or the release): a failure of the run,
# retried on resume, never counted with SKIP (which is "this kernel cannot run on this device").
STATUSES = ("PASS", "MISMATCH", "NAN", "CRASH", "NO_KERNEL", "SKIP", "ERROR")
FAILURES = ("MISMATCH", "NAN", "CRASH", "ERROR")
# A device error after which the CUDA context is unusable: the plugin exits with this so that xdist (or
# mla-spec conform) starts a fresh process, which resumes from the results file.
DEVICE_LOST_EXIT = 75


def case_key(case: Any) -> str:
    """A case's key in results files, unique within a union of revisions (a shape recurs across revisions)."""
    return f"{case.revision}/{case.registry}/{case.id}"


def load_backend(name: str) -> Any:
    if name not in BACKENDS:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name]).BACKEND
