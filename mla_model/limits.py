"""The bounds on what mla-spec reads from a JSON-lines file (cases, results), kept in one place.

A cases or results file is input a user (or a pull request) hands us: each
limit below is checked before the thing it bounds is parsed, and a file past
one is refused in one line that names the limit.  A device or a FIFO is never
opened (``/dev/zero`` would be read forever); a regular file is stat'ed first.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 4 << 30  # 4 GiB: about 4 million cases at the ~1 KB a generated case line takes
MAX_LINE_BYTES = 1 << 20  # 1 MiB: a generated case line is under 2 KB, the longest results record under 3 KB
MAX_DEPTH = 32  # nesting of objects and arrays in one line (a case nests 2 deep, a results record 5)
CUT_CHARS = 80  # how much of a long value an error message shows

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_OPEN_CLOSE = str.maketrans("[{]}", "++--")


def cut(value: Any) -> str:
    """``repr(value)``, or its first :data:`CUT_CHARS` characters and its length: what a message shows."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= CUT_CHARS:
        return repr(value) if isinstance(value, str) else text
    return f"{text[:CUT_CHARS]!r}… ({len(text):,} characters)"


def cut_text(message: str, limit: int = 4 * CUT_CHARS) -> str:
    """A message cut to ``limit`` characters (a value it quotes may be a field of any length)."""
    return message if len(message) <= limit else f"{message[:limit]}… ({len(message):,} characters)"


def input_file(path: Path | str, what: str) -> int:
    """The size of ``path`` after checking it is a regular file within :data:`MAX_FILE_BYTES`; ValueError
    (one line) for a folder, a device, a FIFO, a socket or a file past the limit; OSError if it is missing."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a folder"
            if stat.S_ISDIR(st.st_mode)
            else "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "not a regular file"
        )
        raise ValueError(f"{what} {path}: {kind}; give a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ValueError(
            f"{what} {path}: {st.st_size:,} bytes, past the limit of {MAX_FILE_BYTES:,} bytes for one file"
        )
    return st.st_size


def depth(line: str) -> int:
    """How deep the objects and arrays of one JSON line nest (brackets inside strings do not count)."""
    brackets = _STRING.sub("", line).translate(_OPEN_CLOSE)
    level = deepest = 0
    for ch in brackets:
        if ch == "+":
            level += 1
            deepest = max(deepest, level)
        elif ch == "-":
            level -= 1
    return deepest


def json_lines(
    path: Path | str, what: str, start: int = 0, first_line: int = 1, complete: bool = False
) -> Iterator[tuple[int, int, str]]:
    """``(line number, offset after the line, text)`` of each line of a JSON-lines file from byte ``start``
    (line ``first_line``), each checked against :data:`MAX_LINE_BYTES` and :data:`MAX_DEPTH` (ValueError
    naming the line and the limit).  ``complete``: a last line without its newline is left out (a writer may
    be in the middle of it)."""
    input_file(path, what)
    read = start
    with open(path, "rb") as f:
        f.seek(start)
        n = first_line - 1
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(f"{path}:{n}: a line longer than {MAX_LINE_BYTES:,} bytes (the limit)")
            if complete and not raw.endswith(b"\n"):
                return
            read += len(raw)
            if read > MAX_FILE_BYTES:
                raise ValueError(f"{path}: past the limit of {MAX_FILE_BYTES:,} bytes for one file")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{n}: not UTF-8 text ({e})") from None
            if text.count("[") + text.count("{") > MAX_DEPTH and depth(text) > MAX_DEPTH:
                raise ValueError(f"{path}:{n}: nested deeper than {MAX_DEPTH} objects/arrays (the limit)")
            yield n, read, text
