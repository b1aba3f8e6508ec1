"""What ``check`` compares a ``rocm_aiter_mla.py`` with: the baseline, and its classes, computed once.

The baseline is the release the file comes from (:mod:`spec.realcode.release_of`) unless the user names a
release or a path.  Both are read in a vLLM tree: their own, or, for a file that sits in none (a lone
copy, a pre-commit checkout holding only the file), the other's, so that a lone copy of a release's file
gets that release's executed reorder_batch_threshold and DCP verify default
(:func:`spec.realcode.revision.real_revision`) and is judged as the release is.

A baseline's classes (:mod:`spec.proof.classes`) for every registry and invariant are computed once and
cached in ``$XDG_CACHE_HOME/mla-spec/baselines`` (written through :mod:`spec.realcode.cache_io`), keyed by
the baseline file's bytes, the tree it is read in, where its reorder_batch_threshold comes from, and the
digest of mla-spec's own model and proof code (a change there can change a class), so checking a file
proves only the file.  A baseline with a timeout or a class left unenumerated is used but not cached.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mla_model.registry import REGISTRY_IDS
from spec.proof.check_all import check_all
from spec.proof.classes import Baseline, BaselineResult
from spec.proof.invariants import INVARIANT_BY_ID
from spec.proof.verdict import UNKNOWN
from spec.realcode import cache_io
from spec.realcode import revision as real_code
from spec.realcode.lifted_cache import code_digest
from spec.realcode.release_of import release_of
from spec.realcode.revision import threshold_origin
from spec.realcode.source import cache_dir, resolve, tree_of


@dataclass(frozen=True)
class Choice:
    """A check target's baseline: what to read it from and why, and the vLLM tree each side is read in."""

    spec: str  # a release ("0.34.0") or a path, as real_revision takes it
    how: str  # why it is the baseline
    target_tree: Path | None  # the tree the target is read in (None: its own, or none)
    baseline_tree: Path | None  # the tree the baseline is read in


def choose(target: str, given: str | None) -> Choice:
    """The baseline of ``target`` (a release or a path): ``given`` (a release or a path), else the release
    the file comes from.  Raises SourceError (one line) for a baseline that cannot be read."""
    source = resolve(target)
    if given is None:
        origin = release_of(source.path, source.text)
        spec, how = origin.release, origin.how
    else:
        spec, how = given, "given with --baseline"
    base = resolve(spec)
    own, theirs = tree_of(source.path), tree_of(base.path)
    if own is None and theirs is not None:
        how += (
            f"; the file sits in no vLLM tree: read in {base.label}'s, whose own builder's "
            "reorder_batch_threshold stands in for the file's (a lone file is never executed)"
        )
    return Choice(spec, how, None if own is not None else theirs, theirs or own)


def baseline_classes(choice: Choice, timeout: float) -> Baseline:
    """The classes of every (registry, invariant) of ``choice``'s baseline: read from the cache, or
    computed (every class, no cap) and cached where nothing timed out."""
    base = resolve(choice.spec)
    entry = _entry(choice, ".json")
    cached = cache_io.read_json(entry, _is_entry)
    if cached is not None:
        return Baseline.from_json(cached, base.label, choice.how)
    cache_io.ensure_writable(entry.parent)  # before the proof, not after
    results = check_all([baseline_revision(choice)], REGISTRY_IDS, list(INVARIANT_BY_ID), None, timeout)
    baseline = Baseline(
        base.label, choice.how, {(r.registry, r.invariant): BaselineResult.of(r) for r in results}
    )
    if all(r.complete and r.verdict != UNKNOWN for r in results):
        cache_io.write_json(entry, baseline.to_json())
    return baseline


def baseline_expected(choice: Choice, shapes: list[Any]) -> list[dict[str, Any]]:
    """The baseline's lifted gates' answers on the second judge's first shapes
    (:func:`spec.realcode.second_judge.baseline_answers`): read from the cache where it holds them for
    these shapes, else worked out and cached."""
    from spec.realcode.second_judge import baseline_answers

    entry = _entry(choice, ".answers.json")
    wanted = [s.to_json() for s in shapes]
    cached = cache_io.read_json(
        entry,
        lambda d: (
            isinstance(d, dict)
            and isinstance(d.get("answers"), list)
            and len(d["answers"]) == len(d.get("shapes", ()))
        ),
    )
    if cached is not None and cached["shapes"] == wanted:
        return cached["answers"]
    cache_io.ensure_writable(entry.parent)
    answers = baseline_answers(baseline_revision(choice), shapes)
    cache_io.write_json(entry, {"shapes": wanted, "answers": answers})
    return answers


def baseline_revision(choice: Choice) -> Any:
    """The baseline's lifted gates, read in its tree."""
    return real_code.real_revision(choice.spec, tree=choice.baseline_tree)


def _entry(choice: Choice, suffix: str) -> Path:
    """The cache file of ``choice``'s baseline: keyed by the baseline file's bytes, the tree it is read in,
    where its reorder_batch_threshold comes from, and mla-spec's own code."""
    key = hashlib.sha256()
    for part in (
        resolve(choice.spec).path.read_bytes(),
        str(choice.baseline_tree).encode(),
        threshold_origin(choice.spec, choice.baseline_tree).encode(),
        code_digest(),
    ):
        key.update(hashlib.sha256(part).digest())
    return cache_dir().parent / "baselines" / f"{key.hexdigest()[:24]}{suffix}"


def _is_entry(data: Any) -> bool:
    """A cached baseline as written (anything else is rebuilt)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("results"), list)
        and all(
            isinstance(r, dict)
            and {"registry", "invariant", "verdict", "complete", "classes"} <= set(r)
            and isinstance(r["classes"], list)
            and all(isinstance(c, dict) and isinstance(c.get("class_id"), str) for c in r["classes"])
            for r in data["results"]
        )
    )
