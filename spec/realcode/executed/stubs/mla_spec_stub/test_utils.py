"""vLLM's ``tests/v1/attention/utils.py`` inside the harness child: the release's own batch helpers.

The drop-in module (``mla-spec cases --style vllm``) builds its numeric steps
the way vLLM's attention tests do: a ``BatchSpec`` (the workload) turned into
the step's ``CommonAttentionMetadata`` by ``create_common_attn_metadata``.
Under ``python -m conformance.vllm_shim`` those two are the release's own
definitions, cut out of its ``tests/v1/attention/utils.py`` (every release
0.27.1-0.34.0 defines both at top level) and run here unchanged over the stub
``CommonAttentionMetadata``.

The rest of that file is left out, by name: ``create_vllm_config`` builds a
real ``ModelConfig`` from a model's Hugging Face config (a download), and the
backend registry, Mamba and KV-layout helpers import vLLM code the stubs do not
give.  Reaching one is a harness fault naming it.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest
import torch

from mla_spec_stub import release_defs, strict

RELPATH = "tests/v1/attention/utils.py"
NAME = "tests.v1.attention.utils"
GIVEN = ("BatchSpec", "create_common_attn_metadata")


def install() -> types.ModuleType:
    """Put ``tests``, ``tests.v1``, ``tests.v1.attention`` and ``tests.v1.attention.utils`` in
    ``sys.modules`` (so no other ``tests`` package on the path answers), the last with :data:`GIVEN`."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    parent = None
    for package in ("tests", "tests.v1", "tests.v1.attention"):
        module = types.ModuleType(package, "the vLLM release's test packages (mla-spec's drop-in shim)")
        module.__path__ = []  # a package: only what is put in sys.modules below it is found
        sys.modules[package] = module
        if parent is not None:
            setattr(parent, package.rsplit(".", 1)[1], module)
        parent = module
    utils = types.ModuleType(NAME, f"the release's {RELPATH}: {', '.join(GIVEN)} only (mla-spec's shim)")
    namespace = vars(utils)
    namespace.update(
        dataclass=dataclass, pytest=pytest, torch=torch, CommonAttentionMetadata=CommonAttentionMetadata
    )
    sys.modules[NAME] = utils  # before the definitions run: @dataclass looks its module up there
    parent.utils = utils  # type: ignore[union-attr]
    release_defs(RELPATH, GIVEN, namespace)
    namespace["__getattr__"] = strict(NAME)
    return utils
