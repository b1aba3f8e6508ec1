"""Fuzz the mla-spec command line (hypothesis): every input ends in exit 0-3, and bad input is one line.

For every generated input, the command line

* lets no exception escape (a traceback a user would see; :func:`tests.cli.run` raises on one),
* exits 0, 1, 2 or 3 (:mod:`conformance.cli.errors`),
* and on exit 2 writes exactly one line to stderr, ``mla-spec: error: ...``.

Two kinds of group, 500 examples each, derandomized so that CI is reproducible:

* **Arguments**, one group per command (and one for the group itself): argv drawn from the command's own
  click parameters (names, ``--name=value`` spellings, types, choices, repeats, positional arguments) mixed
  with junk: unknown flags and values, ``nan``/``inf``/``-1``/huge numbers, empty strings, missing files,
  folders, ``/dev/null``, binary and non-backend files, odd release specs (``0.0.999``, ``vllm==x``,
  ``../``), names with rich markup, a newline or an undecodable byte in them.
* **File contents**, for ``conform --cases FILE --out RESULTS`` (the model backend on the CPU,
  ``--kv-len 8``, at most two cases) and ``explain --cases FILE --case ID``: real case lines from
  tests/generated/vllm_028/cases.jsonl, the same lines with a field dropped, retyped or given an unknown
  value, JSON that is not an object, duplicate ids, binary junk, empty files; and results files with torn,
  duplicate, retyped and foreign records.

The library calls behind the commands are replaced by fast fakes (:class:`Fakes`) that return real data
(computed once per worker: a check_all, a diff, a routing graph, generated cases) or raise the library's
documented errors (SourceError, HarnessError, LiftingUnsupported, SolverGaveUp, Undecided, ...), so what
runs 500 times is the CLI layer: parsing, validation, file handling, rendering and exit statuses.  Nothing
is downloaded (the release fetch raises SourceError), no z3 call runs per example, and conform's pytest
child runs the plugin's case loop in-process (the real runner on the model backend).  Only the PNG/SVG
drawing is stubbed (matplotlib takes ~0.3 s a graph; tests/test_graph.py draws for real); DOT is real.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import itertools
import json
import shutil
import tempfile
import time
import types
import zlib
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.cli import COMMANDS, command
from spec.analyses.diff import diff as real_diff
from spec.analyses.explain import explain as real_explain
from spec.analyses.graph import pin_witnesses as real_pin_witnesses
from spec.analyses.graph import routing_graph as real_routing_graph
from spec.proof.check_all import check_all as real_check_all
from tests.cli import run

pytest.importorskip("torch")  # conform's replay (the model backend) needs it

# Per command: the README's test command has 3 minutes on 2 cores (issue 26), so 200 (was 500);
# tests/test_cli_fuzz_findings.py pins what earlier runs found.
EXAMPLES = 200
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,  # nothing read or written between runs (derandomized runs do not need it)
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,  # the fixtures below hold nothing an example changes
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)


def chance(k: int, n: int) -> st.SearchStrategy[bool]:
    """True about k times in n (st.integers would favour its bounds: 0 comes up half the time)."""
    return st.sampled_from([True] * k + [False] * (n - k))


REPO = Path(__file__).resolve().parent.parent
REAL_CASES = REPO / "tests" / "generated" / "vllm_028" / "cases.jsonl"
BINARY = b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x00binary"
# A stand-in rocm_aiter_mla.py: the fake loader treats a file that starts so as a backend whose gates are
# the named model revision's (a real file's gates would need the lifter, which is no CLI matter).
MARKER = "# mla-spec fuzz stand-in of rocm_aiter_mla.py, gates as "
RELATIVE = Path("vllm/v1/attention/backends/mla/rocm_aiter_mla.py")
# The releases the fake PyPI has (0.32.0 exists but no model revision describes it); any other is missing.
RELEASES = {
    "0.27.1": "vllm-0.27",
    "0.28.0": "vllm-0.28",
    "0.29.0": "vllm-0.29",
    "0.30.0": "vllm-0.30",
    "0.31.0": "vllm-0.31",
    "0.32.0": None,
    "0.33.0": "vllm-0.33",
    "0.34.0": "vllm-0.34",
}
# Names a user can give a file: rich markup (an unmatched closing tag), a newline, an undecodable byte.
ODD_NAMES = ("[bold]", "[/bold]", "a[", "new\nline", "bad\udcffname", "ü space", "-dash")


# --------------------------------------------------------------------------------------- the outcome


def check_outcome(argv: list[str], cwd: Path) -> Any:
    """Run ``mla-spec *argv`` in ``cwd`` and assert the contract; return the result."""
    out = run(*argv, cwd=cwd)  # raises on an exception that escapes the command
    assert out.returncode in (0, 1, 2, 3), (argv, out.returncode, out.stderr[-2000:])
    if out.returncode == 2:
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("mla-spec: error: "), (argv, out.stderr)
    return out


# --------------------------------------------------------------------------------------- inputs on disk


class World:
    """Input files every example may name (absolute paths), and a folder for each example's outputs."""

    def __init__(self, root: Path, files: dict[str, str], real_lines: list[str], record: dict[str, Any]):
        self.root, self.files = root, files
        self.real_lines = real_lines  # the first lines of tests/generated/vllm_028/cases.jsonl
        self.record = record  # a model backend's result record: the template of a results line
        self.values: dict[tuple[str, str | None], tuple[list[str], list[str]]] = {}  # by _values
        self.draws: dict[str, list[tuple[click.Parameter, OptionDraws]]] = {}  # by _draws

    def __repr__(self) -> str:
        return f"World({self.root})"

    def scratch(self) -> Path:
        """A fresh working folder holding a folder, a text file and a binary file."""
        d = Path(tempfile.mkdtemp(dir=self.root / "scratch"))
        (d / "d").mkdir()
        (d / "f.txt").write_text("not a results line\n")
        (d / "bin.out").write_bytes(BINARY)
        return d


def _backend_file(path: Path, model: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{MARKER}{model}\n")
    return str(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "scratch").mkdir()
    inp = root / "in"
    inp.mkdir()
    lines = REAL_CASES.read_text().splitlines()[:4]
    files = {
        "empty": inp / "empty.jsonl",
        "binary": inp / "binary.bin",
        "text": inp / "text.py",
        "syntax": inp / "syntax.py",
        "one-case": inp / "one.jsonl",
        "two-cases": inp / "two.jsonl",
        "twice": inp / "twice.jsonl",
        "folder": inp / "folder",
    }
    files["empty"].write_bytes(b"")
    files["binary"].write_bytes(BINARY)
    files["text"].write_text("x = 1\n")
    files["syntax"].write_text("x = (\n")
    files["one-case"].write_text(lines[0] + "\n")
    files["two-cases"].write_text(lines[1] + "\n" + lines[2] + "\n")
    files["twice"].write_text(lines[0] + "\n" + lines[0] + "\n")
    files["folder"].mkdir()
    paths = {k: str(v) for k, v in files.items()}
    paths["missing"] = str(inp / "missing.jsonl")
    paths["missing-dir"] = str(inp / "no" / "such" / "rocm_aiter_mla.py")
    paths["backend"] = _backend_file(inp / "rocm_aiter_mla.py", "vllm-0.28")
    paths["tree"] = str(inp / "tree")
    _backend_file(inp / "tree" / RELATIVE, "vllm-0.30")
    for i, name in enumerate(ODD_NAMES):
        paths[f"odd-backend-{i}"] = _backend_file(inp / name / "x[" / "]y" / "rocm_aiter_mla.py", "vllm-0.29")
        odd = inp / f"{name}.jsonl"
        odd.write_text(lines[0] + "\n")
        paths[f"odd-cases-{i}"] = str(odd)
    from conformance import runner
    from conformance.backends import load_backend
    from mla_model.case import Case

    case = Case.from_json(json.loads(lines[1]))
    record = runner.run_case(case, load_backend("model"), "cpu", 8)
    return World(root, paths, lines, record)


# --------------------------------------------------------------------------------------- the fakes


@functools.cache
def _check_pool() -> dict[str, Any]:
    """One real CheckResult per invariant (vllm-0.27 with aiter-0.1.19: violations with counterexamples)."""
    from spec.proof.invariants import INVARIANT_BY_ID

    results = real_check_all(["vllm-0.27"], ["aiter-0.1.19"], list(INVARIANT_BY_ID), 3, 10.0)
    return {r.invariant: r for r in results}


@functools.cache
def _diff() -> Any:
    from mla_model.registry import load_registry
    from mla_model.revisions import REVISIONS

    return real_diff(REVISIONS["vllm-0.27"], REVISIONS["vllm-0.28"], load_registry("aiter-0.1.20"))


@functools.cache
def _graph() -> Any:
    g = real_routing_graph("vllm-0.28", "aiter-0.1.20")
    real_pin_witnesses(g)
    return g


@functools.cache
def _cases(revision: str, registry: str) -> list[Any]:
    """Real cases of a revision (the route the model gives a few shapes), as generate returns them."""
    from mla_model.case import Case, case_id, case_seed, expected_outcome, expected_route
    from mla_model.registry import load_registry
    from mla_model.revisions import REVISIONS
    from mla_model.shape import Shape

    shapes = [
        Shape(num_heads=8),
        Shape(num_heads=16, kv_cache_dtype="fp8"),
        Shape(arch="gfx942", num_heads=12, spec_method="mtp", num_spec_tokens=5, max_qo_len=6),
        Shape(num_heads=128, spec_method="eagle3", num_spec_tokens=2, max_qo_len=3, num_reqs=2),
    ]
    reg = load_registry(registry)
    return [
        Case(
            case_id(s),
            s,
            expected_route(REVISIONS[revision], reg, s),
            f"mcdc use_gluon_decode: num_heads < 16 (unique-cause) [{i}]",
            revision,
            registry,
            case_seed(case_id(s)),
            expected_outcome(REVISIONS[revision], reg, s),
        )
        for i, s in enumerate(shapes)
    ]


@functools.cache
def _mutants() -> list[Any]:
    from spec.analyses.mutants import Mutant

    return [
        Mutant(f"M{i:02d}-{op}", fn, op, 100 + i, desc, 10 * i, 10 * i + 5, "x")
        for i, (fn, op, desc) in enumerate(
            [
                ("use_gluon_decode", "cmp", "num_heads < 16 -> num_heads <= 16"),
                ("get_actual_mla_num_heads", "const", "16 -> 32"),
                ("forward_mqa", "bool", "use_gluon and fp8 -> use_gluon or fp8"),
                ("_mtp_decode_qlen", "arith", "qlen - 1 -> qlen"),
            ]
        )
    ]


class Fakes:
    """Stand-ins for the library entry points the commands call; ``plan`` (drawn per example) says how each
    behaves: the real data, a variant of it, or one of the library's documented errors."""

    def __init__(self) -> None:
        self.plan: dict[str, Any] = {}

    # --- where a release or file comes from (offline) ---

    def source(self, spec: str) -> tuple[str, str]:
        """(label, model revision whose gates it has) of a release or a stand-in file; else SourceError."""
        from spec.realcode.source import SourceError, release_version, resolve

        version = release_version(spec)
        if version is not None:
            if version not in RELEASES:
                raise SourceError(f"vLLM release {version} does not exist on PyPI")
            return f"vllm=={version}", RELEASES[version] or "vllm-0.31"
        src = resolve(spec)  # real: folders, missing and unreadable files are its errors
        if not src.text.startswith(MARKER):
            raise SourceError(f"{src.label}: no class AiterMLAHelper; not a vLLM ROCm AITER MLA backend file")
        return src.label, src.text[len(MARKER) :].strip()

    def release_tree(self, version: str) -> Path:
        from spec.realcode.source import SourceError

        raise SourceError(f"could not fetch vLLM {version} from PyPI: offline (the fuzz downloads nothing)")

    def real_revision(self, spec: str, lifting: bool = True, tree: Path | None = None) -> Any:
        from mla_model.revisions import REVISIONS

        label, model = self.source(spec)
        return dataclasses.replace(REVISIONS[model], id=label, title=f"real gates of {label}", source=spec)

    # --- check, audit ---

    def check_all(self, targets, registries, invariants, max_classes, timeout) -> list[Any]:
        from spec.proof.verdict import UNKNOWN

        pool, out = _check_pool(), []
        for i, (t, reg, inv) in enumerate(itertools.product(targets, list(registries), list(invariants))):
            base = pool[inv]
            r = dataclasses.replace(
                base,
                revision=t if isinstance(t, str) else t.id,
                registry=reg,
                invariant=inv,
                counterexamples=base.counterexamples[:max_classes],
                complete=base.complete and (max_classes is None or len(base.counterexamples) <= max_classes),
            )
            if self.plan["check"] == "unknown" and i % 3 == 0:
                reason = (
                    f"z3 timed out after {timeout:g} s" if i % 2 else "lifting unsupported (a while loop)"
                )
                r = dataclasses.replace(r, verdict=UNKNOWN, counterexamples=[], classes=0, reason=reason)
            out.append(r)
        return out

    def _differential(self, label: str, model: str, count: int) -> Any:
        from spec.realcode.executed.differential import Differential, Disagreement
        from spec.realcode.executed.harness import HarnessError
        from spec.realcode.source import SourceError

        how = self.plan["executed"]
        if how == "harness-error":
            raise HarnessError(f"{label}: the harness stubs lack vllm.foo.bar (ImportError)")
        if how == "source-error":
            raise SourceError(f"{label}: cannot read: [Errno 13] Permission denied")
        shapes = [c.shape for r in _check_pool().values() for c in r.counterexamples][:3]
        wrong = (
            [Disagreement("path", s.to_json(), "gluon_decode", "asm_persistent") for s in shapes]
            if how == "disagree"
            else []
        )
        return Differential(
            label, model, "aiter-0.1.20", count + 40, count + 31, 1.25, {"path": 71, "kernel": 60}, wrong
        )

    def executed_for_releases(self, releases, count) -> dict[str, Any]:
        from spec.realcode.bind import default_model
        from spec.realcode.source import release_version

        out: dict[str, Any] = {}
        for spec in releases:
            version = release_version(spec)
            label = f"vllm=={version}" if version else spec
            model = default_model(label)
            out[label] = self._differential(label, model, count) if model else None
        return out

    # --- bind ---

    def bind(
        self, spec: str, model_id: str | None = None, symbolic: bool = True, timeout_ms: int | None = None
    ) -> Any:
        from spec.realcode.bind import Bound, Comparison, default_model

        label, _ = self.source(spec)
        model_id = model_id or default_model(label)
        if model_id is None:
            raise ValueError(f"no model revision is known for {label}; pass --revision")
        how = self.plan["bind"]
        shape = _cases(model_id, "aiter-0.1.20")[0].shape.to_json()
        rows = [
            Comparison("use_gluon_decode", "bounded", "EQUIVALENT", 4096, 0.21, real_calls_per_second=9e4),
            Comparison(
                "get_actual_mla_num_heads",
                "bounded",
                "DIFFERENT" if how == "different" else "EQUIVALENT",
                256,
                0.01,
                [
                    {"shape": shape, "real": 32, "model": 16},
                    {"inputs": {"num_heads": 12}, "real": None, "model": 16},
                ]
                if how == "different"
                else [],
            ),
        ]
        if symbolic:
            rows.insert(
                0,
                Comparison(
                    "use_gluon_decode",
                    "symbolic",
                    "UNSUPPORTED" if how == "unsupported" else "EQUIVALENT",
                    seconds=0.5,
                    reason="lifting unsupported: a while loop (line 412)" if how == "unsupported" else "",
                ),
            )
        return Bound(label, model_id, "the model of the release", rows)

    def executed_comparison(self, spec: str, model_id: str, count: int = 2000, **_: Any) -> Any:
        label, _model = self.source(spec)
        return self._differential(label, model_id, count)

    # --- cases ---

    def generate(self, revision: str, registry: str = "aiter-0.1.20", routes: int = 0) -> list[Any]:
        from spec.analyses.cases import SolverGaveUp

        if self.plan["cases"] == "gave-up":
            raise SolverGaveUp(f"z3 answered unknown for an MC/DC pair of {revision}")
        return [] if self.plan["cases"] == "none" else list(_cases(revision, registry))

    # --- mutate ---

    def score(self, cases=None, select=None, workers=None, timeout_ms=0, equivalence=True) -> Any:
        from spec.analyses.mutation import BaselineError, MutantResult, MutationReport
        from spec.proof.verdict import UNKNOWN
        from spec.realcode.source import SourceError

        how = self.plan["mutate"]
        if how == "source-error":
            raise SourceError("could not fetch vLLM 0.28.0 from PyPI: offline")
        mutants = _mutants()
        if select is not None:
            unknown = set(select) - {m.id for m in mutants}
            if unknown:
                raise KeyError(f"no mutant {sorted(unknown)[0]}")
            mutants = [m for m in mutants if m.id in set(select)]
        if how == "baseline-error":
            raise BaselineError("the unmutated release 0.28.0 fails already: {'shipped_failed': 1}")
        equivalent = {"survivor": False, "unknown": UNKNOWN}.get(how, False)
        results = tuple(
            MutantResult(
                m,
                () if how in ("survivor", "unknown") and i == 0 else (f"case-{i}",),
                (f"test_x[{i}]",) if i % 2 else (),
                True if how == "killed" and i == 1 else equivalent,
                "UNKNOWN" if equivalent == UNKNOWN else "DIFFERENT",
                ("the shipped tests timed out after 1800 s",) if i == 2 else (),
            )
            for i, m in enumerate(mutants)
        )
        return MutationReport("0.28.0", results, 99, 431, 12.5, workers or 2)

    # --- graph ---

    def routing_graph(self, revision: Any, registry: Any) -> Any:
        from spec.analyses.graph import Undecided

        if self.plan["graph"] == "undecided":
            raise Undecided(f"z3 answered unknown for a leaf of {revision} with {registry}")
        g = _graph().copy()
        g.graph.update(revision=revision, registry=registry)
        return g

    def draw(self, g: Any, out: Path) -> None:
        if self.plan["graph"] == "write-error":
            raise OSError(28, "No space left on device")
        out.write_bytes(b"\x89PNG stub" if out.suffix.lower() == ".png" else b"<svg/>")

    # --- diff ---

    def diff(self, old: Any, new: Any, reg: Any, timeout_ms: int = 30_000) -> Any:
        from spec.realcode.symexec import LiftingUnsupported

        how = self.plan["diff"]
        if how == "lifting":
            raise LiftingUnsupported("a for loop over a dict (line 318)")
        d = _diff()
        regions = {"none": [], "all": d.regions}.get(how, d.regions[:4])
        return dataclasses.replace(
            d, old=old, new=new, registry=reg.id, regions=regions, confirmed_by_z3=how != "unconfirmed"
        )

    # --- vllm-tests ---

    def run_shipped_tests(
        self, release, against=None, arch="gfx950", registry_id="aiter-0.1.20", **kw
    ) -> Any:
        from spec.realcode.shipped_tests import ShippedTestsError
        from spec.realcode.source import SourceError, release_version

        version = release_version(release)
        if version is None:
            raise SourceError(f"{release}: not a vLLM release version (e.g. 0.28.0)")
        label, _ = self.source(release)
        if against is not None:
            label, _ = self.source(against)
        how = self.plan["shipped"]
        if how == "shipped-error":
            raise ShippedTestsError(f"vLLM {version}: the pytest child died (exit -9)")
        failing = how == "fail"
        rows = [
            {"item": f"tests/v1/attention/test_a.py::test_route[{i}-gfx950]", "message": "assert 1\nmore"}
            for i in range(3)
        ]
        return {
            "release": version,
            "against": label,
            "file": "rocm_aiter_mla.py",
            "tree": "tree",
            "arch": arch,
            "registry": registry_id,
            "files": ["tests/v1/attention/test_a.py"],
            "items": 12,
            "passed": 6 if failing else 9,
            "failed": 3 if failing else 0,
            "errors": 0,
            "skipped": 1,
            "not_runnable": [{"item": "tests/v1/attention/test_b.py::test_gpu", "reason": ""}]
            if how == "not-runnable"
            else [],
            "failures": rows if failing else [],
            "skips": [{"item": "tests/v1/attention/test_a.py::test_skip", "reason": "needs gfx942\nx"}],
            "by_file": {
                "tests/v1/attention/test_a.py": {
                    "passed": 6 if failing else 9,
                    "failed": 3 if failing else 0,
                    "error": 0,
                    "skipped": 1,
                    "not_runnable": 0,
                }
            },
            "pytest_exit": 1 if failing else 0,
            "wall_s": 0.5,
        }

    # --- explain ---

    def explain(self, revision: Any, registry: Any, shape: Any) -> Any:
        """The real explanation, of this shape on every eighth example, else of a stock shape (17 ms each)."""
        if self.plan["explain-real"]:
            return real_explain(revision, registry, shape)
        stock = _stock_explanations(revision.id, registry.id)
        out = dict(stock[zlib.crc32(repr(shape).encode()) % len(stock)])
        out["shape"] = shape.to_json()
        return out


@functools.cache
def _stock_explanations(revision: str, registry: str) -> list[dict[str, Any]]:
    from mla_model.registry import load_registry
    from mla_model.revisions import REVISIONS
    from mla_model.shape import Shape

    shapes = [
        Shape(num_heads=4, kv_cache_dtype="fp8"),
        Shape(num_heads=12),
        *(c.shape for c in _cases("vllm-0.28", "aiter-0.1.20")),
    ]
    return [real_explain(REVISIONS[revision], load_registry(registry), s) for s in shapes]


class FakeChild:
    """conform's pytest child, in-process: the plugin's case loop (skip what the results file holds, run the
    rest with the real runner, append each record), or a child that dies as the plan says."""

    def __init__(
        self, cmd: list[str], stdout: Any = None, stderr: Any = None, env: Any = None, **_: Any
    ) -> None:
        from conformance import runner
        from conformance.backends import DEVICE_LOST_EXIT, FAILURES, case_key
        from mla_model.case import read_cases

        opts = {a: b for a, b in zip(cmd, cmd[1:]) if a.startswith("--mla-")}
        how, backend = FAKES.plan["child"], opts["--mla-backend"]
        fault = opts.get("--mla-fault")
        if how == "usage-error":
            stdout.write("ERROR: usage: pytest [options]\n  a second line\n")
            self.returncode = 4
            return
        log = runner.ResultsLog(opts["--mla-results"])
        done = log.done(backend, fault)
        statuses = []
        self.returncode = 0
        for case in read_cases(Path(opts["--mla-cases"])):
            if case_key(case) in done:
                continue
            if backend == "model":
                device = runner.resolve_device(opts["--mla-device"])
                kv_len = int(opts.get("--mla-kv-len", runner.DEFAULT_KV_LEN))
                record = _replayed(case, device, kv_len, fault, "--mla-full-context" in cmd)
            else:  # the GPU backends, and vllm's harness, are not run here: the backend's SKIP
                record = runner.case_record(case, backend, "cpu", fault)
                record.update(
                    status="SKIP", detail=f"{backend}: not run by the fuzz", t_case_s=0.0, finished_at=1.0
                )
            log.append(record)
            statuses.append(record["status"])
            if record.get("device_lost") or how == "device-lost":
                self.returncode = DEVICE_LOST_EXIT
                return
            if how == "crash":
                self.returncode = 3
                return
        self.returncode = 1 if any(s in FAILURES for s in statuses) else 0

    def poll(self) -> int:
        return self.returncode

    def __enter__(self) -> FakeChild:  # conform starts its child as a confine.Child context
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


FAKES = Fakes()
_REPLAYED: dict[tuple, dict[str, Any]] = {}


def _replayed(case: Any, device: str, kv_len: int, fault: str | None, full_context: bool) -> dict[str, Any]:
    """The model backend's record of the case, run once per worker (2-5 ms) and then copied with fresh times:
    the records are real, and a conform example costs the CLI's time, not the replay's."""
    from conformance import runner
    from conformance.backends import load_backend

    key = (json.dumps(case.to_json(), sort_keys=True), device, kv_len, fault, full_context)
    if key not in _REPLAYED:
        _REPLAYED[key] = runner.run_case(case, load_backend("model"), device, kv_len, fault, full_context)
    return dict(_REPLAYED[key], finished_at=time.time())


# Every module that holds a name the fakes replace, imported before anything is replaced: a module first
# imported while a fake is in place would bind the fake by ``from ... import`` and keep it after the undo.
PRELOAD = (
    *COMMANDS.values(),
    "conformance.cli.render.graph",
    "conformance.runner",
    "conformance.backends.model",
    "spec.analyses.cases",
    "spec.analyses.diff",
    "spec.analyses.explain",
    "spec.analyses.graph",
    "spec.analyses.mutants",
    "spec.analyses.mutation",
    "spec.proof.check_all",
    "spec.realcode.baseline",  # imports check_all by name: loaded before the fakes, so it keeps the real one
    "spec.realcode.bind",
    "spec.realcode.executed.differential",
    "spec.realcode.executed.harness",
    "spec.realcode.revision",
    "spec.realcode.shipped_tests",
    "spec.realcode.source",
)


@pytest.fixture(scope="module")
def fakes(world: World) -> Any:
    """Install the fakes for this module's tests (and nothing downloads, whatever a fake misses)."""
    modules = {name: importlib.import_module(name) for name in PRELOAD}
    fake = {
        "spec.realcode.source.release_tree": FAKES.release_tree,
        "spec.realcode.executed.harness.release_tree": FAKES.release_tree,
        "spec.realcode.shipped_tests.release_tree": FAKES.release_tree,
        "spec.analyses.mutants.release_tree": FAKES.release_tree,
        "spec.analyses.mutants.fetch_release": FAKES.release_tree,
        "spec.realcode.revision.real_revision": FAKES.real_revision,
        "spec.realcode.bind.real_revision": FAKES.real_revision,
        "spec.proof.check_all.check_all": FAKES.check_all,
        "conformance.cli.check.check_all": FAKES.check_all,
        "conformance.cli.audit.check_all": FAKES.check_all,
        "spec.realcode.bind.bind": FAKES.bind,
        "spec.realcode.bind.executed_comparison": FAKES.executed_comparison,
        "spec.realcode.bind.executed_for_releases": FAKES.executed_for_releases,
        "spec.analyses.cases.generate": FAKES.generate,
        "spec.analyses.mutation.generate": FAKES.generate,
        "conformance.cli.cases.ProcessPoolExecutor": _InProcessPool,
        "spec.analyses.mutation.score": FAKES.score,
        "spec.analyses.graph.routing_graph": FAKES.routing_graph,
        "spec.analyses.graph.pin_witnesses": lambda g: None,  # the stock graph is pinned
        "conformance.cli.render.graph.draw": FAKES.draw,
        "spec.analyses.diff.diff": FAKES.diff,
        "spec.realcode.shipped_tests.run_shipped_tests": FAKES.run_shipped_tests,
        "spec.analyses.explain.explain": FAKES.explain,
    }
    conform_cli = modules["conformance.cli.conform"]
    scratch = world.root / "tmp"
    scratch.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        for target, value in fake.items():
            mp.setattr(target, value)
        mp.setattr("spec.realcode.executed.confine.Child", FakeChild)  # conform's confined pytest child
        mp.setattr(
            conform_cli,
            "tempfile",
            types.SimpleNamespace(
                mkdtemp=lambda prefix="": tempfile.mkdtemp(prefix=prefix, dir=scratch),
                TemporaryDirectory=lambda prefix="": tempfile.TemporaryDirectory(prefix=prefix, dir=scratch),
            ),
        )
        yield FAKES
    for target, value in fake.items():  # the next module's tests see the real library again
        module, name = target.rsplit(".", 1)
        assert getattr(modules[module], name) is not value, f"{target} is still the fake"


class _InProcessPool:
    """cases runs one process per revision; here they run in this one (the fakes live here)."""

    def __init__(self, max_workers: int | None = None) -> None:
        pass

    def __enter__(self) -> _InProcessPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def map(self, fn: Any, jobs: Any) -> Any:
        return map(fn, jobs)


class Plan(dict):
    """How each fake behaves in one example, drawn when a fake first asks (only what runs is drawn)."""

    def __init__(self, data: st.DataObject, **fixed: Any) -> None:
        super().__init__(fixed)
        self.data = data

    def __missing__(self, key: str) -> Any:
        self[key] = self.data.draw(PLANS[key], label=key)
        return self[key]


PLANS: dict[str, st.SearchStrategy[Any]] = {
    "check": st.sampled_from(["real", "unknown"]),
    "executed": st.sampled_from(["ok", "disagree", "harness-error", "source-error"]),
    "bind": st.sampled_from(["ok", "different", "unsupported"]),
    "cases": st.sampled_from(["ok", "gave-up", "none"]),
    "mutate": st.sampled_from(["killed", "survivor", "unknown", "baseline-error", "source-error"]),
    "graph": st.sampled_from(["ok", "undecided", "write-error"]),
    "diff": st.sampled_from(["few", "few", "none", "unconfirmed", "lifting", "all"]),
    "shipped": st.sampled_from(["pass", "fail", "not-runnable", "shipped-error"]),
    "explain-real": chance(1, 8),
    "child": st.sampled_from(["run", "run", "run", "device-lost", "usage-error", "crash"]),
}


# --------------------------------------------------------------------------------------- argv


OUTPUTS = [  # relative to the example's folder, which holds d/, f.txt and bin.out
    "out",
    "out.jsonl",
    "sub/deeper/out.jsonl",
    "d",
    "d/out.jsonl",
    "f.txt",
    "bin.out",
    "f.txt/out.jsonl",
    "out.png",
    "out.svg",
    "out.dot",
    "out.PNG",
    "d/out.dot",
    "no/such/out.dot",
    "f.txt/out.dot",
    *(f"{name}.jsonl" for name in ODD_NAMES),
    *(f"{name}.dot" for name in ODD_NAMES),
]
OUTPUT_JUNK = ["", ".", "..", "d/", "out.gif", "out.", ".dot", "-", "--out"]
NUMBER_JUNK = ["nan", "inf", "-inf", "-1", "1.5", "1e3", "abc", "", " 3", "0x10", "99999999999999999999999"]
RELEASE_JUNK = [
    "0.0.999",
    "vllm==x",
    "vllm==",
    "vllm==0.0.999",
    "9.9.9",
    "0.28",
    "latest",
    "-1",
    "",
    ".",
    "../",
]


def _releases(w: World) -> tuple[list[str], list[str]]:
    """Release specs: (what loads, what is refused)."""
    f = w.files
    good = ["0.28.0", "vllm==0.28.0", "0.27.1", "0.32.0", "vllm==0.34.0", f["backend"], f["tree"]]
    good += [f[f"odd-backend-{i}"] for i in range(len(ODD_NAMES))]
    bad = [*RELEASE_JUNK, "/dev/null", f["binary"], f["text"], f["syntax"], f["folder"], f["missing"]]
    return good, bad + [f["missing-dir"], f["empty"]]


def _cases_files(w: World) -> tuple[list[str], list[str]]:
    f = w.files
    good = [f["one-case"], f["two-cases"], f["odd-cases-0"], f["odd-cases-3"], f["odd-cases-4"]]
    bad = [f["twice"], f["empty"], f["binary"], f["text"], f["folder"], f["missing"], "/dev/null", "", "."]
    return good, bad


def _case_ids(w: World) -> tuple[list[str], list[str]]:
    good = [json.loads(line)["id"] for line in w.real_lines] + ["gfx942-fp8-h12-q5-dspark3-auto-b2-kv2g"]
    bad = [
        "gfx950-fp8",
        "",
        "x-y-hz-q1-nospec-auto",
        "gfx950-auto-h0-q1-nospec-auto",
        "gfx950-auto-h16-q1-eagle3k-auto",
        "gfx999-auto-h16-q1-nospec-auto",
        "gfx950-auto-h16-q1-mtp-auto",
        "gfx950-auto-h16-q1-nospec-auto-zzz",
        "gfx950-auto-h16-q1-nospec-auto-b",
        "gfx950-auto-h99999999999999999999-q1-nospec-auto",
        "gfx950-auto-h16-q1-k5-auto",
        "[/bold]-a-h1-q1-nospec-auto",
    ]
    return good, bad


def _values(name: str, param: click.Parameter, w: World) -> tuple[list[str], list[str]]:
    """(valid, junk) values of one parameter of one command: its type's domain, or a pool by meaning."""
    key = (name, param.name)
    if key not in w.values:
        w.values[key] = _pool(name, param, w)
    return w.values[key]


def _pool(name: str, param: click.Parameter, w: World) -> tuple[list[str], list[str]]:
    from conformance.backends import BACKENDS
    from mla_model.emulation import FAULTS
    from mla_model.registry import REGISTRY_IDS
    from mla_model.revisions import REVISIONS

    key = (name, param.name)
    releases = _releases(w)
    by_meaning: dict[tuple[str, str | None], tuple[list[str], list[str]]] = {
        ("check", "releases"): releases,
        ("audit", "releases"): releases,
        ("audit", "named"): releases,
        ("bind", "spec"): releases,
        ("diff", "old"): (list(REVISIONS)[:4] + releases[0], releases[1]),
        ("diff", "new"): (list(REVISIONS)[3:] + releases[0], releases[1]),
        ("vllm-tests", "release"): (
            [r for r in releases[0] if not r.startswith("/")],
            releases[1] + [w.files["backend"]],
        ),
        ("vllm-tests", "against"): releases,
        ("vllm-tests", "select"): (["fp8", "not mtp", "test_route and gfx950"], ["", "(", "and", "[/bold]"]),
        ("conform", "backend"): (["model", "model", "model", *BACKENDS], ["", "Model", "cuda", "nope"]),
        ("conform", "cases_path"): _cases_files(w),
        ("conform", "device"): (
            ["cpu", "cpu", "auto", "cuda", "cuda:3"],
            ["gpu0", "", "CPU", "cuda:", "cuda:-1", "cpu "],
        ),
        ("conform", "fault"): (list(FAULTS), ["", "nope", "FP8-READ-AS-BF16"]),
        ("conform", "kv_len"): (["1", "8"], ["0", "262145", *NUMBER_JUNK]),
        ("conform", "vllm"): releases,
        ("explain", "case_ref"): _case_ids(w),
        ("explain", "real"): releases,
        ("explain", "cases_file"): _cases_files(w),
        ("mutate", "select"): ([m.id for m in _mutants()], ["", "M99-none", "nope", "'quoted'"]),
        ("graph", "revision"): (list(REVISIONS), ["vllm-9.99", "", "VLLM-0.28", "0.28.0", "[/bold]"]),
        ("graph", "registry"): (list(REGISTRY_IDS), ["aiter-9", "", "[/bold]"]),
    }
    if key in by_meaning:
        return by_meaning[key]
    t = param.type
    if isinstance(param.type, click.Path):
        return OUTPUTS, OUTPUT_JUNK
    if isinstance(t, click.Choice):
        choices = [str(c) for c in t.choices]
        return choices, ["", "nope", choices[0].upper(), choices[0] + " ", "vllm-9.99", "aiter-0.0.0", "all"]
    if isinstance(t, click.IntRange):
        lo = t.min if t.min is not None else 0
        good = [lo, lo + 1, 3] + ([t.max] if t.max is not None else [10**20])
        bad = [lo - 1, -(10**20)] + ([t.max + 1] if t.max is not None else [])
        return [str(v) for v in good], [str(v) for v in bad] + NUMBER_JUNK
    if t is click.BOOL:
        return ["true", "false", "1", "0", "yes", "off"], ["maybe", "", "2", "truee"]
    if t.name == "seconds":
        return ["0.1", "5", "86400"], ["nan", "inf", "-inf", "0", "-1", "1e9", "abc", "", "86400.1", "0.09"]
    return ["x"], ["", "--", "[/bold]", "new\nline", "bad\udcffname"]


JUNK_TOKENS = ["--bogus", "-x", "--", "extra", "--format", "-h", "--help", "--version", "--revision=", "-"]
# How often (out of 8) an option appears: the ones a run needs almost always, and --revision/--invariant
# of check usually (the full matrix of 8 revisions x 2 registries x 12 invariants renders in ~0.2 s).
PRESENCE = {"releases": 7, "spec": 7, "backend": 7, "cases_path": 7, "release": 7, "out": 7, "revisions": 6}
PRESENCE_BY_COMMAND = {("check", "invariants"): 7, ("check", "revisions"): 7, ("explain", None): 1}


class OptionDraws:
    """One parameter's strategies, built once: how many times it appears, how it is spelled, its value."""

    def __init__(self, name: str, p: click.Parameter, w: World) -> None:
        good, bad = _values(name, p, w)
        self.valid, self.mixed = st.sampled_from(good), st.sampled_from(good * 3 + bad)
        if isinstance(p, click.Argument):
            self.count = st.sampled_from([0, 1, 1, 1, 1, 2, 3] if p.nargs == -1 else [0] + [1] * 11)
            return
        assert isinstance(p, click.Option)
        default = PRESENCE_BY_COMMAND.get((name, None), 4)
        presence = PRESENCE_BY_COMMAND.get((name, p.name), PRESENCE.get(p.name, default))
        presence = max(presence, 7) if p.required else presence
        present = [1, 1, 2, 3] * 2 if p.multiple else [1] * 8
        self.count = st.sampled_from([0] * (8 - presence) + present[:presence])
        flags = p.opts + p.secondary_opts
        if p.is_flag:  # junk: --flag=1
            self.spelled_valid = st.sampled_from([(f, False) for f in flags])
            self.spelled = st.sampled_from([(f, False) for f in flags] * 7 + [(f, True) for f in flags])
        else:  # --name value, or --name=value
            joined = [(f, True) for f in flags if f.startswith("--")]
            self.spelled_valid = self.spelled = st.sampled_from([(f, False) for f in flags] * 3 + joined)


def _draws(name: str, w: World) -> list[tuple[click.Parameter, OptionDraws]]:
    if name not in w.draws:
        params = [p for p in command(name).params if p.name and "--help" not in getattr(p, "opts", ())]
        w.draws[name] = [(p, OptionDraws(name, p, w)) for p in params]
    return w.draws[name]


@st.composite
def argv(draw: Any, name: str, w: World) -> list[str]:
    """``[name, ...]``: some of the command's options and arguments, valid or junk, in any order."""
    valid_only = draw(chance(1, 4))
    options: list[list[str]] = []
    positional: list[str] = []
    for p, d in _draws(name, w):
        for _ in range(draw(d.count)):
            value = d.valid if valid_only else d.mixed
            if isinstance(p, click.Argument):
                positional.append(draw(value))
                continue
            flag, joined = draw(d.spelled_valid if valid_only else d.spelled)
            if isinstance(p, click.Option) and p.is_flag:
                options.append([f"{flag}=1" if joined else flag])
            else:
                options.append([f"{flag}={draw(value)}"] if joined else [flag, draw(value)])
    tokens = [t for g in draw(st.permutations(options)) for t in g] + positional
    if not valid_only and draw(chance(1, 6)):
        tokens.insert(draw(st.integers(0, len(tokens))), draw(st.sampled_from(JUNK_TOKENS)))
    return [name, *tokens]


def _fuzz_command(name: str, world: World, fakes: Fakes, data: st.DataObject) -> None:
    fakes.plan = Plan(data)
    args = data.draw(argv(name, world), label="argv")
    cwd = world.scratch()
    try:
        check_outcome(args, cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def _command_test(name: str) -> Any:
    @FUZZ
    @given(data=st.data())
    def test(world: World, fakes: Fakes, data: st.DataObject) -> None:
        _fuzz_command(name, world, fakes, data)

    test.__name__ = f"test_fuzz_{name.replace('-', '_')}_arguments"
    test.__doc__ = f"mla-spec {name}: {EXAMPLES} argument lists, each exit 0-3, one line on exit 2."
    return test


for _name in COMMANDS:
    globals()[f"test_fuzz_{_name.replace('-', '_')}_arguments"] = _command_test(_name)


@FUZZ
@given(data=st.data())
def test_fuzz_group_arguments(world: World, fakes: Fakes, data: st.DataObject) -> None:
    """The group itself: no command, an unknown one, its own options, a command spelled wrong."""
    fakes.plan = Plan(data)
    head = data.draw(
        st.lists(
            st.sampled_from(
                [
                    "--version",
                    "--help",
                    "-h",
                    "--bogus",
                    "",
                    "chek",
                    "CHECK",
                    "-",
                    "--",
                    "list",
                    "--format",
                    "json",
                ]
            ),
            max_size=3,
        )
    )
    check_outcome(head, world.root)


# --------------------------------------------------------------------------------------- file contents


JUNK_VALUES: list[Any] = [None, True, -1, 1.5, 10**30, float("nan"), float("inf"), "", "[/bold]", [], [1], {}]
# Per field: values of the wrong JSON type, and values of the right type that name nothing mla-spec knows.
FIELD_JUNK: dict[str, list[Any]] = {
    "id": [5, ["x"], "gfx950-auto-h8-q1-nospec-nope"],
    "revision": ["vllm-9.99", ["vllm-0.28"], 5],
    "registry": ["aiter-9.9.9", {"id": "aiter-0.1.20"}],
    "origin": [7],
    "seed": [float("inf"), float("-inf"), float("nan"), "7", 1.5, 10**30, -1, True],
    "expected_route": ["x", [], {}],
    "shape": ["gfx950", [], {}],
    "arch": ["gfx999", "GFX950"],
    "kv_cache_dtype": ["fp4"],
    "q_dtype": ["int8"],
    "spec_method": ["medusa"],
    "asm_padding_mode": ["none"],
    "dcp_world_size": [3, 0],
    "num_heads": [0, 10**30, "16"],
    "max_qo_len": [0, 10**30],
    "gluon_build": ["true", 1],
    "path": ["warp_drive"],
    "kernel": ["mla_nope"],
    "padded_q_heads": [17],
}


@st.composite
def case_line(draw: Any, w: World) -> bytes:
    """One line of a cases file: a real case, the same with one field dropped, retyped or unknown, or not a
    case at all."""
    kinds = ["real"] * 3 + ["field"] * 4 + ["shape", "shape", "route", "not-object", "text", "bytes", ""]
    kind = draw(st.sampled_from(kinds))
    real = draw(st.sampled_from(w.real_lines[:3]))
    if kind == "real":
        return real.encode()
    if kind == "not-object":
        return draw(st.sampled_from([b"[1, 2]", b'"x"', b"1", b"null", b"true", b"[]", b"NaN"]))
    if kind == "text":
        return draw(st.sampled_from([b"{", b'{"id": ', b"}", b"   ", b"\x0c", b"# comment", b"{}"])) + draw(
            st.text(max_size=8)
        ).encode("utf-8", "surrogatepass")
    if kind == "bytes":
        return draw(st.binary(max_size=12))
    if kind == "":
        return b""
    data = json.loads(real)
    target = {"field": data, "shape": data["shape"], "route": data["expected_route"]}[kind]
    for _ in range(draw(st.sampled_from([1, 1, 2]))):
        key = draw(st.sampled_from([*target, "bogus"]))
        if draw(chance(1, 4)):
            target.pop(key, None)
        else:
            target[key] = draw(st.sampled_from(FIELD_JUNK.get(key, []) * 3 + JUNK_VALUES))
    return json.dumps(data, allow_nan=True).encode()


@st.composite
def jsonl_file(draw: Any, line: st.SearchStrategy[bytes], max_lines: int) -> bytes:
    """Lines joined by \\n or \\r\\n, the last one with or without its newline; sometimes a UTF-8 BOM."""
    lines = [draw(line) for _ in range(draw(st.sampled_from([0, *list(range(1, max_lines + 1)) * 3])))]
    sep = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    body = sep.join(lines) + (sep if lines and draw(chance(3, 4)) else b"")
    return (b"\xef\xbb\xbf" if draw(chance(1, 16)) else b"") + body


# The fields of a record that conform and the plugin read (the key and run select it; the rest is reported).
RECORD_FIELDS = ["key", "backend", "fault", "status", "path", "detail", "t_case_s", "finished_at"]
RECORD_FIELDS += ["t_kernel_ms", "t_reference_ms", "id"]
RECORD_JUNK = {  # what a hand-edited, older or foreign record may hold there
    "detail": ["IndexError: a[/b]", "[/red]", "line one\nline two"],
    "path": ["[/bold]", "gluon_decode "],
    "status": ["pass", "PASSED", "[/]"],
    "t_kernel_ms": [0, 0.0, -0.0],
    "finished_at": ["2024-01-01T00:00:00", 0, -1e300],
}


@st.composite
def results_line(draw: Any, w: World, lines: list[str], fault: str | None) -> bytes:
    """One line of a results file: a record of one of the cases (this run's or another backend's or fault's),
    the same with a field dropped, retyped or odd, or no record at all."""
    kind = draw(
        st.sampled_from(["record", "record", "field", "odd", "other-run", "not-object", "text", "bytes"])
    )
    if kind == "not-object":
        return draw(st.sampled_from([b"[1, 2]", b'"x"', b"1", b"null"]))
    if kind == "text":
        return draw(st.sampled_from([b"{", b'{"key": "vllm-0.28/', b"", b"   "]))
    if kind == "bytes":
        return draw(st.binary(max_size=12))
    case = json.loads(draw(st.sampled_from(lines * 3 + w.real_lines[:4])))  # mostly this run's cases
    key = f"{case['revision']}/{case['registry']}/{case['id']}"
    record = dict(w.record, key=key, id=case["id"], fault=fault)
    record["status"] = draw(
        st.sampled_from(["PASS", "PASS", "MISMATCH", "NAN", "CRASH", "NO_KERNEL", "SKIP"])
    )
    if kind == "other-run":
        record.update(draw(st.sampled_from([{"backend": "aiter-triton"}, {"fault": "fp4-as-fp8"}])))
    if kind == "field":
        key = draw(st.sampled_from([*RECORD_FIELDS, "bogus"]))
        if draw(chance(1, 4)):
            record.pop(key, None)
        else:
            record[key] = draw(st.sampled_from([*JUNK_VALUES, -1e300, 1e300, 0.0]))
    if kind == "odd":  # a result that reads as one, with an odd value where a report shows it
        key = draw(st.sampled_from(list(RECORD_JUNK)))
        record[key] = draw(st.sampled_from(RECORD_JUNK[key]))
    return json.dumps(record, allow_nan=True).encode()


CONFORM = ["conform", "--backend", "model", "--device", "cpu", "--kv-len", "8"]


def _conform_extras(data: st.DataObject) -> list[str]:
    fault = data.draw(
        st.sampled_from([[], [], ["--fault", "metadata-short-qlen"], ["--fault", "fp8-read-as-bf16"]])
    )
    return fault + data.draw(st.sampled_from([[], ["--format", "json"], ["--full-context"]]))


@FUZZ
@given(data=st.data())
def test_fuzz_conform_cases_file(world: World, fakes: Fakes, data: st.DataObject) -> None:
    """conform --cases FILE: real, broken, duplicate and foreign lines; at most three cases run."""
    fakes.plan = Plan(data, child="run")
    extras = _conform_extras(data)
    content = data.draw(jsonl_file(case_line(world), 3), label="cases")
    cwd = world.scratch()
    try:
        (cwd / "cases.jsonl").write_bytes(content)
        out = check_outcome([*CONFORM, "--cases", "cases.jsonl", "--out", "results.jsonl", *extras], cwd)
        if out.returncode == 0:  # every case ran and has its record
            assert (cwd / "results.jsonl").is_file(), out.stderr
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


@FUZZ
@given(data=st.data())
def test_fuzz_conform_results_file(world: World, fakes: Fakes, data: st.DataObject) -> None:
    """conform --out RESULTS resumes from what the file holds: torn, duplicate, retyped, foreign records."""
    child = data.draw(st.sampled_from(["run", "run", "device-lost", "crash"]))
    fakes.plan = Plan(data, child=child)
    extras = _conform_extras(data)
    fault = extras[1] if extras[:1] == ["--fault"] else None
    cases, lines = data.draw(
        st.sampled_from(
            [(world.files["one-case"], world.real_lines[:1])] * 3
            + [(world.files["two-cases"], world.real_lines[1:3])]
        )
    )
    content = data.draw(jsonl_file(results_line(world, lines, fault), 4), label="results")
    cwd = world.scratch()
    try:
        (cwd / "results.jsonl").write_bytes(content)
        check_outcome([*CONFORM, "--cases", cases, "--out", "results.jsonl", *extras], cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


@FUZZ
@given(data=st.data())
def test_fuzz_explain_cases_file(world: World, fakes: Fakes, data: st.DataObject) -> None:
    """explain --cases FILE --case ID: the same files, an id from the file or not."""
    fakes.plan = Plan(data)
    content = data.draw(jsonl_file(case_line(world), 3), label="cases")
    ids = [json.loads(line)["id"] for line in world.real_lines[:3]]
    case = data.draw(st.sampled_from([*ids, *_case_ids(world)[1][:4]]), label="id")
    extra = data.draw(
        st.sampled_from([[], ["--format", "json"], ["--revision", "vllm-0.27"], ["--num-heads", "4"]])
    )
    cwd = world.scratch()
    try:
        (cwd / "cases.jsonl").write_bytes(content)
        check_outcome(["explain", "--cases", "cases.jsonl", "--case", case, *extra], cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
