"""Shared fixtures: registries and revisions by id."""

from __future__ import annotations

import pytest

from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import REVISIONS


@pytest.fixture(params=REGISTRY_IDS)
def registry(request):
    return load_registry(request.param)


@pytest.fixture(params=list(REVISIONS))
def revision(request):
    return REVISIONS[request.param]
