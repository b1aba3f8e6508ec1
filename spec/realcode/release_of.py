"""Which vLLM release a ``rocm_aiter_mla.py`` comes from: what ``check`` compares a file with by default.

First the version of the vLLM tree around the file, where the tree states one, read as text (nothing of
vLLM is imported): its ``PKG-INFO`` (an sdist's, as the release cache keeps), ``vllm/_version.py``
(setuptools-scm writes it when vLLM is built or installed: 0.34.0's reads
``__version__ = version = '0.34.0'``), or an installed package's ``vllm-<version>.dist-info/METADATA``.
Only a release's version counts (``0.34.0``); a development build's (``0.34.1.dev12+g62d4bc3c7``) names
no release.  Else the release whose file is closest by content: of the releases the bundled revisions
follow (:data:`mla_model.revisions.RELEASE_OF_REVISION`, fetched once into the cache where missing), the
one whose lines the file shares most of (difflib's ratio), the newest on a tie.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from mla_model.revisions import RELEASE_OF_REVISION
from spec.realcode.source import fetch_release, tree_of

_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")
_PKG_VERSION = re.compile(r"^Version: *(\S+) *$", re.M)


@dataclass(frozen=True)
class ReleaseOf:
    release: str  # "0.34.0"
    how: str  # why this release, for the output: "the version of the vLLM tree around the file (PKG-INFO)"


def release_of(path: Path, text: str) -> ReleaseOf:
    """The release the file at ``path`` (whose text is ``text``) comes from (see the module docstring)."""
    tree = tree_of(path)
    if tree is not None:
        stated = tree_version(tree)
        if stated is not None and _RELEASE.match(stated[0]):
            return ReleaseOf(stated[0], f"the version its vLLM tree states in {stated[1]}")
    return closest_release(text)


def tree_version(tree: Path) -> tuple[str, str] | None:
    """The version a vLLM tree states and the file it states it in; None where none does."""
    for name in ("PKG-INFO", *sorted(p.name for p in tree.glob("vllm-*.dist-info"))):
        file = tree / name / "METADATA" if name.endswith(".dist-info") else tree / name
        try:
            found = _PKG_VERSION.search(file.read_text(errors="replace"))
        except OSError:
            continue
        if found:
            return found.group(1), f"{name}/METADATA" if name.endswith(".dist-info") else name
    version = _version_py(tree / "vllm" / "_version.py")
    return None if version is None else (version, "vllm/_version.py")


def _version_py(file: Path) -> str | None:
    """The string ``__version__`` is assigned in a ``_version.py`` (parsed, never run)."""
    try:
        tree = ast.parse(file.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def closest_release(text: str) -> ReleaseOf:
    """The known release whose file shares most lines with ``text`` (the newest on a tie)."""
    theirs = {release: fetch_release(release).read_text() for release in RELEASE_OF_REVISION.values()}
    for release, their_text in theirs.items():
        if their_text == text:
            return ReleaseOf(
                release, "no vLLM version around the file: the release whose file it is, unchanged"
            )
    lines = text.splitlines()
    ratio = {
        release: difflib.SequenceMatcher(None, their_text.splitlines(), lines, autojunk=False).ratio()
        for release, their_text in theirs.items()
    }
    release = max(reversed(ratio), key=ratio.__getitem__)  # reversed: the newest wins a tie
    return ReleaseOf(
        release,
        f"no vLLM version around the file: the release closest by content "
        f"({ratio[release]:.2%} of lines alike)",
    )
