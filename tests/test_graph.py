"""The routing graph: what a user sees reachable or dead, and z3's reachability against a brute force."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
from click.testing import CliRunner

from conformance.cli.errors import OneLineErrors
from conformance.cli.graph import graph_command
from conformance.cli.render.graph import render
from mla_model.decision import decide
from mla_model.derived import kernel_kv_dtype
from mla_model.failures import failure_kind
from mla_model.registry import load_registry
from mla_model.revisions import REVISIONS
from mla_model.route import PATHS
from mla_model.shape import FIELD_BY_NAME, FIELDS, Shape
from spec.analyses.graph import GLUON_FP8, TRITON, leaf_of, routing_graph
from spec.proof.bruteforce import column_view, fields_read, valid_columns
from tests.params import regular_and_slow

REGISTRY = "aiter-0.1.20"
# A slice of the brute-force box (FieldSpec.box): every enum and flag value, these heads, qlens and k.
SLICE = {
    "num_heads": (1, 2, 3, 4, 5, 8, 12, 15, 16, 17, 24, 32, 48, 64, 96, 112, 113, 128, 256),
    "max_qo_len": (*range(1, 7), 8, 9, 16, 17, 32),
    "num_spec_tokens": (0, 1, 2, 4, 8, 15),
    "num_reqs": (1, 32),
    "spec_method": ("none", "mtp", "deepseek_mtp", "eagle", "dspark"),  # each drafter family
}


@cache
def _graph(revision: str, registry: str = REGISTRY):
    return routing_graph(revision, registry)


GRAPHS = [
    *[(r, REGISTRY) for r in REVISIONS],
    ("vllm-0.27", "aiter-0.1.19"),
]  # the oldest and newest run regularly


@pytest.fixture(params=GRAPHS, ids="@".join)
def graph(request):
    return _graph(*request.param)


def _reachable(g, n: str) -> bool:
    return g.nodes[n]["reachable"]


def test_what_a_user_notices_in_each_revision():
    old, fixed, new = (_graph(r) for r in ("vllm-0.27", "vllm-0.28", "vllm-0.34"))
    dcp_paths = ("triton_dcp_verify", "segmented_dcp_verify")
    for g in (old, fixed, new):
        assert all(_reachable(g, p) for p in PATHS if p not in ("triton_verify", *dcp_paths))
    assert not _reachable(old, "triton_verify") and not _reachable(fixed, "triton_verify")
    assert _reachable(new, "triton_verify") and _reachable(new, TRITON)
    # DCP verify routes exist from 0.29 on; before, vLLM refuses DCP with this backend.
    assert not any(_reachable(g, p) for g in (old, fixed) for p in dcp_paths)
    assert all(_reachable(new, p) for p in dcp_paths)
    # #51011's first fault: fp8 reaches Gluon in 0.27, never after.
    assert _reachable(old, GLUON_FP8) and not _reachable(fixed, GLUON_FP8) and not _reachable(new, GLUON_FP8)
    assert old.edges["use_gluon_decode", "gluon_decode"]["condition"] == "heads<16 ∧ qlen==1"
    assert fixed.edges["use_gluon_decode", "gluon_decode"]["condition"].startswith(
        "heads<16 ∧ qlen==1 ∧ kv not fp8 ∧ mode≠asm ∧ gfx950"
    )
    assert (
        fixed.edges["use_persistent_metadata", "asm_persistent"]["condition"] == "heads≥16 ∨ qlen≤4 ∨ kv fp8"
    )
    assert old.edges["use_triton_verify", "triton_verify"]["condition"] == "never"
    # The pre-fix persistent gate sized metadata from the drafter whitelist: get_block_n_fp8 KeyError.
    assert any(n.endswith(":key_error") for n in old) and not any(n.endswith(":key_error") for n in fixed)


def test_every_reachable_node_has_a_witness_the_plain_python_route_confirms(graph):
    rev, reg = REVISIONS[graph.graph["revision"]], load_registry(graph.graph["registry"])
    for (path, leaf), a in graph.edges.items():
        if a["kind"] != "leaf" or not a["reachable"]:
            continue
        d = decide(rev, reg, a["witness"])
        assert rev.is_valid(a["witness"], reg) and d.route.path == path and leaf_of(reg, d) == leaf, (
            path,
            leaf,
        )
    for n, a in graph.nodes.items():
        assert a["reachable"] == (a["witness"] is not None)
        if a["kind"] == "path" and a["reachable"]:
            assert decide(rev, reg, a["witness"]).route.path == n


def _box_slice(revision_id: str, registry_id: str):
    """The valid shapes of the slice as numpy columns (pruned by the validity rules as they are laid out)."""
    rev, reg = REVISIONS[revision_id], load_registry(registry_id)
    read, defaults = fields_read(revision_id, registry_id, ()), Shape().to_json()
    fixed = {name: value for name, value in defaults.items() if name not in read}
    return fixed, valid_columns(rev.rules(reg), fixed, list(read), values=SLICE)


@pytest.mark.parametrize(
    "revision_id, registry_id",
    regular_and_slow(GRAPHS, GRAPHS[0], GRAPHS[-2], unpack=True, ids="@".join),
)
def test_z3_reachability_agrees_with_a_brute_force_sweep(revision_id, registry_id):
    """No shape of the slice ends in a leaf (or takes a path to a leaf) that z3 marks dead or never found."""
    graph = _graph(revision_id, registry_id)
    rev, reg = REVISIONS[revision_id], load_registry(registry_id)
    fixed, cols = _box_slice(revision_id, registry_id)
    n = len(next(iter(cols.values())))
    view = column_view(fixed, cols)
    d = decide(rev, reg, view)
    parts = [
        d.route.path,
        view.arch,
        failure_kind(d),
        view.q_dtype,
        d.route.request.kv_dtype,
        d.asm.gqa,
        d.asm.ps,
        d.asm.qseqlen,
        d.asm.causal,
        kernel_kv_dtype(view),
    ]
    key = np.zeros(n, dtype=np.int64)
    for part in parts:  # one mixed-radix integer per shape; the leaf is a function of it
        column = np.broadcast_to(np.asarray(getattr(part, "term", part), dtype=np.int64), (n,))
        key = key * (int(column.max()) + 1) + column
    _, first = np.unique(key, return_index=True)
    reached = set()
    for i in first:
        shape = Shape(**fixed, **{k: _decode(k, v[i]) for k, v in cols.items()})
        concrete = decide(rev, reg, shape)
        reached.add((concrete.route.path, leaf_of(reg, concrete)))
    z3_edges = {e for e, a in graph.edges.items() if a["kind"] == "leaf" and a["reachable"]}
    assert n > 50_000 and reached <= z3_edges, sorted(reached - z3_edges)
    assert {p for p, _ in reached} == {p for p in PATHS if _reachable(graph, p)}


def _decode(name: str, value):
    spec = FIELD_BY_NAME[name]
    return (
        spec.values[int(value)] if spec.kind == "enum" else bool(value) if spec.kind == "bool" else int(value)
    )


# --- the command ------------------------------------------------------------------------------


def test_json_lists_nodes_and_edges_with_canonical_witnesses():
    result = CliRunner().invoke(graph_command, ["--revision", "vllm-0.34", "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["revision"], out["registry"]) == ("vllm-0.34", REGISTRY)
    nodes = {n["id"]: n for n in out["nodes"]}
    assert nodes["triton_verify"]["reachable"] and nodes["triton_verify"]["kind"] == "path"
    assert not nodes[GLUON_FP8]["reachable"] and nodes[GLUON_FP8]["witness"] is None
    assert list(nodes["gluon_decode"]["witness"]) == [f.name for f in FIELDS]
    assert nodes["gluon_decode"]["witness"]["num_reqs"] == 1  # canonical: Shape defaults where allowed
    assert {"from", "to", "condition"} <= set(out["edges"][0])


def test_png_is_written_small_and_text_outline_without_out(tmp_path):
    out = tmp_path / "g.png"
    result = CliRunner().invoke(graph_command, ["--revision", "vllm-0.28", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "dead paths: triton_verify" in result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size < 300_000
    text = CliRunner().invoke(graph_command, ["--revision", "vllm-0.27", "--registry", "aiter-0.1.19"]).output
    assert "triton_verify  [dead]" in text and "get_block_n_fp8 KeyError" in text


def test_svg_and_dot_render_the_same_graph(tmp_path):
    g = _graph("vllm-0.28")
    render(g, tmp_path / "g.svg")
    render(g, tmp_path / "g.dot")
    svg, dot = (tmp_path / "g.svg").read_text(), (tmp_path / "g.dot").read_text()
    assert "use_persistent_metadata?" in svg and "triton_verify" in svg
    assert dot.startswith("digraph") and '"use_gluon_decode" -> "gluon_decode"' in dot and "dashed" in dot


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--revision", "vllm-9.99"], "'vllm-9.99' is not one of 'vllm-0.27'"),
        (["--registry", "aiter-9"], "'aiter-9' is not one of 'aiter-0.1.19'"),
        (["--out", "g.jpg"], "unsupported extension '.jpg'"),
        (["--out", "/nonexistent/folder/g.png"], "cannot write /nonexistent/folder/g.png"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    result = CliRunner().invoke(OneLineErrors(commands={"graph": graph_command}), ["graph", *args])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.output
