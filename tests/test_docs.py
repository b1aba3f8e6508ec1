"""The docs cannot drift from the tool: generated pages, output blocks and excerpts are current."""

from __future__ import annotations

import difflib
import re

import pytest

from conformance import docgen
from spec.proof.verdict import VIOLATED

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
PAGES = sorted(docgen.DOCS.glob("**/*.md")) + [docgen.REPO / "README.md"]


@pytest.mark.slow
def test_generated_pages_output_blocks_and_excerpts_are_what_docgen_writes_and_finds_today():
    fresh = docgen.pages()
    stale = {path: text for path, text in fresh.items() if not path.exists() or path.read_text() != text}
    diffs = [
        "".join(
            difflib.unified_diff(
                path.read_text().splitlines(True) if path.exists() else [],
                text.splitlines(True),
                str(path),
                "fresh",
            )
        )[:3000]
        for path, text in stale.items()
    ]
    assert not stale, "run: python -m conformance.docgen\n" + "\n".join(diffs)
    # in the same test, so the commands the output blocks ran are not run again (command_output is cached)
    cut = docgen.stale_excerpts()
    assert not cut, "edit these excerpts by hand:\n" + "\n".join(cut)


def test_a_stale_output_block_is_found(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "<!-- output: mla-spec list --format json -->\n```text\nSTALE-TEXT\n```\n<!-- /output -->\n"
    )
    fresh = docgen.with_outputs(page.read_text())
    assert '"revisions"' in fresh and "STALE-TEXT" not in fresh


def test_a_generated_block_is_filled_in_and_a_stale_one_rewritten():
    page = "<!-- generated: verdicts vllm-0.28 -->\nSTALE-TEXT\n<!-- /generated -->\n"
    fresh = docgen.with_outputs(page)
    assert "STALE-TEXT" not in fresh and "| fp8-never-reaches-gluon | PROVED |" in fresh
    assert docgen.with_outputs(fresh) == fresh


def test_a_text_excerpt_is_its_lines_in_order_with_gaps(monkeypatch):
    monkeypatch.setattr(docgen, "command_output", lambda args, prog="mla-spec": "a\nb\nc\nd\n")

    def problems(*lines: str) -> list[str]:
        body = "".join(line + "\n" for line in lines)
        return docgen.excerpt_problems(
            f"<!-- excerpt: mla-spec x -->\n```text\n{body}```\n<!-- /excerpt -->\n"
        )

    assert problems("a", "...", "d") == [] and problems("...", "b", "c", "...") == []
    assert problems("a", "b", "c", "d") == [] and problems("  ...", "d") == []
    assert "no line 'e'" in problems("a", "...", "e")[0]
    assert "not in this order" in problems("...", "c", "b", "...")[0]
    assert (
        "not in this order" in problems("a", "c", "...")[0]
    )  # shown next to each other, not so in the output
    assert problems("b", "...")  # the output starts with a, so the excerpt must too, or open with ...


def test_a_json_excerpt_shows_only_what_the_output_holds():
    actual = {"a": 1, "b": [{"x": "hello world", "t": 0.25}, {"x": "y", "t": 1.5}, 3], "c": None}
    pattern = docgen.json_pattern
    assert docgen.json_matches(pattern('{"a": 1, ...}'), actual)
    assert docgen.json_matches(
        pattern('{"a": 1, "b": [{"x": "hello ...", "t": ...}, ...], "c": null}'), actual
    )
    assert docgen.json_matches(pattern('{"b": [..., 3], ...}'), actual)
    assert docgen.json_matches(pattern('{"b": [..., {"x": "y", ...}, ...], ...}'), actual)
    assert docgen.json_matches(
        pattern('{"s": "a ... b", ...}'), {"s": "a ... b"}
    )  # ... inside a string is text
    assert not docgen.json_matches(pattern('{"a": 1}'), actual)  # no ...: every member shown
    assert not docgen.json_matches(pattern('{"a": 2, ...}'), actual)
    assert not docgen.json_matches(pattern('{"a": true, ...}'), {"a": 1})
    assert not docgen.json_matches(pattern('{"b": [{"x": "hello world", "t": 0.25}], ...}'), actual)
    assert not docgen.json_matches(pattern('{"b": [..., 4], ...}'), actual)
    assert not docgen.json_matches(pattern('{"z": ..., ...}'), actual)


def test_the_example_edits_are_the_ones_change_a_gate_shows():
    """old.py is vLLM 0.28.0's file; new.py drops the fp8 guard of use_gluon_decode, new2.py raises the padded
    persistent qlen bound to 5 (network: the release is fetched once into the cache)."""
    one = docgen.command_output("old.py new.py", "diff")
    assert one.splitlines()[1:] == [
        "<         if is_quantized_kv_cache(kv_cache_dtype):",
        "<             return False",
    ]
    two = docgen.command_output("old.py new2.py", "diff")
    assert (
        "<     _ASM_PADDED_MAX_PS_QLEN: Final = 4" in two
        and ">     _ASM_PADDED_MAX_PS_QLEN: Final = 5" in two
    )


def test_the_invariant_reference_holds_every_catalogue_entry():
    from spec.proof.invariants import INVARIANTS

    text = docgen.invariants_page()
    for inv in INVARIANTS:
        assert f"## `{inv.id}`" in text and inv.statement in text and inv.symptom in text


def _prose(text: str) -> str:
    """The text outside fenced code blocks, code spans dropped."""
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(
        r"^#{1,6}\s+(.*)$", "\n".join(line for line in _prose(text.replace("`", "")).splitlines()), re.M
    ):
        s = docgen.slug(m.group(1))
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (
                fragment and dest.suffix == ".md" and fragment not in _anchors(dest.read_text())
            ):
                broken.append(f"{page.relative_to(docgen.REPO)}: {target}")
    assert not broken


def test_the_readme_says_truly_what_the_first_command_gives():
    """README: the first command exits 0, every verdict being the manifest's; the violations it lists are
    the ones the bundled manifest expects (every revision kernel-exists, total and gluon-only-where-built;
    the pre-fix ones a #51011 property; all but 0.34 no-known-wrong-kernel; all kv-scale-applied)."""
    from mla_model.revisions import REVISIONS
    from spec.proof.expectations import load_manifest
    from spec.proof.invariants import INVARIANT_BY_ID

    text = " ".join((docgen.REPO / "README.md").read_text().split())
    assert "It exits 0 when every verdict is the one the manifest records." in text
    assert "every revision violates `kernel-exists`, `total` and `gluon-only-where-built`" in text
    assert "every one `kv-scale-applied`" in text
    manifest = load_manifest()

    def expected(revision: str, invariant: str) -> str:
        row = manifest.expectation(revision, "aiter-0.1.20", invariant)
        assert row is not None
        return row.verdict

    for revision in REVISIONS:
        for inv in ("kernel-exists", "total", "gluon-only-where-built"):
            assert expected(revision, inv) == VIOLATED
        pre_fix = revision in ("vllm-0.27", "main-pre-51011")
        assert (
            any(expected(revision, i.id) == VIOLATED for i in INVARIANT_BY_ID.values() if i.pr_51011)
            == pre_fix
        )
        assert (expected(revision, "no-known-wrong-kernel") == VIOLATED) == (revision != "vllm-0.34"), (
            revision
        )
        assert expected(revision, "kv-scale-applied") == VIOLATED
