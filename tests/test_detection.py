"""Detection, measured (issue 24 item 6): the corpus of maintainer edits in benchmarks/detection.py.

The page docs/explanation/detection.md is rendered from the stored results alone; the slow test runs the
corpus again and holds every edit's verdict to the stored one, so a check that stops catching an edit (or
starts crying wolf) fails here, and so does one that catches an edit the page still calls missed.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import detection

STORED = json.loads(detection.RESULTS.read_text())


def test_the_corpus_is_large_enough_and_each_edit_says_what_it_must_raise():
    changing = [e for e in detection.CORPUS if e.kind == detection.CHANGES]
    preserving = [e for e in detection.CORPUS if e.kind == detection.PRESERVES]
    assert len(detection.CORPUS) >= 40 and len(changing) >= 25 and len(preserving) >= 15
    assert len({e.name for e in detection.CORPUS}) == len(detection.CORPUS)
    quiet = [e for e in detection.CORPUS if e.kind != detection.CHANGES]
    assert all(e.expect for e in changing) and not any(e.expect for e in quiet)
    assert {e.kind for e in detection.CORPUS} == {detection.CHANGES, detection.PRESERVES, detection.WIDENS}
    assert {e.release for e in detection.CORPUS} == {"0.28.0", "0.34.0"}


def test_the_page_is_the_rendering_of_the_stored_results():
    assert [r["name"] for r in STORED["edits"]] == [e.name for e in detection.CORPUS]
    assert detection.PAGE.read_text() == detection.render(STORED)


@pytest.mark.network
def test_every_edit_script_applies_to_its_release_file_as_written():
    from spec.realcode.source import fetch_release

    for e in detection.CORPUS:
        text = fetch_release(e.release).read_text()
        assert e.apply(text) != text, e.name


def test_an_edit_whose_anchor_moved_is_refused_naming_it():
    edit = detection.Edit("moved", "0.34.0", detection.PRESERVES, "", (("no such line\n", "x", 1),))
    with pytest.raises(ValueError, match="moved: 'no such line\\\\n' occurs 0 times"):
        edit.apply("a file\n")


def test_verdicts_follow_exit_status_and_what_was_raised():
    changing = detection.CORPUS[0]
    assert (
        detection.verdict(changing, {"exit": 1, "new_classes": {"kernel-exists": 2}, "executed": {}})
        == "caught"
    )
    assert detection.verdict(changing, {"exit": 1, "new_classes": {"total": 1}, "executed": {}}) == "missed"
    assert detection.verdict(changing, {"exit": 0, "new_classes": {}, "executed": None}) == "missed"
    assert detection.verdict(changing, {"exit": 2, "error": "x"}) == "error"
    quiet = next(e for e in detection.CORPUS if e.kind == detection.PRESERVES)
    assert detection.verdict(quiet, {"exit": 0, "new_classes": {}, "executed": {}}) == "quiet"
    assert detection.verdict(quiet, {"exit": 1, "new_classes": {"total": 1}, "executed": {}}) == "false alarm"


@pytest.mark.network
@pytest.mark.slow
def test_the_corpus_run_again_gives_the_stored_verdicts():
    fresh = detection.run_corpus()
    assert {r["name"]: r["verdict"] for r in fresh["edits"]} == {
        r["name"]: r["verdict"] for r in STORED["edits"]
    }
