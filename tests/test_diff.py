"""``mla-spec diff`` as a maintainer uses it: which shapes a gate change sends elsewhere, and how many.

The acceptance check of the diff: every region's shape count equals a brute-force count over the box
of shapes that change exactly that way, no shape of a region changes any other way, and the regions
together hold every changed shape.  The brute force shares nothing with spec/analyses/shape_grid.py and
spec/analyses/regions.py: every valid shape is laid out row by row with numpy (fields nothing reads only
multiply counts), both routes run in the numpy interpretation on every row, AITER's lookup on each
distinct request, and ``resolved_kernel`` resolves each distinct lookup key in plain Python.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from conformance.cli.diff import diff_command
from conformance.cli.errors import OneLineErrors
from mla_model.decision import decide
from mla_model.derived import KERNEL_KV_DTYPES
from mla_model.logic import EnumTerm
from mla_model.registry import NO_KERNEL, asm_lookup, load_registry, resolved_kernel
from mla_model.revisions import REVISIONS
from mla_model.route import ASM_PATHS, PATHS, KernelRequest
from mla_model.shape import FIELD_BY_NAME, FIELDS, Q_DTYPES, Shape
from spec.analyses.diff import UNCHANGED, diff
from spec.proof.terms import FieldTracer, symbolic_shape

REGISTRY = "aiter-0.1.20"
MINI = Path(__file__).parent / "data" / "mini_rocm_aiter_mla.py"
_SCALARS = ("arch", "kv_cache_dtype", "q_dtype", "asm_padding_mode", "gluon_build", "causal")


def _read(revision, reg) -> set[str]:
    tracer = FieldTracer(symbolic_shape().view)
    decide(revision, reg, tracer)
    revision.validity(tracer, reg)
    return tracer.read


def _rule_reads(rule) -> set[str]:
    tracer = FieldTracer(symbolic_shape().view)
    rule[1](tracer)
    return tracer.read


def _value(name: str, column: np.ndarray):
    spec = FIELD_BY_NAME[name]
    return EnumTerm(spec.values, column) if spec.kind == "enum" else column


def _rules_hold(rules, view, n: int) -> np.ndarray:
    """The rules that can be evaluated on this view (the others read fields not laid out yet)."""
    keep = np.ones(n, dtype=bool)
    for _, rule in rules:
        try:
            keep &= np.broadcast_to(np.asarray(rule(view), dtype=bool), (n,))
        except AttributeError:
            continue
    return keep


_PATHS = (*PATHS, "vllm_raises")
_SIZINGS = (None, "below", "at", "above")


def _keys(revision, reg, view, n: int, arch: str, kernels: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, as codes: path (in _PATHS), kernel (index in ``kernels["names"]``, -1 off the ASM paths),
    metadata sizing (in _SIZINGS)."""
    r = revision.route(view, reg)
    path = np.broadcast_to(np.asarray(r.path.term), (n,)).astype(np.int64)
    path = np.where(np.broadcast_to(np.asarray(r.vllm_raises, dtype=bool), (n,)), len(PATHS), path)
    T = np.broadcast_to(r.mtp_decode_qlen, (n,))
    rbt = np.broadcast_to(revision.reorder_batch_threshold(view), (n,))
    sizing = np.where(
        path == PATHS.index("asm_persistent"), np.where(T < rbt, 1, np.where(T == rbt, 2, 3)), 0
    )
    req = r.request
    parts = [
        (req.q_dtype.term if isinstance(req.q_dtype, EnumTerm) else Q_DTYPES.index(req.q_dtype), 2),
        (
            req.kv_dtype.term if isinstance(req.kv_dtype, EnumTerm) else KERNEL_KV_DTYPES.index(req.kv_dtype),
            3,
        ),
        (req.padded_heads, 512),
        (req.kernel_qlen, 64),
        (req.persistent, 2),
        (req.causal, 2),
        (view.num_reqs, 64),
    ]
    packed = np.zeros(n, dtype=np.int64)
    for value, radix in parts:
        packed = packed * radix + np.broadcast_to(np.asarray(value), (n,)).astype(np.int64)
    requests, inverse = np.unique(packed, return_inverse=True)
    digits, rest = [], requests
    for _, radix in reversed(parts):
        rest, digit = np.divmod(rest, radix)
        digits.append(digit)
    q, kv, m, qlen, ps, causal, reqs = reversed(digits)
    # AITER's lookup in numpy over the distinct requests, then resolved_kernel in plain Python per distinct
    # key.
    request = KernelRequest(
        EnumTerm(Q_DTYPES, q), EnumTerm(KERNEL_KV_DTYPES, kv), m, qlen, ps.astype(bool), causal.astype(bool)
    )
    a = asm_lookup(reg, arch, request, reqs)
    ids = []
    for key in zip(
        q.tolist(),
        kv.tolist(),
        *[
            np.broadcast_to(np.asarray(x), q.shape).tolist()
            for x in (a.gqa, a.ps, a.qseqlen, a.causal, a.kernel_ok)
        ],
    ):
        if (arch, key) not in kernels:
            qi, kvi, gqa, aps, qs, acausal, ok = key
            # the pairs compared here refuse DCP (before 0.29): no LSE or round-robin lookups
            lookup = SimpleNamespace(
                kernel_ok=ok, gqa=gqa, ps=aps, qseqlen=qs, causal=acausal, lse=False, cprr=False
            )
            name = resolved_kernel(
                reg, arch, KernelRequest(Q_DTYPES[qi], KERNEL_KV_DTYPES[kvi], 0, 0, aps, acausal), lookup
            )
            name = None if name == NO_KERNEL else name  # the key test_diff counts as no kernel
            kernels[(arch, key)] = kernels["names"].setdefault(name, len(kernels["names"]))
        ids.append(kernels[(arch, key)])
    kernel = np.asarray(ids, dtype=np.int64)[inverse.ravel()]
    on_asm = np.isin(path, [PATHS.index(p) for p in ASM_PATHS])
    return path, np.where(on_asm, kernel, -1), sizing


def _member(region, name: str, values) -> np.ndarray | bool:
    """Whether ``values`` (codes of field ``name``) satisfy the region's constraint on that field."""
    if name not in region.where:
        return True
    spec, allowed = FIELD_BY_NAME[name], region.where[name]
    if spec.kind == "int":
        return np.logical_or.reduce(
            [(np.asarray(values) >= lo) & (np.asarray(values) <= hi) for lo, hi in allowed]
        )
    codes = [spec.values.index(v) for v in allowed] if spec.kind == "enum" else list(allowed)
    return np.isin(values, codes)


def _decode(pair: int, names: dict) -> object:
    """A (old key, new key) pair code back to ((path, kernel, metadata), ...), or "unchanged"."""
    by_id = {i: name for name, i in names.items()}
    keys = []
    for code in divmod(pair, 10**7):
        rest, sizing = divmod(code, len(_SIZINGS))
        path, kernel = divmod(rest, 1000)
        keys.append((_PATHS[path], by_id.get(kernel - 1), _SIZINGS[sizing]))
    return "unchanged" if keys[0] == keys[1] else tuple(keys)


def brute_force(old, new, reg, regions):
    """Over every valid shape of the box (under both revisions): how many change each way, and per region
    how many of its shapes change each way ("unchanged" included).  Counts include the box factor of the
    fields neither revision reads."""
    read = _read(old, reg) | _read(new, reg)
    fields = [f.name for f in FIELDS if f.name in read]
    factor = int(np.prod([len(f.box) for f in FIELDS if f.name not in read]))
    rules = old.rules(reg) + new.rules(reg)
    defaults = {k: v for k, v in Shape().to_json().items() if k not in read}
    # Fields other than the few enum-like scalars as columns, laid out one by one, pruned as soon as a rule
    # can tell.
    cols: dict[str, np.ndarray] = {}
    n = 1
    for name in (f for f in fields if f not in _SCALARS):
        spec = FIELD_BY_NAME[name]
        values = np.arange(len(spec.values)) if spec.kind == "enum" else np.array(spec.box)
        cols = {k: np.repeat(v, len(values)) for k, v in cols.items()}
        cols[name] = np.tile(values, n)
        n *= len(values)
        keep = _rules_hold(
            rules, SimpleNamespace(**defaults, **{k: _value(k, v) for k, v in cols.items()}), n
        )
        cols, n = {k: v[keep] for k, v in cols.items()}, int(keep.sum())
    scalar_rules = [
        rule for rule in rules if _rule_reads(rule) & set(_SCALARS)
    ]  # the others held when laid out
    totals: dict[tuple, int] = {}
    per_region: list[dict[tuple, int]] = [{} for _ in regions]
    kernels: dict = {"names": {}}
    scalar_fields = [f for f in fields if f in _SCALARS]
    for combo in itertools.product(*[FIELD_BY_NAME[f].box for f in scalar_fields]):
        scalars = dict(zip(scalar_fields, combo))
        view = SimpleNamespace(**defaults, **scalars, **{k: _value(k, v) for k, v in cols.items()})
        keep = _rules_hold(scalar_rules, view, n)
        if not keep.any():
            continue
        m = int(keep.sum())
        rows = {k: v[keep] for k, v in cols.items()}
        view = SimpleNamespace(**defaults, **scalars, **{k: _value(k, v) for k, v in rows.items()})
        arch = scalars.get("arch", defaults.get("arch"))
        (p0, k0, m0), (p1, k1, m1) = (_keys(rev, reg, view, m, arch, kernels) for rev in (old, new))
        unchanged = kernels["names"].setdefault(UNCHANGED, len(kernels["names"]))
        kept = (k0 == k1) & (k0 >= 0) & (k0 != kernels["names"].setdefault(None, len(kernels["names"])))
        k0, k1 = np.where(kept, unchanged, k0), np.where(kept, unchanged, k1)
        code = [(p * 1000 + k + 1) * len(_SIZINGS) + z for p, k, z in ((p0, k0, m0), (p1, k1, m1))]
        pairs, ids = np.unique(code[0] * 10**7 + code[1], return_inverse=True)
        names = [_decode(int(pair), kernels["names"]) for pair in pairs]
        counts = np.bincount(ids.ravel(), minlength=len(names))
        for name, count in zip(names, counts.tolist()):
            totals[name] = totals.get(name, 0) + factor * count
        for region, seen in zip(regions, per_region):
            if not all(
                _member(region, f, FIELD_BY_NAME[f].values.index(v) if FIELD_BY_NAME[f].kind == "enum" else v)
                for f, v in scalars.items()
            ):
                continue
            inside = np.ones(m, dtype=bool)
            for f, v in rows.items():
                inside &= _member(region, f, v)
            for name, count in zip(names, np.bincount(ids.ravel()[inside], minlength=len(names)).tolist()):
                if count:
                    seen[name] = seen.get(name, 0) + factor * count
    return totals, per_region


def _key(route) -> tuple:
    return route.path, route.kernel, route.metadata


@pytest.mark.slow
@pytest.mark.parametrize("old, new", [("vllm-0.27", "vllm-0.28"), ("main-pre-51011", "vllm-0.28")])
def test_each_region_counts_exactly_the_shapes_brute_force_finds_changing_that_way(old, new):
    reg = load_registry(REGISTRY)
    result = diff(REVISIONS[old], REVISIONS[new], reg)
    totals, per_region = brute_force(REVISIONS[old], REVISIONS[new], reg, result.regions)
    changes = {name: count for name, count in totals.items() if name != "unchanged"}
    assert result.confirmed_by_z3
    assert result.changed == sum(changes.values())
    placed = dict.fromkeys(changes, 0)
    for region, seen in zip(result.regions, per_region):
        change = (_key(region.old_route), _key(region.new_route))
        assert seen == {change: region.shapes}, f"{region.constraint}: {seen}"
        placed[change] += region.shapes
    assert placed == changes  # the regions are disjoint and hold every changed shape


def test_0_27_to_0_28_lists_the_three_behaviour_changes_of_51011():
    result = diff(REVISIONS["vllm-0.27"], REVISIONS["vllm-0.28"], load_registry(REGISTRY))
    by_change = {}
    for r in result.regions:
        by_change.setdefault((r.old_route.path, r.new_route.path), []).append(r)
    # 1. fp8 caches leave Gluon: decode and verify go to an ASM kernel.
    fp8 = [r for r in by_change[("gluon_decode", "asm_persistent")] if "fp8" in r.constraint]
    assert fp8 and all(r.example.kv_cache_dtype.startswith("fp8") and r.example.max_qo_len == 1 for r in fp8)
    # 2. Metadata sized from reorder_batch_threshold: non-MTP drafters keep the persistent schedule.
    whitelist = by_change[("asm_nonpersistent", "asm_persistent")]
    assert all(r.example.spec_method not in ("none", "mtp", "deepseek_mtp") for r in whitelist)
    assert all(r.new_route.metadata == "at" for r in whitelist)
    sizing = by_change[("asm_persistent", "asm_persistent")]
    # (metadata sized above the step's qlen occurred only under DCP, which vLLM refuses with this backend
    # before 0.29: the whitelist's sizing is only ever too short)
    assert {(r.old_route.metadata, r.new_route.metadata) for r in sizing} == {("below", "at")}
    # 3. The persistent gate follows the routing: small-head ASM steps get metadata up to qlen 4 (bf16).
    small = [r for r in by_change[("gluon_verify", "asm_persistent")] if r.example.kv_cache_dtype == "auto"]
    assert small and all(r.example.num_heads < 16 and r.example.max_qo_len <= 4 for r in small)
    assert result.valid_only_in_old == result.valid_only_in_new == 0


def test_same_revision_has_no_region_and_passes_fail_on_new_routes():
    result = CliRunner().invoke(
        diff_command, ["vllm-0.28", "vllm-0.28", "--fail-on-new-routes", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["regions"] == [] and data["shapes_changed"] == 0 and data["confirmed_by_z3"]


def test_a_sizing_change_alone_is_not_a_new_route():
    base = REVISIONS["vllm-0.28"]

    def oversized(s, reg):
        route = base.route(s, reg)
        return replace(route, mtp_decode_qlen=route.mtp_decode_qlen + 1)

    result = diff(base, replace(base, id="oversized", route=oversized), load_registry(REGISTRY))
    assert result.regions and not result.new_routes
    assert {(r.old_route.metadata, r.new_route.metadata) for r in result.regions} == {("at", "above")}


def test_json_has_the_documented_keys_and_fail_on_new_routes_exits_1():
    result = CliRunner().invoke(
        diff_command, ["vllm-0.27", "vllm-0.28", "--format", "json", "--fail-on-new-routes"]
    )
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["old"] == "vllm-0.27" and data["new"] == "vllm-0.28"
    region = data["regions"][0]
    assert {"constraint", "old_route", "new_route", "shapes"} <= set(region)
    assert set(region["old_route"]) == {"path", "kernel", "metadata"}
    assert list(region["example"]) == [f.name for f in FIELDS]
    assert sum(r["shapes"] for r in data["regions"]) == data["shapes_changed"]


def test_text_groups_by_change_and_says_which_shapes_count():
    result = CliRunner().invoke(diff_command, ["vllm-0.27", "vllm-0.28"])
    assert result.exit_code == 0
    out = result.output
    assert "gluon_decode -> asm_persistent" in out
    assert "kv in {fp8, fp8_e4m3, fp8_e5m2}" in out or "q=fp8" in out
    assert "valid under both revisions" in out and "z3 proved it" in out


def test_two_files_name_a_regression_that_sends_fp8_back_to_gluon(tmp_path):
    old, new = tmp_path / "old.py", tmp_path / "new.py"
    shutil.copy(MINI, old)
    text = MINI.read_text()
    broken = text.replace(
        " or max_qo_len != 1 or is_quantized_kv_cache(kv_cache_dtype):", " or max_qo_len != 1:"
    )
    assert broken != text
    new.write_text(broken)
    result = CliRunner().invoke(
        diff_command, [str(old), str(new), "--format", "json", "--fail-on-new-routes"]
    )
    assert result.exit_code == 1, result.output
    regions = json.loads(result.output)["regions"]
    assert regions and all(r["new_route"]["path"] == "gluon_decode" for r in regions)
    assert all(
        r["example"]["kv_cache_dtype"].startswith("fp8") and r["example"]["arch"] == "gfx950" for r in regions
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["vllm-9.99", "vllm-0.28"], "vllm-9.99"),
        (["vllm-0.27", "no/such/rocm_aiter_mla.py"], "no/such/rocm_aiter_mla.py"),
        (["vllm-0.27", "vllm-0.28", "--registry", "aiter-9"], "aiter-9"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    result = CliRunner().invoke(OneLineErrors(commands={"diff": diff_command}), ["diff", *args])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mla-spec: error:") and needle in lines[0], result.stderr


@pytest.mark.network
def test_release_diff_0_27_1_to_0_28_0_is_the_model_diff_region_for_region():
    """The real gates of both releases (lifted from the code) give the regions brute force checked above."""
    runner = CliRunner()
    real = runner.invoke(diff_command, ["vllm==0.27.1", "vllm==0.28.0", "--format", "json"])
    model = runner.invoke(diff_command, ["vllm-0.27", "vllm-0.28", "--format", "json"])
    assert real.exit_code == model.exit_code == 0, real.output
    strip = lambda data: [
        {k: r[k] for k in ("constraint", "old_route", "new_route", "shapes")}  # noqa: E731
        for r in data["regions"]
    ]
    real_data, model_data = json.loads(real.output), json.loads(model.output)
    assert real_data["old"] == "vllm==0.27.1" and real_data["confirmed_by_z3"]
    assert strip(real_data) == strip(model_data)


@pytest.mark.network
def test_a_release_that_does_not_exist_is_one_line_exit_2():
    result = CliRunner().invoke(
        OneLineErrors(commands={"diff": diff_command}), ["diff", "vllm==0.0.999", "vllm-0.28"]
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "0.0.999" in lines[0], result.stderr


# --- releases and edited files of the DCP era: no crash, and the model's regions -------------------------

# Each adjacent pair of releases, with the model revisions bind proves equal to them.
RELEASE_PAIRS = [
    ("0.27.1", "0.28.0", "vllm-0.27", "vllm-0.28"),
    ("0.28.0", "0.29.0", "vllm-0.28", "vllm-0.29"),
    ("0.29.0", "0.30.0", "vllm-0.29", "vllm-0.30"),
    ("0.30.0", "0.31.0", "vllm-0.30", "vllm-0.31"),
    ("0.31.0", "0.32.0", "vllm-0.31", "vllm-0.32"),
    ("0.32.0", "0.33.0", "vllm-0.32", "vllm-0.33"),
    ("0.33.0", "0.34.0", "vllm-0.33", "vllm-0.34"),
]


def _regions(data: dict) -> list[dict]:
    return [{k: r[k] for k in ("constraint", "old_route", "new_route", "shapes")} for r in data["regions"]]


def _diff_json(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(
        OneLineErrors(commands={"diff": diff_command}), ["diff", *args, "--format", "json"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1), result.output  # 1: some region sends shapes elsewhere (no flag: never)
    return result.exit_code, json.loads(result.stdout)


# Slow (CI's second step): each pair lifts two releases and evaluates them on the whole grid
# (0.33->0.34: 24.7 s and 2.9 GB alone on 2 cores); the 0.34.0 file against itself, in the default run,
# keeps the 0.34-era crash covered.
@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize(
    "old, new, old_model, new_model",
    RELEASE_PAIRS,
    ids=[f"{p[0]}->{p[1]}" for p in RELEASE_PAIRS],
)
def test_each_adjacent_release_pair_diffs_as_its_model_revisions_do(old, new, old_model, new_model):
    """The real gates of both releases, lifted (0.34.0's V-scale probe included, which crashed diff with
    'unhashable type: numpy.ndarray'), give the regions of the model revisions bind proves equal to them."""
    code, real = _diff_json(f"vllm=={old}", f"vllm=={new}")
    _, model = _diff_json(old_model, new_model)
    assert code == 0 and real["confirmed_by_z3"]
    assert _regions(real) == _regions(model)
    assert real["shapes_compared"] == model["shapes_compared"]


def _copy_in_tree(tmp_path: Path, release: str, edit: tuple[str, str] | None = None) -> Path:
    """The release's rocm_aiter_mla.py, copied (and edited by text replacement) into a tree of links to the
    rest of the cached release, so that its builder still runs in its own tree."""
    from spec.realcode.source import RELATIVE_PATH, fetch_release

    original = fetch_release(release)
    source_root = original.parents[len(RELATIVE_PATH.parts) - 1]
    root = tmp_path / "tree"
    here, there = root, source_root
    for part in RELATIVE_PATH.parts:
        here.mkdir(exist_ok=True)
        for entry in there.iterdir():
            if entry.name != part:
                (here / entry.name).symlink_to(entry)
        here, there = here / part, there / part
    text = original.read_text()
    if edit is not None:
        assert text.count(edit[0]) == 1, f"{edit[0]!r} is not once in {release}'s file"
        text = text.replace(*edit)
    here.write_text(text)
    return here


@pytest.mark.network
def test_a_0_34_0_file_against_itself_has_no_region_and_passes_fail_on_new_routes():
    from spec.realcode.source import fetch_release

    f = str(fetch_release("0.34.0"))
    result = CliRunner().invoke(diff_command, [f, f, "--fail-on-new-routes", "--format", "json"])
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["regions"] == [] and data["confirmed_by_z3"], result.output
    assert data["shapes_compared"] > 0


@pytest.mark.network
@pytest.mark.slow  # 162 s on 2 busy cores: CI's second step
def test_an_edited_0_34_0_file_shows_the_shapes_its_moved_threshold_sends_elsewhere(tmp_path):
    """vLLM 0.34.0's file with the padded persistent gate's qlen bound moved from 4 to 5: the qlen-5
    shapes of padded ranks change route, each region re-run and z3-confirmed; the unedited copy in the same
    kind of tree has no region."""
    edit = ("_ASM_PADDED_MAX_PS_QLEN: Final = 4", "_ASM_PADDED_MAX_PS_QLEN: Final = 5")
    edited = _copy_in_tree(tmp_path, "0.34.0", edit)
    code, data = _diff_json("vllm==0.34.0", str(edited))
    assert code == 0 and data["confirmed_by_z3"] and data["regions"], data
    assert all(re.search(r"\bqlen=5(,|$)", r["constraint"]) for r in data["regions"]), data["regions"]
    assert {r["new_route"]["path"] for r in data["regions"]} == {"asm_persistent"}
    strict = CliRunner().invoke(
        OneLineErrors(commands={"diff": diff_command}),
        ["diff", "vllm==0.34.0", str(edited), "--fail-on-new-routes"],
    )
    assert strict.exit_code == 1 and "sends shapes to a path or kernel" in strict.stdout, strict.output


def test_a_crash_of_mla_spec_is_one_internal_error_line_exit_4_never_new_routes(monkeypatch):
    """Under --fail-on-new-routes exit 1 means "new routes": a bug of ours must not read as one."""
    import spec.analyses.diff as diff_module

    def broken(*args, **kwargs):
        raise TypeError("unhashable type: 'numpy.ndarray'")

    monkeypatch.setattr(diff_module, "diff", broken)
    result = CliRunner().invoke(
        OneLineErrors(commands={"diff": diff_command}),
        ["diff", "vllm-0.33", "vllm-0.34", "--fail-on-new-routes"],
    )
    assert result.exit_code == 4 and result.stdout == "", result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("mla-spec: error: internal error") and "TypeError" in lines[0]
