"""A file's gates lifted into z3, cached: lifting 0.34.0 in its tree takes 2.8 s, reading the terms back
0.02 s (2 cores, 2026-12-07).

``check FILE`` asks z3 whether the file violates anything its baseline does not (:mod:`spec.proof.growth`),
which needs the baseline's lifted gates on every run; a release is lifted again by every command that
checks it.  The terms are written as SMT-LIB 2 (z3's own ``to_smt2``, shared subterms as ``let``s: 1.0 MB
for 0.34.0) under ``$XDG_CACHE_HOME/mla-spec/lifted``, through :mod:`spec.realcode.cache_io`, keyed by
everything the terms depend on: the file's bytes, the tree it is read in and that tree's ``vllm/envs.py``
(the DCP verify default, knob defaults), where its reorder_batch_threshold comes from, the knob setting,
and the digest of mla-spec's own model and lifting code (:func:`code_digest`).  An entry that cannot be
read or parsed is lifted again and rewritten.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import z3

from spec.realcode import cache_io
from spec.realcode.source import cache_dir

_ROOT = Path(__file__).resolve().parents[2]  # the folder holding mla_model/ and spec/
_PREFIX = "mla_spec_lifted_"  # the constant each output term is asserted equal to in the SMT-LIB text


@cache
def code_digest() -> bytes:
    """mla-spec's code and data that decide a lifted term or a class: the model, the registries, the proof,
    the lifting."""
    h = hashlib.sha256()
    for folder in ("mla_model", "spec"):
        for f in sorted((_ROOT / folder).rglob("*")):
            if f.is_file() and (
                f.suffix == ".py" or (f.suffix == ".toml" and f.parent.name == "registry_data")
            ):
                h.update(f.relative_to(_ROOT).as_posix().encode() + b"\0" + f.read_bytes())
    return h.digest()


def entry(parts: list[bytes]) -> Path:
    """The cache file of the lifted terms whose inputs are ``parts`` (with mla-spec's code digest)."""
    key = hashlib.sha256()
    for part in (*parts, code_digest()):
        key.update(hashlib.sha256(part).digest())
    return cache_dir().parent / "lifted" / f"{key.hexdigest()[:24]}.json"


def lifted(parts: list[bytes], lift: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``lift()``'s outputs, read from the cache entry of ``parts`` where it holds them, else lifted and
    written there."""
    path = entry(parts)
    stored = cache_io.read_json(path, _is_entry)
    if stored is not None:
        terms = _parsed(stored["smt2"])
        if terms is not None and set(terms) | set(stored["plain"]) == set(stored["names"]):
            return {name: terms[name] if name in terms else stored["plain"][name] for name in stored["names"]}
    out = lift()
    solver = z3.Solver()
    for name, value in out.items():
        if z3.is_expr(value):
            solver.add(z3.Const(_PREFIX + name, value.sort()) == value)
    plain = {name: value for name, value in out.items() if not z3.is_expr(value)}
    cache_io.write_json(path, {"names": list(out), "plain": plain, "smt2": solver.to_smt2()})
    return out


def _parsed(text: str) -> dict[str, Any] | None:
    try:
        asserted = z3.parse_smt2_string(text)
    except z3.Z3Exception:
        return None
    out = {}
    for a in asserted:
        if not (z3.is_eq(a) and a.arg(0).decl().name().startswith(_PREFIX)):
            return None
        out[a.arg(0).decl().name().removeprefix(_PREFIX)] = a.arg(1)
    return out


def _is_entry(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("names"), list)
        and isinstance(data.get("plain"), dict)
        and isinstance(data.get("smt2"), str)
    )
