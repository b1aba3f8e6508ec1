"""The layout holds: one direction of dependency, and no module reaches into another's private names.

mla_model/ (what the backend does) imports nothing above it; spec/ (what must hold) imports mla_model only;
conformance/ (what the real thing does, and the CLI) may import both.  A name starting with ``_`` is private
to its module: importing it from elsewhere couples two modules through a detail (ruff's PLC2701 says the
same in CI; this test keeps it in the suite).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = {
    "mla_model": {"mla_model"},
    "spec": {"mla_model", "spec"},
    "conformance": {"mla_model", "spec", "conformance"},
}
OURS = ("mla_model", "spec", "conformance", "tests")
STUBS = "spec/realcode/executed/stubs"  # stand-ins for vLLM/AITER modules, imported as those packages


def _modules(package: str) -> list[Path]:
    return [
        p
        for p in (REPO / package).glob("**/*.py")
        if STUBS not in p.as_posix() and "generated" not in p.parts
    ]


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names, line) for every import in the file, function-level ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
    return out


@pytest.mark.parametrize("package", list(LAYERS))
def test_each_layer_imports_only_itself_and_below(package):
    wrong = [
        f"{p.relative_to(REPO)}:{line} imports {module}"
        for p in _modules(package)
        for module, _, line in _imports(p)
        if module.split(".")[0] in LAYERS and module.split(".")[0] not in LAYERS[package]
    ]
    assert not wrong


@pytest.mark.parametrize("package", OURS)
def test_no_module_imports_another_modules_private_name(package):
    wrong = [
        f"{p.relative_to(REPO)}:{line} imports {name} from {module}"
        for p in _modules(package)
        for module, names, line in _imports(p)
        if module.split(".")[0] in OURS
        for name in names
        if name.startswith("_") and name != "__version__"
    ]
    assert not wrong


def test_the_checks_see_a_violation():
    bad = REPO / "tests" / "_architecture_probe.py"
    bad.write_text("from spec.proof.prover import _private\nfrom conformance.cli import main\n")
    try:
        found = _imports(bad)
        assert ("spec.proof.prover", ["_private"], 1) in found and ("conformance.cli", ["main"], 2) in found
    finally:
        bad.unlink()
