"""Run the ROCm AITER MLA tests a vLLM release ships, unmodified, against a release's backend over the stubs.

``mla-spec vllm-tests --vllm X [--against R]``.  Release ``X``'s sdist ships
tests for the backend under ``tests/v1/attention/`` (every file there whose
name contains ``aiter_mla``).  They are run with pytest in a child process
(``python -m spec.realcode.shipped_tests``, scratch working directory) in which

* ``vllm.v1.attention.backends.mla.rocm_aiter_mla`` is the ``rocm_aiter_mla.py``
  of ``R`` (default ``X``: a release version, a vLLM tree, or a lone file such
  as a mutant, whose helper code is then read from ``X``'s tree);
* every other ``vllm.*`` and ``aiter.*`` import resolves to the harness stubs
  (:mod:`spec.realcode.executed.child`'s ``install``/``StubsOnly`` guard), never
  to an installed vLLM or AITER;
* ``tests.v1.attention.*`` is X's own ``tests/v1/attention`` folder, copied
  as it is into the scratch directory (only empty ``__init__.py`` package
  markers are added, so it cannot resolve to another ``tests`` package).

Every test item ends in exactly one of passed, failed, errors (a fixture or
setup/teardown that raised), skipped (the test's own skip/xfail, with its
reason), or not runnable: the item needs what the stubs cannot honestly give.
That is a name the stubs lack (anything outside the backend, e.g. a real
``VllmConfig``), a GPU (``torch.device("cuda")``), or an AITER kernel's output
(an unmocked ``mla_decode_fwd``/``mla_gluon`` call that completed: the stubs
record it but compute nothing, so the item is not counted even when it passed).
A test file that cannot be collected counts as one item, under errors or not
runnable by the same rule.

The stubs stand in for a ROCm GPU of ``--arch`` with AITER installed: the
platform is ROCm, ``on_gfx942``/``on_gfx950`` answer the arch, AITER is found,
and ``torch.accelerator.is_available()`` answers True.  A test's own skip for
lacking that hardware (0.34.0's DCP files: ``is_aiter_found() and
torch.accelerator.is_available()`` plus the arch, e.g.
test_rocm_aiter_mla_dcp_cprr_numerics.py L63-78) is therefore decided by the
arch alone, and a test under it that only asks the gates runs.  Everything that
uses the device still fails with torch's own "Cannot access accelerator device
when none is available" (or "Torch not compiled with CUDA enabled"): not
runnable, needs a GPU.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spec.realcode.executed.harness import ExecutionTimeout, child_env, run_module
from spec.realcode.source import SourceError, release_tree, release_version, tree_of

TESTS_DIR = Path("tests/v1/attention")
MARKER = "aiter_mla"
DEFAULT_REGISTRY = "aiter-0.1.20"
DEFAULT_ARCH = "gfx950"
ARCHES = ("gfx942", "gfx950")

# Messages that say an item needs a GPU the CPU child does not have.
_GPU_NEEDS = (
    "Torch not compiled with CUDA enabled",
    "No CUDA GPUs are available",
    "Found no NVIDIA driver",
    "CUDA driver initialization failed",
    "no HIP GPUs",
    "Cannot access accelerator device",
    "invalid device ordinal",
    "device(type='cuda'",
)


class ShippedTestsError(RuntimeError):
    """The tests could not be run at all (no such release, nothing shipped, the child died): one line."""


def shipped_files(tree: Path) -> list[Path]:
    """The release's ROCm AITER MLA test files: ``tests/v1/attention/test_*.py`` naming ``aiter_mla``."""
    folder = tree / TESTS_DIR
    return sorted(p for p in folder.glob("test_*.py") if MARKER in p.name and p.is_file())


def _release_tree(version: str) -> Path:
    bare = release_version(version)
    if bare is None:
        raise SourceError(f"{version}: not a vLLM release version (e.g. 0.28.0)")
    return release_tree(bare)


def resolve_against(release_root: Path, against: str | None, release: str) -> tuple[str, Path, Path]:
    """(label, rocm_aiter_mla.py, helper tree) for ``--against``; a lone file borrows X's tree."""
    from spec.realcode.executed.harness import release_code

    if against is None:
        code = release_code(release)
        return code.label, code.file, code.tree or release_root
    if release_version(against) is None:
        p = Path(against)
        if p.is_file() and tree_of(p) is None:
            return str(p), p.resolve(), release_root
    code = release_code(against)
    return code.label, code.file.resolve(), code.tree or release_root


def run_shipped_tests(
    release: str,
    against: str | None = None,
    arch: str = DEFAULT_ARCH,
    registry_id: str = DEFAULT_REGISTRY,
    timeout: float = 1800,
    select: str | None = None,
) -> dict[str, Any]:
    """Run release ``release``'s shipped ROCm AITER MLA tests against ``against``'s backend; the summary dict.

    Raises :class:`SourceError` for a release, tree or file that does not
    exist, :class:`ShippedTestsError` where the tests cannot be run at all.
    """
    if arch not in ARCHES:
        raise SourceError(f"arch {arch}: not one of {', '.join(ARCHES)}")
    version = release_version(release) or release
    root = _release_tree(version)
    files = shipped_files(root)
    if not files:
        raise ShippedTestsError(f"vLLM {version} ships no {TESTS_DIR}/*{MARKER}*.py tests")
    label, file, tree = resolve_against(root, against, version)
    started = time.monotonic()
    data = run_test_files(
        root / TESTS_DIR, [f.name for f in files], file, tree, arch, registry_id, timeout, select
    )
    summary: dict[str, Any] = {
        "release": version,
        "against": label,
        "file": str(file),
        "tree": str(tree),
        "arch": arch,
        "registry": registry_id,
        "files": [str(TESTS_DIR / f.name) for f in files],
    }
    summary.update(data)
    summary["wall_s"] = round(time.monotonic() - started, 2)
    return summary


def run_test_files(
    tests_dir: Path,
    names: list[str],
    file: Path,
    tree: Path,
    arch: str = DEFAULT_ARCH,
    registry_id: str = DEFAULT_REGISTRY,
    timeout: float = 1800,
    select: str | None = None,
) -> dict[str, Any]:
    """Run test files ``names`` of ``tests_dir`` (copied whole to scratch ``tests/v1/attention``) in a child.

    ``file`` is the rocm_aiter_mla.py under test, ``tree`` the vLLM tree the
    stubs read helper code from.  Returns the child's counts (see the module).
    """
    with tempfile.TemporaryDirectory(prefix="mla-spec-vllm-tests-") as scratch:
        work = Path(scratch)
        target = work / TESTS_DIR
        shutil.copytree(tests_dir, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # package markers only: ``tests.v1.attention.utils`` must be X's, never another ``tests`` package
        for d in (work / "tests", work / "tests/v1", target):
            (d / "__init__.py").touch(exist_ok=True)
        (work / "pytest.ini").write_text("[pytest]\n")
        out = work / "result.json"
        request = {
            "file": str(file),
            "tree": str(tree),
            "arch": arch,
            "registry": registry_id,
            "tests": [str(TESTS_DIR / n) for n in names],
            "out": str(out),
            "select": select,
        }
        env = child_env("PYTEST_")
        env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")
        try:
            proc = run_module("spec.realcode.shipped_tests", request, scratch, env, timeout)
        except ExecutionTimeout as e:
            raise ShippedTestsError(str(e)) from None
        if not out.is_file():
            tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise ShippedTestsError(f"the vllm-tests child stopped ({tail})")
        data = json.loads(out.read_text())
    if "fatal" in data:
        raise ShippedTestsError(data["fatal"])
    return data


# ----------------------------------------------------------------------------------------------- child side


def _chain(e: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _real_class_defines(
    tree: Path, module: str, cls: str, name: str, seen: set[tuple[str, str]]
) -> str | None:
    """Where the real vLLM class ``module.cls`` of ``tree`` (or a base of it in the tree) defines ``name``."""
    import ast

    if (module, cls) in seen or len(seen) > 40:
        return None
    seen.add((module, cls))
    rel = Path(*module.split(".")).with_suffix(".py")
    try:
        body = ast.parse((tree / rel).read_text()).body
    except (OSError, SyntaxError):
        return None
    imported = {
        a.asname or a.name: n.module
        for n in body
        if isinstance(n, ast.ImportFrom) and n.module
        for a in n.names
    }
    for node in body:
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for f in node.body:
            names = [getattr(f, "name", None)]
            if isinstance(f, ast.Assign):
                names = [getattr(t, "id", None) for t in f.targets]
            elif isinstance(f, ast.AnnAssign):
                names = [getattr(f.target, "id", None)]
            if name in names:
                return f"{rel}:{f.lineno} ({cls})"
        for base in node.bases:
            base = base.value if isinstance(base, ast.Subscript) else base
            if isinstance(base, ast.Name):
                found = _real_class_defines(tree, imported.get(base.id, module), base.id, name, seen)
                if found:
                    return found
    return None


def _stub_base_gap(e: BaseException) -> str | None:
    """An attribute the release inherits from a vLLM base class the stubs stand in for, lacking it there.

    The stub's class (``vllm.x.C`` under the stubs) names its real counterpart
    (``vllm/x.py`` ``class C`` of the release tree); where that class or one of
    its real bases defines the missing name, the gap is the harness's.
    """
    import mla_spec_stub

    from spec.realcode.executed.child import STUBS

    obj, name = getattr(e, "obj", None), getattr(e, "name", None)
    tree = mla_spec_stub.STATE.tree
    if not isinstance(e, AttributeError) or obj is None or not name or tree is None:
        return None
    if isinstance(obj, super):
        cls = obj.__self_class__  # type: ignore[attr-defined]  # typeshed's super does not declare it
    else:
        cls = obj if isinstance(obj, type) else type(obj)
    for c in getattr(cls, "__mro__", ()):
        file = getattr(sys.modules.get(c.__module__), "__file__", None) or ""
        if not file or STUBS not in Path(file).resolve().parents:
            continue
        found = _real_class_defines(tree, c.__module__, c.__name__, name, set())
        if found:
            return (
                f"needs {name}, which vLLM defines at {found}; the harness stub {c.__module__}.{c.__name__} "
                "does not stub it"
            )
    return None


def _needs(exc: BaseException | None, text: str = "") -> str | None:
    """Why an exception means the item is not runnable here (stubs lack a name, no GPU), or None."""
    from spec.realcode.executed.child import stub_fault

    for e in reversed(_chain(exc)):  # the root cause first (pytest wraps an import error in a CollectError)
        if stub_fault(e):
            return f"needs what the harness stubs lack: {type(e).__name__}: {e}"
        gap = _stub_base_gap(e)
        if gap:
            return gap
        msg = str(e)
        if any(s in msg for s in _GPU_NEEDS):
            return f"needs a GPU: {type(e).__name__}: {msg}"
        if isinstance(e, ImportError) and (e.name or "").split(".")[0] in ("triton",):
            return f"needs Triton on a GPU: {type(e).__name__}: {msg}"
    if text:
        for line in text.splitlines():
            if "the harness does not stub" in line or "has no CPU rendering in the harness" in line:
                return f"needs what the harness stubs lack: {line.strip().lstrip('E').strip()}"
        if any(s in text for s in _GPU_NEEDS):
            return "needs a GPU: " + next(
                ln.strip().lstrip("E").strip() for ln in text.splitlines() if any(s in ln for s in _GPU_NEEDS)
            )
    return None


def _message(report: Any, limit: int = 600) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text[:limit]


# Every item's outcome, from best to worst (a later phase of an item can only make it worse).
_OUTCOMES = ("passed", "skipped", "failed", "error", "not_runnable")


class _Collector:
    """A pytest plugin: one outcome per item (and per uncollectable file), classified as the module says."""

    def __init__(self) -> None:
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.kernel_calls: dict[str, list[str]] = {}

    def _set(self, nodeid: str, outcome: str, **extra: Any) -> None:
        if nodeid not in self.outcomes:
            self.order.append(nodeid)
            self.outcomes[nodeid] = {"outcome": outcome, **extra}
            return
        current = self.outcomes[nodeid]
        # a later phase only makes an item worse: passed < skipped < failed < error < not_runnable
        if _OUTCOMES.index(outcome) > _OUTCOMES.index(current["outcome"]):
            self.outcomes[nodeid] = {"outcome": outcome, **extra}

    def pytest_runtest_setup(self, item: Any) -> None:
        import mla_spec_stub

        mla_spec_stub.STATE.calls, mla_spec_stub.STATE.events = [], []

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = report.nodeid
        exc = getattr(report, "_mla_exc", None)
        if report.skipped:
            reason = "xfail: " + str(report.wasxfail) if hasattr(report, "wasxfail") else _skip_reason(report)
            self._set(nodeid, "skipped", reason=reason)
        elif report.failed:
            why = _needs(exc, report.longreprtext)
            if why:
                self._set(nodeid, "not_runnable", reason=why)
            elif report.when == "call":
                self._set(nodeid, "failed", message=_message(report))
            else:
                self._set(nodeid, "error", message=f"{report.when}: {_message(report)}")
        else:
            self._set(nodeid, "passed")
        if report.when == "teardown":
            self._kernel_check(nodeid)

    def _kernel_check(self, nodeid: str) -> None:
        """An unmocked AITER kernel that "ran" left its output uncomputed: the verdict isn't the backend's."""
        import mla_spec_stub

        st = mla_spec_stub.STATE
        ran = sorted({c["entry"] for c in st.calls if "raised" not in c})
        if ran and st.kernel is None and self.outcomes[nodeid]["outcome"] in ("passed", "failed"):
            self.outcomes[nodeid] = {
                "outcome": "not_runnable",
                "reason": (
                    f"needs a real AITER kernel: reaches {', '.join(ran)}, "
                    "which the stubs record but do not compute"
                ),
            }

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        # for a collection error this runs before pytest_collectreport: keep the exception object
        report._mla_exc = call.excinfo.value if call.excinfo is not None else None

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            text = report.longreprtext
            why = _needs(getattr(report, "_mla_exc", None), text)
            lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
            message = (lines[-1][1:].strip() if lines else text.strip().splitlines()[-1])[:600]
            if why:
                self._set(report.nodeid or "<collection>", "not_runnable", reason=f"cannot collect: {why}")
            else:
                self._set(report.nodeid or "<collection>", "error", message=f"collection: {message}")
        elif report.outcome == "skipped":
            self._set(report.nodeid, "skipped", reason=_skip_reason(report))

    def summary(self) -> dict[str, Any]:
        rows = [(n, self.outcomes[n]) for n in self.order]
        count = {
            k: sum(1 for _, o in rows if o["outcome"] == k) for k in ("passed", "failed", "error", "skipped")
        }
        by_file: dict[str, dict[str, int]] = {}
        for n, o in rows:
            counts = by_file.setdefault(n.split("::")[0], dict.fromkeys(_OUTCOMES, 0))
            counts[o["outcome"]] += 1
        return {
            "items": len(rows),
            "passed": count["passed"],
            "failed": count["failed"],
            "errors": count["error"],
            "skipped": count["skipped"],
            "not_runnable": [
                {"item": n, "reason": o["reason"]} for n, o in rows if o["outcome"] == "not_runnable"
            ],
            "failures": [
                {"item": n, "message": o["message"]} for n, o in rows if o["outcome"] in ("failed", "error")
            ],
            "skips": [{"item": n, "reason": o["reason"]} for n, o in rows if o["outcome"] == "skipped"],
            "by_file": by_file,
        }


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)[:300]


def _exc_carrier() -> Any:
    """A plugin that hands each phase's exception object to its report (pytest keeps only the text)."""
    import pytest

    class Carrier:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
            outcome = yield
            outcome.get_result()._mla_exc = call.excinfo.value if call.excinfo is not None else None

    return Carrier()


def _stand_in_device() -> None:
    """torch.accelerator.is_available() answers as the stubs' ROCm GPU (see the module); use still raises."""
    import torch

    if not torch.accelerator.is_available():
        torch.accelerator.is_available = lambda: True


def child_main() -> None:
    """The child: stubs in place, the release module over them, pytest on the copied test files."""
    request = json.loads(sys.stdin.read())
    out = Path(request["out"])
    from spec.realcode.executed import confine
    from spec.realcode.executed.child import STUBS, install, loaded_torch

    sys.path.insert(0, str(STUBS))
    loaded_torch()
    import mla_spec_stub

    mla_spec_stub.STATE.arch = request["arch"]
    tree = Path(request["tree"]) if request.get("tree") else None
    try:
        install(Path(request["file"]), tree)
    except Exception:  # noqa: BLE001  (each test file's own import raises it again, per item, at collection)
        for name in [n for n in sys.modules if n.split(".")[0] in ("vllm", "aiter")]:
            del sys.modules[name]
    confine.beat()
    from mla_model.registry import load_registry

    st = mla_spec_stub.STATE
    st.registry = load_registry(request["registry"])
    st.kernel = None
    _stand_in_device()
    import pytest

    collector = _Collector()
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        "pytest.ini",
        "--rootdir",
        ".",
        "--confcutdir",
        ".",
        "-o",
        "addopts=",
        "--tb=short",
        "--continue-on-collection-errors",
        "-W",
        "ignore::pytest.PytestUnknownMarkWarning",
        *request["tests"],
    ]
    if request.get("select"):
        args += ["-k", request["select"]]
    code = pytest.main(args, plugins=[collector, _exc_carrier()])
    data = collector.summary()
    data["pytest_exit"] = int(code)
    if int(code) in (3, 4) and not collector.order:  # internal error / usage error: nothing ran
        data = {"fatal": f"pytest could not run the shipped tests (exit {int(code)})"}
    out.write_text(json.dumps(data))


if __name__ == "__main__":
    child_main()
