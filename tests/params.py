"""Parameters of which a few run in the README's test command and the rest behind the ``slow`` marker
(``.ci/run`` runs them as its second step): the README's command stays within its 3 minutes on 2 cores
(issue 26) while CI still runs every value."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest


def regular_and_slow(
    values: Iterable[Any], *regular: Any, ids: Callable[[Any], str] | None = None, unpack: bool = False
) -> list[Any]:
    """``values`` as parameters, each but those in ``regular`` behind the ``slow`` marker; ``unpack``: each
    value is a tuple of several argument names' values."""
    return [
        pytest.param(
            *(v if unpack else (v,)),
            marks=() if v in regular else pytest.mark.slow,
            id=None if ids is None else ids(v),
        )
        for v in values
    ]
