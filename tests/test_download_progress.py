"""The release download reports its size and where it is cached, and returns pip's output for the
one-line errors (spec.realcode.source)."""

from __future__ import annotations

import sys

from rich.console import Console

import spec.realcode.source as source


def test_the_download_shows_its_size_and_cache_on_a_terminal_and_returns_pips_output(tmp_path, monkeypatch):
    recorded = Console(file=open(tmp_path / "stderr.txt", "w"), force_terminal=True, width=200)
    monkeypatch.setattr(source, "Console", lambda stderr=True: recorded)
    fake_pip = (
        "import pathlib, sys, time;"
        "print('  Downloading vllm-9.9.9.tar.gz (1.0 MB)', flush=True);"
        f"pathlib.Path({str(tmp_path)!r}, 'pip-unpack', 'vllm-9.9.9.tar.gz').parent.mkdir();"
        f"pathlib.Path({str(tmp_path)!r}, 'pip-unpack', 'vllm-9.9.9.tar.gz').write_bytes(b'x' * 500_000);"
        "time.sleep(0.6); print('ERROR: could not unpack', flush=True)"
    )
    out = source._download_with_progress(  # noqa: PLC2701
        [sys.executable, "-c", fake_pip], {}, tmp_path, "vLLM 9.9.9 sdist", tmp_path / "cache"
    )
    assert out.strip().splitlines()[-1] == "ERROR: could not unpack"
    recorded.file.close()
    shown = (tmp_path / "stderr.txt").read_text()
    assert f"cached in {tmp_path / 'cache'}" in shown
    assert "/1.0 MB" in shown  # the size pip announced, as the bar's total


def test_off_a_terminal_the_download_writes_nothing_on_stderr(tmp_path, capfd):
    """No note, no bar and no blank line where stderr is a log: a failed fetch's error stays one line."""
    fake_pip = "print('  Downloading vllm-9.9.9.tar.gz (1.0 MB)', flush=True); import time; time.sleep(0.5)"
    source._download_with_progress(  # noqa: PLC2701
        [sys.executable, "-c", fake_pip], {}, tmp_path, "vLLM 9.9.9 sdist", tmp_path / "cache"
    )
    assert capfd.readouterr().err == ""
