"""Every "sources §N" citation in the code points at a numbered entry of docs/sources.md.

DESIGN.md's convention: a fact taken from vLLM or AITER is cited where it is encoded, as a pointer into
docs/sources.md.  A citation whose number has no entry (or an entry marked retired) points nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "docs" / "sources.md"
CODE = [
    p
    for folder in ("mla_model", "spec", "conformance", "tests", "benchmarks")
    for ext in ("py", "toml")
    for p in (REPO / folder).glob(f"**/*.{ext}")
    if "generated" not in p.parts
]
CITATION = re.compile(r"sources (§\d+(?:\s*[-–]\s*§\d+)?(?:,\s*§\d+(?:\s*[-–]\s*§\d+)?)*)")


def _entries() -> set[int]:
    text = SOURCES.read_text()
    return {int(m.group(1)) for m in re.finditer(r"^## §(\d+)\b(?!.*retired)", text, re.M)}


def _cited(text: str) -> list[int]:
    out = []
    for m in CITATION.finditer(text):
        for part in m.group(1).split(","):
            bounds = [int(n) for n in re.findall(r"§(\d+)", part)]
            out += list(range(bounds[0], bounds[-1] + 1))
    return out


def test_sources_is_numbered_without_gaps():
    numbers = sorted(int(n) for n in re.findall(r"^## §(\d+)\b", SOURCES.read_text(), re.M))
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 30


def test_every_citation_points_at_an_entry():
    entries = _entries()
    dangling = [
        (p.relative_to(REPO).as_posix(), n) for p in CODE for n in _cited(p.read_text()) if n not in entries
    ]
    assert not dangling


def test_the_code_cites_sources_and_never_the_old_reference_sections():
    cited = {n for p in CODE for n in _cited(p.read_text())}
    assert len(cited) >= 20
    old = "facts" + " §"  # spelled in two parts so this file does not match itself
    stale = [p.relative_to(REPO).as_posix() for p in CODE if old in p.read_text()]
    assert not stale


def test_a_dangling_citation_is_caught():
    assert _cited("see sources §3-§5, §9") == [3, 4, 5, 9]
    assert 10_000 not in _entries()
