"""Cache faults and concurrency (issue 23, item 6): the release cache, thresholds/*.json and memory/*.json.

Every test runs on a temporary ``XDG_CACHE_HOME``.  No test downloads: a fake ``pip`` package is put first
on ``PYTHONPATH``, so the ``python -m pip download ...`` that :mod:`spec.realcode.source` runs reaches it
(the real command line, unchanged).  The fake does what pip does to its ``TMPDIR``: folders appear and
vanish while it works (``pip-build-tracker-*``, ``pip-unpack-*``), the sdist is unpacked into
``pip-download-*/vllm_*``, and it prints pip's lines; it writes its pid to ``FAKE_PIP_LOG`` each time it
runs, and ``FAKE_PIP_MODE`` picks what it does (``ok``, ``nonet``, ``missing``, ``not-utf8``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spec.realcode import source
from spec.realcode.source import RELATIVE_PATH, SourceError

VERSION = "9.9.9"
GATE = "def use_gluon_decode():\n    return False\n"

FAKE_PIP = textwrap.dedent(
    """
    import os, shutil, sys, time
    from pathlib import Path

    with open(os.environ["FAKE_PIP_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
    mode = os.environ.get("FAKE_PIP_MODE", "ok")
    req = next(a for a in sys.argv if "==" in a)
    version = req.split("==")[1]
    print(f"Collecting {req}", flush=True)
    if req.startswith("amd-aiter=="):  # a wheel holding AITER's two files
        import zipfile

        out = Path(sys.argv[sys.argv.index("-d") + 1])
        with zipfile.ZipFile(out / f"amd_aiter-{version}-py3-none-any.whl", "w") as whl:
            whl.writestr("aiter/ops/attention.py", "def get_mla_metadata_info_v1(): pass\\n")
            whl.writestr("aiter/mla.py", "def mla_decode_fwd(): pass\\n")
        print(f"Saved {out}")
        sys.exit(0)
    tmp = Path(os.environ["TMPDIR"])
    if mode == "nonet":
        print("WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
              "connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection "
              "object at 0x7f4>: Failed to establish a new connection: [Errno 101] Network is "
              "unreachable')': /simple/vllm/")
        print(f"ERROR: Could not find a version that satisfies the requirement {req} (from versions: none)")
        print(f"ERROR: No matching distribution found for {req}")
        sys.exit(1)
    if mode == "missing":
        print(f"ERROR: Could not find a version that satisfies the requirement {req} "
              "(from versions: 0.33.0, 0.34.0)")
        print(f"ERROR: No matching distribution found for {req}")
        sys.exit(1)
    name = f"vllm-{version}.tar.gz"
    print(f"  Downloading {name} (1.0 MB)", flush=True)
    unpack = tmp / f"pip-unpack-{os.getpid()}"
    unpack.mkdir()
    (unpack / name).write_bytes(b"x" * 1_000_000)
    end = time.monotonic() + float(os.environ.get("FAKE_PIP_SECONDS", "0"))
    n = 0
    while time.monotonic() < end:  # pip's build trackers: nested folders made and removed at once
        tracker = tmp / f"pip-build-tracker-{n}"
        for i in range(60):
            (tracker / str(i) / "x").mkdir(parents=True)
            (tracker / str(i) / "x" / "f").write_text("x")
        shutil.rmtree(tracker)
        n += 1
    tree = tmp / f"pip-download-{os.getpid()}" / "vllm_0123"
    gate = tree / "vllm/v1/attention/backends/mla/rocm_aiter_mla.py"
    gate.parent.mkdir(parents=True)
    gate.write_bytes(b"\\xff\\xfe not utf-8" if mode == "not-utf8" else os.environb[b"FAKE_PIP_GATE"])
    (tree / "PKG-INFO").write_text(f"Name: vllm\\nVersion: {version}\\n")
    (tree / "vllm/v1/attention/backend.py").write_text("")
    shutil.rmtree(unpack)
    print("  Preparing metadata (pyproject.toml): finished with status 'error'")
    print("error: metadata-generation-failed")
    sys.exit(1)
    """
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A temporary XDG_CACHE_HOME, the fake pip first on PYTHONPATH; returns the fake's run log."""
    fake = tmp_path / "fake"
    (fake / "pip").mkdir(parents=True)
    (fake / "pip" / "__init__.py").write_text("")
    (fake / "pip" / "__main__.py").write_text(FAKE_PIP)
    log = tmp_path / "pip-runs.txt"
    log.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FAKE_PIP_LOG", str(log))
    monkeypatch.setenv("FAKE_PIP_GATE", GATE)
    return log


def runs(log: Path) -> int:
    return len(log.read_text().split())


def leftovers(root: Path) -> list[str]:
    """What a writer left behind: anything staged, temporary or partial under ``root``."""
    return sorted(
        str(p) for p in root.rglob("*") if p.name.endswith((".partial", ".tmp")) or p.name.startswith("pip-")
    )


def test_a_fetch_survives_pip_removing_folders_while_it_works(cache, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_SECONDS", "3")
    tree = source.release_tree(VERSION)
    assert (tree / RELATIVE_PATH).read_text() == GATE
    assert tree.stat().st_mode & 0o777 == 0o755  # readable by others, as a folder mkdir makes
    assert runs(cache) == 1
    assert leftovers(Path(os.environ["XDG_CACHE_HOME"])) == []


def test_eight_processes_fetching_one_release_all_succeed_with_one_download(cache, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_SECONDS", "1.5")
    fetch = f"from spec.realcode.source import release_tree; print(release_tree({VERSION!r}))"
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = [subprocess.Popen([sys.executable, "-c", fetch], **pipes) for _ in range(8)]
    results = [(*p.communicate(timeout=120), p.returncode) for p in procs]
    results = [(rc, out, err) for out, err, rc in results]
    assert [rc for rc, _, _ in results] == [0] * 8, [err for _, _, err in results if err]
    assert {out.strip() for _, out, _ in results} == {str(source.cache_dir() / VERSION / "tree")}
    assert runs(cache) == 1
    assert (source.cache_dir() / VERSION / "tree" / RELATIVE_PATH).read_text() == GATE
    assert leftovers(source.cache_dir()) == []


def test_no_network_reads_cannot_reach_pypi_and_a_missing_release_reads_so(cache, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "nonet")
    with pytest.raises(SourceError) as e:
        source.release_tree(VERSION)
    assert str(e.value) == "cannot reach PyPI: Network is unreachable"
    monkeypatch.setenv("FAKE_PIP_MODE", "missing")
    with pytest.raises(SourceError) as e:
        source.release_tree(VERSION)
    assert str(e.value) == f"vLLM release {VERSION} does not exist on PyPI"
    assert leftovers(source.cache_dir()) == []


# What pip 23.2.1 printed in this session (the last lines; "Looking in indexes" lines left out).
_NONE = "ERROR: Could not find a version that satisfies the requirement vllm==0.33.0 (from versions: none)\n"
_RETRY = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
    "connection "
)
PIP_SAID = {
    "--index-url http://127.0.0.1:9/simple": (
        _RETRY + "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at "
        "0x7f93bd0c30d0>: Failed to establish a new connection: [Errno 111] Connection refused')': "
        "/simple/vllm/\n" + _NONE,
        "cannot reach PyPI: Connection refused",
    ),
    "HTTPS_PROXY=http://127.0.0.1:9 --retries 1": (
        _RETRY + "broken by 'ProxyError('Cannot connect to proxy.', NewConnectionError('<pip._vendor.urllib3."
        "connection.HTTPSConnection object at 0x7f47a1a9c790>: Failed to establish a new connection: "
        "[Errno 111] Connection refused'))': /simple/vllm/\n" + _NONE,
        "cannot reach PyPI: cannot connect to the proxy (Connection refused)",
    ),
    "HTTPS_PROXY=http://127.0.0.1:9 --retries 0": (
        _NONE,
        "cannot reach PyPI: pip listed no versions at all (from versions: none)",
    ),
    "vllm==0.0.99": (
        "ERROR: Could not find a version that satisfies the requirement vllm==0.0.99 (from versions: 0.0.1, "
        "0.1.0, 0.33.0, 0.34.0)\nERROR: No matching distribution found for vllm==0.0.99\n",
        "vLLM release 0.0.99 does not exist on PyPI",
    ),
}


@pytest.mark.parametrize("case", list(PIP_SAID))
def test_pips_words_tell_no_network_from_a_missing_release(case):
    output, line = PIP_SAID[case]
    assert source.pip_failure(output, "vLLM 0.0.99", "vLLM release 0.0.99 does not exist") == line


def test_the_cli_says_no_network_in_one_line(cache, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_MODE", "nonet")
    proc = subprocess.run(
        [sys.executable, "-c", "from conformance.cli import main; main()", "check", "--vllm", VERSION],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == "mla-spec: error: cannot reach PyPI: Network is unreachable\n"


def _file_in_the_way(tmp: Path) -> Path:
    (tmp / "xdg").mkdir()
    (tmp / "xdg" / "mla-spec").write_text("not a folder")
    return tmp / "xdg"


def _read_only(tmp: Path) -> Path:
    (tmp / "ro").mkdir(mode=0o555)
    return tmp / "ro"


UNWRITABLE = {
    "a file in the way": _file_in_the_way,
    "/proc/nope": lambda tmp: Path("/proc/nope"),
    "/sys/nope (refused even to root)": lambda tmp: Path("/sys/nope"),
    "a read-only folder": _read_only,
}


@pytest.mark.parametrize("where", list(UNWRITABLE))
def test_a_cache_that_cannot_be_written_is_named_before_any_download(cache, tmp_path, monkeypatch, where):
    if where == "a read-only folder" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder (the /sys case stands in for it)")
    xdg = UNWRITABLE[where](tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    with pytest.raises(SourceError) as e:
        source.release_tree(VERSION)
    message = str(e.value)
    assert message.startswith(f"the cache folder {xdg / 'mla-spec' / 'vllm' / VERSION} is not writable (")
    assert "\n" not in message
    assert runs(cache) == 0  # no download was started


def _not_utf8(tree: Path) -> None:
    (tree / RELATIVE_PATH).write_bytes(b"\xff\xfe")


def _no_gate_file(tree: Path) -> None:
    (tree / RELATIVE_PATH).unlink()


def _a_file_for_the_tree(tree: Path) -> None:
    import shutil

    shutil.rmtree(tree)
    tree.write_text("a file where the tree belongs")


DAMAGE = {"not UTF-8": _not_utf8, "no rocm_aiter_mla.py": _no_gate_file, "a file": _a_file_for_the_tree}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_tree_is_fetched_again_once(cache, damage):
    tree = source.release_tree(VERSION)
    DAMAGE[damage](tree)
    source_ = source.resolve(VERSION)
    assert source_.text == GATE
    assert runs(cache) == 2
    assert source.release_tree(VERSION) == tree and runs(cache) == 2  # whole again: read, not fetched
    assert leftovers(source.cache_dir()) == []


def test_a_tree_still_damaged_after_a_fresh_download_is_one_line_naming_it(cache, monkeypatch):
    tree = source.release_tree(VERSION)
    _not_utf8(tree)
    monkeypatch.setenv("FAKE_PIP_MODE", "not-utf8")
    with pytest.raises(SourceError) as e:
        source.resolve(VERSION)
    assert str(e.value) == (
        f"{tree / RELATIVE_PATH} is not UTF-8 text, even as downloaded just now (vLLM {VERSION})"
    )
    assert runs(cache) == 2


@pytest.mark.parametrize("when", ["copying the tree", "pip running"])
@pytest.mark.parametrize("fault", [KeyboardInterrupt, OSError])
def test_an_interrupted_fetch_leaves_nothing_partial(cache, monkeypatch, when, fault):
    monkeypatch.setenv("FAKE_PIP_SECONDS", "1.5")  # pip's folders come and go while it is stopped
    if when == "copying the tree":
        copied = []

        def copyfile(src, dst):
            if len(copied) == 1:
                raise fault(28, "No space left on device")
            copied.append(dst)
            Path(dst).write_bytes(Path(src).read_bytes())

        monkeypatch.setattr(source.shutil, "copyfile", copyfile)
    else:
        import time

        real_sleep = time.sleep

        def sleep(seconds):
            if runs(cache):  # pip has started
                raise fault(28, "No space left on device")
            real_sleep(0.05)

        monkeypatch.setattr(source.time, "sleep", sleep)
    with pytest.raises(fault) as e:
        source.release_tree(VERSION)
    assert e.value.args[0] == 28  # the fault injected, not another
    assert leftovers(Path(os.environ["XDG_CACHE_HOME"])) == []
    assert not (source.cache_dir() / VERSION / "tree").exists()
    for pid in map(int, cache.read_text().split()):  # pip was stopped, not left writing
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_damaged_aiter_file_is_fetched_again_once_and_an_unwritable_cache_is_named(cache, monkeypatch):
    from spec.realcode.aiter_sizing import aiter_code

    first = aiter_code("0.0.1")
    first.mla.write_bytes(b"\xff\xfe")
    again = aiter_code("0.0.1")
    assert again.mla.read_text() == "def mla_decode_fwd(): pass\n"
    assert runs(cache) == 2
    assert leftovers(source.cache_dir().parent) == []
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/nope")
    with pytest.raises(
        SourceError, match=r"^the cache folder /proc/nope/mla-spec/aiter/0.0.2 is not writable"
    ):
        aiter_code("0.0.2")
    assert runs(cache) == 2


def _alive(pid: int) -> bool:
    """Running (a zombie left for init to reap is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_fetch_killed_with_sigkill_takes_pip_with_it_and_the_next_fetch_cleans_up(cache, monkeypatch):
    import signal
    import time

    monkeypatch.setenv("FAKE_PIP_SECONDS", "20")
    fetch = f"from spec.realcode.source import release_tree; release_tree({VERSION!r})"
    proc = subprocess.Popen([sys.executable, "-c", fetch])
    deadline = time.monotonic() + 60
    while not runs(cache) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # pip's folders are there
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1)
    assert not any(_alive(int(pid)) for pid in cache.read_text().split())
    monkeypatch.setenv("FAKE_PIP_SECONDS", "0")
    assert (source.release_tree(VERSION) / RELATIVE_PATH).read_text() == GATE
    assert runs(cache) == 2
    assert leftovers(Path(os.environ["XDG_CACHE_HOME"])) == []


# --- thresholds/*.json and memory/*.json ---------------------------------------------------------------


@pytest.fixture
def release(tmp_path, monkeypatch):
    """A ReleaseCode over a file of our own (the cache key reads its bytes)."""
    from spec.realcode.executed.harness import ReleaseCode

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "rocm_aiter_mla.py").write_text(GATE)
    return ReleaseCode("vllm==9.9.9", tmp_path / "rocm_aiter_mla.py", tmp_path)


def _fake_builder(monkeypatch):
    """The harness replaced by a builder whose threshold is 1 + k for every drafter; counts its runs."""
    from spec.realcode.executed import threshold

    calls = []

    def execute(code, shapes):
        calls.append(code)
        for s in shapes:
            yield {"shape": s.to_json(), "threshold": 1 + s.num_spec_tokens}

    monkeypatch.setattr(threshold, "execute", execute)
    threshold.executed_thresholds.cache_clear()
    return calls


def test_a_truncated_thresholds_entry_is_rebuilt_once(release, monkeypatch):
    from spec.realcode.executed import threshold

    calls = _fake_builder(monkeypatch)
    first = threshold.executed_thresholds(release)
    entry = threshold._cache_file(release)  # noqa: PLC2701
    for damaged in (entry.read_bytes()[:-7], b"\xff\xfe{", b"[1, 2]"):
        entry.write_bytes(damaged)
        threshold.executed_thresholds.cache_clear()
        assert threshold.executed_thresholds(release) == first
        assert json.loads(entry.read_text()) == json.loads(json.dumps(first))
    assert len(calls) == 4
    threshold.executed_thresholds.cache_clear()
    assert threshold.executed_thresholds(release) == first and len(calls) == 4  # whole again: read
    assert leftovers(entry.parent) == []


def test_a_thresholds_entry_that_cannot_be_rebuilt_is_one_line_naming_it(release, monkeypatch):
    from spec.realcode.executed import threshold

    _fake_builder(monkeypatch)
    entry = threshold._cache_file(release)  # noqa: PLC2701
    (entry / "in-the-way").mkdir(parents=True)  # a folder where the entry belongs
    with pytest.raises(SourceError) as e:
        threshold.executed_thresholds(release)
    assert str(e.value) == f"cannot write the cache entry {entry} (Is a directory)"
    assert leftovers(entry.parent) == []


def test_thresholds_and_memory_name_an_unwritable_cache_before_running_anything(
    release, monkeypatch, tmp_path
):
    from mla_model.shape import Shape
    from spec.analyses import memory
    from spec.realcode.executed import threshold

    built, measured = _fake_builder(monkeypatch), _fake_memory(monkeypatch, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/nope")
    with pytest.raises(SourceError, match=r"^the cache folder /proc/nope/mla-spec/thresholds is not writ"):
        threshold.executed_thresholds(release)
    with pytest.raises(SourceError, match=r"^the cache folder /proc/nope/mla-spec/memory is not writable"):
        memory.measure(release, [Shape(num_heads=16)], 256)
    assert built == [] and measured == []


def _fake_memory(monkeypatch, tmp_path):
    """measure() with AITER's files and the memory child replaced; counts the child's runs."""
    from spec.analyses import memory
    from spec.realcode.aiter_sizing import AiterCode

    (tmp_path / "attention.py").write_text("")
    (tmp_path / "mla.py").write_text("")
    files = AiterCode("amd-aiter==0", tmp_path / "attention.py", tmp_path / "mla.py")
    monkeypatch.setattr(memory, "aiter_code", lambda aiter: files)
    calls = []

    def run_module(module, request, scratch, env, timeout):
        calls.append(request["shapes"])
        rows = [{"shape": s, "buffers": {"work_meta_data": 64}, "scratch": 32} for s in request["shapes"]]
        stdout = "".join(json.dumps(r) + "\n" for r in [*rows, {"done": True}])
        return subprocess.CompletedProcess([], 0, stdout, "")

    monkeypatch.setattr(memory, "run_module", run_module)
    return calls


def test_a_truncated_memory_entry_is_rebuilt_once(release, monkeypatch, tmp_path):
    from mla_model.shape import Shape
    from spec.analyses import memory

    calls = _fake_memory(monkeypatch, tmp_path)
    shape = Shape(num_heads=16)
    first = memory.measure(release, [shape], 256)
    entry = next((source.cache_dir().parent / "memory").glob("*.json"))
    for damaged in (entry.read_bytes()[:-5], b"\xff\xfe{", b'{"x": 1}'):
        entry.write_bytes(damaged)
        assert memory.measure(release, [shape], 256) == first
    assert len(calls) == 4
    assert memory.measure(release, [shape], 256) == first and len(calls) == 4  # whole again: read
    assert leftovers(entry.parent) == []


@pytest.mark.parametrize("fault", [KeyboardInterrupt, OSError])
def test_an_interrupted_entry_write_leaves_no_entry_and_no_temp_file(release, monkeypatch, fault):
    from spec.realcode.executed import threshold

    _fake_builder(monkeypatch)

    def replace(src, dst):  # the moment the whole entry would be named
        raise fault(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises((fault, SourceError)):
        threshold.executed_thresholds(release)
    entry = threshold._cache_file(release)  # noqa: PLC2701
    assert list(entry.parent.iterdir()) == []


def test_check_of_a_tree_ends_in_one_line_when_its_thresholds_cannot_be_cached(tmp_path, monkeypatch):
    """A cache fault is the user's machine, not a file the harness cannot run: check must not fall back to
    0.28.0's formula (on the code before this, it did, and said so only in the revision's title)."""
    from spec.realcode import revision
    from spec.realcode.cache_io import CacheError
    from spec.realcode.executed import harness

    tree = tmp_path / "tree"
    (tree / RELATIVE_PATH).parent.mkdir(parents=True)
    (tree / RELATIVE_PATH).write_text(GATE)
    monkeypatch.setattr(
        harness, "release_code", lambda spec: harness.ReleaseCode("vllm==9.9.9", Path(spec), tree)
    )
    _fake_builder(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/nope")
    source_ = source.Source(str(tree / RELATIVE_PATH), tree / RELATIVE_PATH, GATE)
    with pytest.raises(CacheError, match=r"^the cache folder /proc/nope/mla-spec/thresholds is not writ"):
        revision._threshold(source_)  # noqa: PLC2701


@pytest.mark.slow  # not in the README's command: the stress run runs that command before it writes the record
def test_the_cold_cache_record_on_the_benchmarks_page_is_the_scripts_rendering_and_passed():
    """docs/reference/benchmarks.md's cold-cache part is ``render`` of the stored record, which passed."""
    from benchmarks import cold_cache_stress as stress

    record = json.loads(stress.RECORD.read_text())
    part = stress.SECTION.search(stress.PAGE.read_text())
    assert part, "no cold-cache markers in docs/reference/benchmarks.md"
    assert part.group(0) == part.group(1) + stress.render(record) + part.group(2), (
        "the cold-cache part differs from its record: run python -m benchmarks.cold_cache_stress --write"
    )
    assert record["passed"] and len(record["runs"]) >= 3 and record["fetcher"]["exit"] == 0
    assert all(r["exit"] == 0 for r in record["runs"]) and record["runs"][0]["fetcher_running_at_start"]
