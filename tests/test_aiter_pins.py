"""The AITER pins (mla_model/registry_data/pins.toml, docs/reference/aiter-pins.md, sources §59).

Every cited line is re-read from the release's sdist (``network``: fetched from PyPI once, cached in
~/.cache/mla-spec); the page's table is held to the data file; a pinned tag has a bundled registry or says
why it has none.
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from mla_model.registry import REGISTRY_IDS, load_registry
from mla_model.revisions import RELEASE_OF_REVISION

PINS: list[dict[str, Any]] = tomllib.loads(
    resources.files("mla_model.registry_data").joinpath("pins.toml").read_text()
)["pin"]
PAGE = Path(__file__).parents[1] / "docs" / "reference" / "aiter-pins.md"


def _line(tree: Path, file: str, line: int) -> str:
    return (tree / file).read_text().splitlines()[line - 1].strip()


def test_every_release_is_pinned_once_in_release_order():
    releases = [p["release"] for p in PINS]
    assert releases == ["0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    assert set(RELEASE_OF_REVISION.values()) <= set(releases)


def test_each_pin_names_its_registry_or_why_it_has_none():
    for pin in PINS:
        assert ("registry" in pin) != ("no_registry" in pin), pin["release"]
        if "registry" in pin:
            reg = load_registry(pin["registry"])
            assert pin["registry"] in REGISTRY_IDS
            assert f"v{reg.aiter_version}" == pin["aiter"]
            assert f"tag {pin['aiter']} " in reg.source
    # a tag without a registry is one no bundled registry is for
    bundled = {f"v{load_registry(r).aiter_version}" for r in REGISTRY_IDS}
    assert not {p["aiter"] for p in PINS if "no_registry" in p} & bundled


def test_the_reference_page_shows_every_pin():
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"\d+\.\d+\.\d+", cells[0]):
            rows[cells[0]] = cells
    assert list(rows) == [p["release"] for p in PINS]
    for pin in PINS:
        release, tag, pinned, image, also, registry = rows[pin["release"]]
        assert tag == pin["aiter"]
        assert pinned == f"{pin['file']} L{pin['line']}"
        assert image == f"{pin['image']['file']} L{pin['image']['line']}"
        assert also == "; ".join(
            f"{Path(a['file']).name} L{a['line']}: {a['aiter']}" for a in pin.get("also", ())
        )
        assert registry == (f"`{pin['registry']}`" if "registry" in pin else "none")


@pytest.mark.network
@pytest.mark.parametrize("pin", PINS, ids=[p["release"] for p in PINS])
def test_the_cited_lines_pin_that_tag(pin):
    from spec.realcode.source import release_tree

    tree = release_tree(pin["release"])
    for cite in (pin, *pin.get("also", ())):
        assert _line(tree, cite["file"], cite["line"]) == f'ARG AITER_BRANCH="{cite["aiter"]}"', cite
    assert pin["image"]["text"] in _line(tree, pin["image"]["file"], pin["image"]["line"])
    # the base image builds AITER from that ARG, and no requirements file pins another
    assert "git clone --recursive --branch ${AITER_BRANCH}" in (tree / pin["file"]).read_text()
    for req in (tree / "requirements").rglob("*"):
        if req.is_file():
            assert "aiter" not in req.read_text().lower(), req
