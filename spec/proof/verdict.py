"""The one verdict vocabulary of a proof, and the one default solver budget.

A verdict is PROVED (no shape breaks it), VIOLATED (a shape does, with a
counterexample) or UNKNOWN (the solver or the lifting gave up: never a pass).
check, audit, the mutation report's equivalence proofs and every JSON output
spell them this way.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    PROVED = "PROVED"
    VIOLATED = "VIOLATED"
    UNKNOWN = "UNKNOWN"


PROVED, VIOLATED, UNKNOWN = Verdict.PROVED, Verdict.VIOLATED, Verdict.UNKNOWN

# Milliseconds per solver call, wherever a command does not take --timeout.
DEFAULT_TIMEOUT_MS = 30_000
