"""Expected verdicts: the committed manifest that ``mla-spec check`` compares its verdicts with.

Like the manifests of tlaplus/Examples, the manifest records what each (revision, registry, invariant)
is known to give and why, so the main command answers "did anything change?" and exits 0 on the bundled
tree, where the old revisions are violated on purpose.  A row:

.. code-block:: toml

    [[expect]]
    revision = ["vllm-0.27", "vllm==0.27.1"]  # fnmatch patterns, a string or a list
    registry = "*"  # optional, default "*"
    invariant = "fp8-never-reaches-gluon"  # optional, default "*"
    verdict = "VIOLATED"  # PROVED or VIOLATED
    reason = "pre-fix: the bug #51011 fixed"

Rows are tried in order and the first row that matches a verdict's (revision, registry, invariant) is
its expectation, so a catch-all row goes last.  A verdict is a *surprise* when it differs from its
row's, when no row matches it, or when it is UNKNOWN (a timeout is never what anyone expects).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.prover import CheckResult
from spec.proof.verdict import PROVED, UNKNOWN, VIOLATED, Verdict

BUNDLED = Path(__file__).with_name("expected_verdicts.toml")
_KEYS = {"revision", "registry", "invariant", "verdict", "reason"}


class ManifestError(ValueError):
    """A manifest that cannot be read or has a malformed row (one line, naming the row)."""


@dataclass(frozen=True)
class Expectation:
    """One manifest row: the verdict expected wherever all three pattern lists match."""

    revisions: tuple[str, ...]
    registries: tuple[str, ...]
    invariants: tuple[str, ...]
    verdict: Verdict
    reason: str
    row: int  # 1-based position among the manifest's [[expect]] rows

    def matches(self, revision: str, registry: str, invariant: str) -> bool:
        return all(
            any(fnmatchcase(value, p) for p in patterns)
            for value, patterns in (
                (revision, self.revisions),
                (registry, self.registries),
                (invariant, self.invariants),
            )
        )


@dataclass(frozen=True)
class Manifest:
    path: Path
    rows: tuple[Expectation, ...]

    @property
    def label(self) -> str:
        """How messages name it: the bundled one by its place in the repository."""
        return "the bundled spec/proof/expected_verdicts.toml" if self.path == BUNDLED else str(self.path)

    def expectation(self, revision: str, registry: str, invariant: str) -> Expectation | None:
        return next((e for e in self.rows if e.matches(revision, registry, invariant)), None)


@dataclass(frozen=True)
class Outcome:
    """A check result next to the row that says what was expected of it."""

    result: CheckResult
    expected: Expectation | None
    manifest: str  # the manifest's label

    @property
    def counts(self) -> bool:
        """Whether a surprise here changes the exit status: a warning-level invariant's does not, unless
        it is UNKNOWN (a timeout is never a pass)."""
        return self.result.verdict == UNKNOWN or INVARIANT_BY_ID[self.result.invariant].level == "error"

    @property
    def surprise(self) -> bool:
        return (
            self.result.verdict == UNKNOWN
            or self.expected is None
            or self.result.verdict != self.expected.verdict
        )

    def to_json(self) -> dict[str, Any]:
        e = self.expected
        return {
            "expected": None if e is None else {"verdict": e.verdict, "reason": e.reason, "row": e.row},
            "surprise": self.surprise,
        }


def _patterns(row: dict[str, Any], key: str, n: int) -> tuple[str, ...]:
    value = row.get(key, "*")
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
        raise ManifestError(f"row {n}: {key} must be a non-empty string or list of strings")
    return tuple(values)


def _row(row: Any, n: int) -> Expectation:
    if not isinstance(row, dict):
        raise ManifestError(f"row {n} is not a table")
    unknown = sorted(set(row) - _KEYS)
    if unknown:
        raise ManifestError(
            f"row {n}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})"
        )
    if "revision" not in row:
        raise ManifestError(f"row {n}: no revision")
    verdict = row.get("verdict")
    if verdict not in (PROVED, VIOLATED):
        raise ManifestError(f"row {n}: verdict must be PROVED or VIOLATED, not {verdict!r}")
    reason = row.get("reason")
    if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
        raise ManifestError(f"row {n}: reason must be one non-empty line")
    return Expectation(
        _patterns(row, "revision", n),
        _patterns(row, "registry", n),
        _patterns(row, "invariant", n),
        Verdict(verdict),
        reason.strip(),
        n,
    )


def load_manifest(path: Path = BUNDLED) -> Manifest:
    """Read and validate a manifest; every problem is a :class:`ManifestError` naming the file."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read the manifest {path}: {getattr(e, 'strerror', None) or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{path} is not TOML: {e}") from None
    unknown = sorted(set(data) - {"expect"})
    if unknown:
        raise ManifestError(f"{path}: unknown table(s) {', '.join(unknown)}; rows are [[expect]]")
    rows = data.get("expect", [])
    if not isinstance(rows, list) or not rows:
        raise ManifestError(f"{path} has no [[expect]] rows")
    try:
        return Manifest(Path(path), tuple(_row(r, n) for n, r in enumerate(rows, 1)))
    except ManifestError as e:
        raise ManifestError(f"{path}: {e}") from None


def compare(
    results: Iterable[CheckResult], manifest: Manifest, judged_as: dict[str, str] | None = None
) -> list[Outcome]:
    """Each result with its expectation, in the results' order.  ``judged_as`` maps a target (a file's
    path) to the revision or release whose rows it is held to (the release the file comes from)."""
    alias = judged_as or {}
    return [
        Outcome(
            r,
            manifest.expectation(alias.get(r.revision, r.revision), r.registry, r.invariant),
            manifest.label,
        )
        for r in results
    ]
