"""Lifting that survives refactoring (issue 24 item 2): every local of every routing method renamed, in
each release file 0.27.1-0.34.0, and check must say of the rewritten file what it says of the release.

check FILE compares the file class by class with its release as baseline and executes it as the second
judge, so "says the same" is: exit 0, no NEW and no GONE class of any invariant, and the executed file
agreeing with its lifted gates. Before the gates were found by where they flow, renaming the local of the
persistent gate exited 2, and renaming the DCP route's or the Triton verify's local invented classes.
"""

from __future__ import annotations

import pytest

from benchmarks.detection import check_outcome
from tests.rewrites import rename_locals
from tests.test_check_baseline import RELEASES


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_renaming_every_local_of_the_routing_methods_changes_nothing_check_says(release, tmp_path):
    from spec.realcode.source import fetch_release

    text, renamed = rename_locals(fetch_release(release).read_text())
    assert renamed >= 60  # every routing local of every release: 63 (0.27.1) to 82 (0.32.0, 0.34.0)
    result = check_outcome(f"renamed-{release}", release, text, tmp_path)
    assert "error" not in result, result
    assert (result["exit"], result["new_classes"], result["gone_classes"]) == (0, {}, {}), result
    assert result["executed"] == {}, result  # ran, and agreed everywhere


def test_a_rename_keeps_comments_lines_and_keyword_arguments():
    text = (
        "class B:\n"
        "    def _build_decode(self, n):\n"
        "        gate = n > 1  # why\n"
        '        return Meta(gate=gate, n=f"{gate}", x=self.gate)\n'
    )
    out, renamed = rename_locals(text)
    assert renamed == 1
    assert out == (
        "class B:\n"
        "    def _build_decode(self, n):\n"
        "        gate_rw = n > 1  # why\n"
        '        return Meta(gate=gate_rw, n=f"{gate_rw}", x=self.gate)\n'
    )
