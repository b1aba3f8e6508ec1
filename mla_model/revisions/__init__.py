"""The shipped gate revisions, by id."""

from __future__ import annotations

from mla_model.revisions import (
    main_pre_51011,
    vllm_027,
    vllm_028,
    vllm_029,
    vllm_030,
    vllm_031,
    vllm_032,
    vllm_033,
    vllm_034,
)
from mla_model.revisions.base import Revision

REVISIONS: dict[str, Revision] = {
    r.id: r
    for r in (
        vllm_027.REVISION,
        main_pre_51011.REVISION,
        vllm_028.REVISION,
        vllm_029.REVISION,
        vllm_030.REVISION,
        vllm_031.REVISION,
        vllm_032.REVISION,
        vllm_033.REVISION,
        vllm_034.REVISION,
    )
}
# The vLLM release whose gate code each model revision is (docs/fidelity.md proves them equivalent);
# main-pre-51011 was never released.
RELEASE_OF_REVISION = {
    "vllm-0.27": "0.27.1",
    "vllm-0.28": "0.28.0",
    "vllm-0.29": "0.29.0",
    "vllm-0.30": "0.30.0",
    "vllm-0.31": "0.31.0",
    "vllm-0.32": "0.32.0",
    "vllm-0.33": "0.33.0",
    "vllm-0.34": "0.34.0",
}


def get_revision(revision_id: str) -> Revision:
    try:
        return REVISIONS[revision_id]
    except KeyError:
        raise KeyError(f"unknown revision {revision_id!r}; known: {', '.join(REVISIONS)}") from None
