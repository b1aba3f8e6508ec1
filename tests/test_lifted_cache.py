"""The lifted gates cache (spec.realcode.lifted_cache): what is read back is what was lifted, and an entry
that cannot be read is lifted again."""

from __future__ import annotations

import z3

from spec.realcode import lifted_cache
from spec.realcode.cache_io import read_json


def _lift() -> dict:
    x, y = z3.Int("num_heads"), z3.Bool("causal")
    return {"gate": z3.And(x > 3, y), "H": z3.If(y, x * 2, x), "builder_gv": None, "paths": 7}


def test_the_terms_read_back_are_the_terms_lifted(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls = []

    def lift():
        calls.append(1)
        return _lift()

    first = lifted_cache.lifted([b"file", b"tree"], lift)
    again = lifted_cache.lifted([b"file", b"tree"], lift)
    assert len(calls) == 1 and again["paths"] == 7 and again["builder_gv"] is None
    for name in ("gate", "H"):
        s = z3.Solver()
        s.add(first[name] != again[name])
        assert s.check() == z3.unsat, name
    lifted_cache.lifted([b"other file", b"tree"], lift)
    assert len(calls) == 2  # another input, another entry


def test_a_damaged_entry_is_lifted_again_and_rewritten(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    lifted_cache.lifted([b"f"], _lift)
    path = lifted_cache.entry([b"f"])
    path.write_text('{"names": ["gate"], "plain": {}, "smt2": "(assert (= mla_spec_lifted_gate"}')
    out = lifted_cache.lifted([b"f"], _lift)
    assert set(out) == {"gate", "H", "builder_gv", "paths"}
    assert "mla_spec_lifted_H" in read_json(path, lambda d: True)["smt2"]
