"""Shared fixtures: registries and revisions by id."""

from __future__ import annotations

import pytest
from hypothesis import settings

from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS

# Property tests check values, not speed: a per-example deadline only makes them flaky on a loaded 2-core CI
# machine (the suite's speed is measured as a whole, in the closing notes and docs/reference/benchmarks.md).
settings.register_profile("mla-spec", deadline=None)
settings.load_profile("mla-spec")


@pytest.fixture(params=REGISTRY_IDS)
def registry(request):
    return load_registry(request.param)


@pytest.fixture(params=list(REVISIONS))
def revision(request):
    return REVISIONS[request.param]
