"""Draw the routing graph of :mod:`spec.analyses.graph`: PNG/SVG via networkx + matplotlib, DOT via pydot.

No system graphviz is needed.  The layout is layered left to right: forward_mqa's
decisions (one column, in vLLM's order, each level with the path it selects),
the five paths, then the leaves grouped by the paths that reach them and by
arch.  Each decision's "yes" edge carries its condition; reachable nodes are
filled by kind, dead ones are grey and dashed.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import networkx as nx

from mla_model.route import PATHS

FORMATS = (".png", ".svg", ".dot")

PATH_TEXT = {  # mla_model.route.PATHS, as a newcomer reads them, and the family that colours them
    "gluon_decode": ("gluon", "AITER Gluon, one query token"),
    "gluon_verify": ("gluon", "AITER Gluon, multi-token verify"),
    "triton_verify": ("triton", "vLLM Triton causal verify"),
    "triton_dcp_verify": ("triton", "vLLM Triton DCP verify, one row per token"),
    "segmented_dcp_verify": ("triton", "AITER segmented MLA, DCP verify"),
    "asm_persistent": ("asm", "AITER ASM, vLLM's persistent metadata"),
    "asm_nonpersistent": ("asm", "AITER ASM, AITER's own split metadata"),
}
STYLE = {  # kind -> (fill, border)
    "decision": ("#fff3c4", "#a07800"),
    "gluon": ("#e9ddf7", "#6a3d9a"),
    "triton": ("#fdc896", "#c25400"),
    "asm": ("#d8e8f6", "#1f5fa0"),
    "kernel": ("#e2f2dc", "#2e7d32"),
    "failure": ("#fadadd", "#b71c1c"),
    "dead": ("#ffffff", "#9e9e9e"),
}
_DEAD_TEXT = "#8a8a8a"
_ROW, _GROUP_GAP, _PATH_GAP = 0.48, 0.25, 1.0  # inches
_X_DECISION, _X_PATH, _X_LEAF = 1.35, 7.2, 9.9  # column centres (leaves: left edge), inches
_TOP = 1.95  # title, subtitle and legend above the graph
_DPI, _NODE_PT, _LEAF_PT, _PAD = 110, 9, 8, 0.35


def render(g: nx.DiGraph, out: Path) -> None:
    """Write ``g`` to ``out``; the suffix (.png, .svg, .dot) picks the format."""
    if out.suffix.lower() == ".dot":
        out.write_text(to_dot(g).to_string())
    else:
        draw(g, out)


def _style(g: nx.DiGraph, n: str) -> str:
    a = g.nodes[n]
    if not a["reachable"]:
        return "dead"
    return PATH_TEXT[n][0] if a["kind"] == "path" else a["kind"]


def node_text(g: nx.DiGraph, n: str) -> str:
    a = g.nodes[n]
    dead = "" if a["reachable"] else "  (dead)"
    if a["kind"] == "path":
        return f"{n}{dead}\n{PATH_TEXT[n][1]}"
    if a["kind"] == "kernel" and "lookup" in a:
        k = a["lookup"]
        flags = "".join(f" {f}'" for f in ("ps", "causal", "lse", "cprr") if k[f])
        return (
            f"{a['label']}{dead}\n{a['arch']}  {k['q']}/{k['kv']}  "
            f"gqa'{k['gqa']} qseqlen'{k['qseqlen']}{flags}"
        )
    return textwrap.fill(a["label"], 64) + dead


def wrap_condition(text: str, width: int = 46) -> str:
    """Break a long condition after top-level ' ∧ ' / ' ∨ ' so an edge label stays narrow."""
    parts, depth, start = [], 0, 0
    for m in re.finditer(r"[()]| [∧∨] ", text):
        tok = m.group()
        depth += {"(": 1, ")": -1}.get(tok, 0)
        if tok.strip() in "∧∨" and depth == 0:
            parts.append(text[start : m.end() - 1])
            start = m.end()
    parts.append(text[start:])
    lines: list[str] = []
    for p in parts:
        if lines and len(lines[-1]) + len(p) < width:
            lines[-1] += " " + p
        else:
            lines.append(p)
    return "\n".join(lines)


# --- layout -------------------------------------------------------------------------------


# ASM kernel leaves by what the request asks for beyond the plain decode (the lookup key's flags), in the
# order the picture lists them.
FAMILIES = ("decode and verify", "non-causal draft blocks", "DCP ranks (LSE)", "DCP round-robin (LSE, CPRR)")


def kernel_group(g: nx.DiGraph, n: str) -> str | None:
    """The group an ASM kernel leaf is drawn in ("gfx950 · DCP ranks (LSE)"); None for any other leaf."""
    a = g.nodes[n]
    if a["kind"] != "kernel" or "lookup" not in a:
        return None
    k = a["lookup"]
    family = FAMILIES[3 if k["cprr"] else 2 if k["lse"] else 0 if k["causal"] else 1]
    return f"{a['arch']} · {family}"


def _leaf_order(g: nx.DiGraph) -> list[str]:
    """Leaves grouped by the paths that reach them (in PATHS order), then arch, kernels (by group) before
    failures."""

    def key(n: str) -> tuple:
        live = [PATHS.index(u) for u in g.predecessors(n) if g.edges[u, n]["reachable"]]
        src = live or [PATHS.index(u) for u in g.predecessors(n)]
        a = g.nodes[n]
        group = kernel_group(g, n)
        family = FAMILIES.index(group.split(" · ")[1]) if group else len(FAMILIES)
        return min(src), max(src), a.get("arch") or "", a["kind"] == "failure", family, a["label"]

    leaves = [n for n, a in g.nodes.items() if a["kind"] in ("kernel", "failure")]
    return sorted(leaves, key=key)


def _spread(desired: list[float], gap: float) -> list[float]:
    """Top-down positions closest to ``desired`` (least squares) that are at least ``gap`` apart."""
    blocks: list[list[Any]] = []  # [first index, count, top]
    for i, y in enumerate(desired):
        blocks.append([i, 1, y])
        while len(blocks) > 1 and blocks[-2][2] - blocks[-2][1] * gap < blocks[-1][2]:
            first, n = blocks[-2][0], blocks[-2][1] + blocks[-1][1]
            top = sum(desired[first + j] + j * gap for j in range(n)) / n
            blocks[-2:] = [[first, n, top]]
    return [top - j * gap for _, n, top in blocks for j in range(n)]


def layout(g: nx.DiGraph) -> tuple[dict[str, tuple[float, float]], float]:
    """Node positions in inches (y down from 0) and the height the drawing needs."""
    pos: dict[str, tuple[float, float]] = {}
    y, previous = -_TOP, None
    leaf_y: dict[str, float] = {}
    for n in _leaf_order(g):
        group = (tuple(sorted(g.predecessors(n))), g.nodes[n].get("arch"), kernel_group(g, n))
        y -= _ROW + (_GROUP_GAP if previous is not None and group != previous else 0)
        leaf_y[n], previous = y, group
        pos[n] = (_X_LEAF, y)
    desired = []
    for p in PATHS:
        ys = [leaf_y[v] for v in g.successors(p)]
        desired.append(sum(ys) / len(ys) if ys else (desired[-1] - _PATH_GAP if desired else -_TOP - _ROW))
    for p, py in zip(PATHS, _spread(desired, _PATH_GAP)):
        pos[p] = (_X_PATH, py)
        gate = next((u for u in g.predecessors(p) if g.edges[u, p]["kind"] == "yes"), None)
        if gate:
            pos[gate] = (_X_DECISION, py)
    return pos, -min(py for _, py in pos.values()) + 0.6


# --- matplotlib ---------------------------------------------------------------------------


def draw(g: nx.DiGraph, out: Path) -> None:
    """PNG or SVG by networkx's matplotlib drawing; positions from :func:`layout`, arrows end at the boxes."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    pos, height = layout(g)
    width = _X_LEAF + 6.0
    fig = Figure(figsize=(width, height), dpi=_DPI)  # no pyplot state: the command may run inside a test
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    ax.set_xlim(0, width)  # data units are inches
    ax.set_ylim(-height, 0)
    texts = {}
    for n in g.nodes:
        style = _style(g, n)
        fill, border = STYLE[style]
        leaf = g.nodes[n]["kind"] in ("kernel", "failure")
        texts.update(
            nx.draw_networkx_labels(
                g,
                pos,
                labels={n: node_text(g, n)},
                ax=ax,
                font_size=_LEAF_PT if leaf else _NODE_PT,
                font_color=_DEAD_TEXT if style == "dead" else "#1a1a1a",
                font_family="DejaVu Sans",
                horizontalalignment="left" if leaf else "center",
                font_weight="bold" if g.nodes[n]["kind"] == "path" else "normal",
                bbox={
                    "boxstyle": f"round,pad={_PAD}",
                    "facecolor": fill,
                    "edgecolor": border,
                    "linestyle": "--" if style == "dead" else "-",
                    "linewidth": 1.0,
                },
            )
        )
    heading = _heading(ax, g, Patch)
    # Boxes in inches: the text's extent plus the bbox pad (no full draw needed); the figure ends at the
    # widest.
    renderer = fig.canvas.get_renderer()
    inches = ax.transData.inverted()
    box = {}
    for n, t in texts.items():
        (x0, y0), (x1, y1) = inches.transform(t.get_window_extent(renderer))
        pad = _PAD * t.get_fontsize() / 72
        box[n] = (x0 - pad, y0 - pad, x1 + pad, y1 + pad)
    right = [inches.transform(t.get_window_extent(renderer))[1][0] for t in heading]
    width = max(*right, *(b[2] for b in box.values())) + 0.3
    fig.set_size_inches(width, height)
    ax.set_xlim(0, width)

    # ASM kernels of one group (arch and request flags) on one path: one edge from the path to a bracket
    # that holds them, labelled with the group and how many, instead of one edge per kernel.
    groups: dict[tuple[str, str], list[str]] = {}
    for (u, v), a in g.edges.items():
        if a["kind"] == "leaf" and (group := kernel_group(g, v)) is not None:
            groups.setdefault((u, group), []).append(v)
    groups = {key: members for key, members in groups.items() if len(members) > 1}
    grouped = {(u, v) for (u, _), members in groups.items() for v in members}
    bracket_x = _X_LEAF - 0.12
    brackets = {}
    for (u, group), members in groups.items():
        top, bottom = max(box[v][3] for v in members), min(box[v][1] for v in members)
        live = any(g.edges[u, v]["reachable"] for v in members)
        colour = "#444444" if live else "#b0b0b0"
        ax.plot([bracket_x, bracket_x], [bottom + 0.05, top - 0.05], color=colour, linewidth=1.2)
        for v in members:
            y = (box[v][1] + box[v][3]) / 2
            ax.plot([bracket_x, box[v][0]], [y, y], color=colour, linewidth=0.8)
        brackets[u, group] = ((top + bottom) / 2, live, len(members))
        ax.text(
            bracket_x - 0.08,
            top - 0.02,
            f"{group}: {len(members)} kernels",
            fontsize=_LEAF_PT,
            ha="right",
            va="top",
            color="#1a1a1a" if live else _DEAD_TEXT,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.9},
        )

    # Edges run between ports on the boxes: a column's vertical edge bottom to top, others right side to left
    # side; a path's leaf edges leave from points spread down its right side, in the leaves' order.
    ports, port_pos, labels = nx.DiGraph(), {}, {}
    for (u, group), (mid, live, _) in brackets.items():
        s, e = ("out", u, group), ("in", u, group)
        ux0, uy0, ux1, uy1 = box[u]
        ends = fan(g, u, pos, grouped, groups)
        port_pos[s] = (ux1, uy1 - (uy1 - uy0) * (ends.index(group) + 1) / (len(ends) + 1))
        port_pos[e] = (bracket_x, mid)
        ports.add_edge(s, e, reachable=live)
    for (u, v), a in g.edges.items():
        if (u, v) in grouped:
            continue
        ux0, uy0, ux1, uy1 = box[u]
        vx0, vy0, vx1, vy1 = box[v]
        vertical = abs(pos[u][0] - pos[v][0]) < 1e-6
        s, e = ("out", u, v), ("in", u, v)
        ends = fan(g, u, pos, grouped, groups)
        out_y = uy1 - (uy1 - uy0) * (ends.index(v) + 1) / (len(ends) + 1) if v in ends else (uy0 + uy1) / 2
        port_pos[s] = ((ux0 + ux1) / 2, uy0) if vertical else (ux1, out_y)
        port_pos[e] = ((vx0 + vx1) / 2, vy1) if vertical else (vx0, (vy0 + vy1) / 2)
        ports.add_edge(s, e, reachable=a["reachable"])
        if a["kind"] != "leaf":
            labels[s, e] = "no" if a["kind"] == "no" else wrap_condition(a["condition"])
    for live in (False, True):
        nx.draw_networkx_edges(
            ports,
            port_pos,
            edgelist=[e for e, a in ports.edges.items() if a["reachable"] == live],
            ax=ax,
            node_size=0,
            arrows=True,
            arrowstyle="-|>",
            arrowsize=9,
            edge_color="#444444" if live else "#b0b0b0",
            style="-" if live else "--",
            width=1.0 if live else 0.8,
        )
        nx.draw_networkx_edge_labels(
            ports,
            port_pos,
            edge_labels={e: t for e, t in labels.items() if ports.edges[e]["reachable"] == live},
            ax=ax,
            rotate=False,
            font_size=_LEAF_PT,
            font_color="#1a1a1a" if live else _DEAD_TEXT,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.95},
        )
    if out.suffix.lower() == ".svg":
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: small and searchable
            fig.savefig(out)
    else:
        _save_png(fig, out)


def fan(
    g: nx.DiGraph,
    u: str,
    pos: dict[str, tuple[float, float]],
    grouped: set[tuple[str, str]],
    groups: dict[tuple[str, str], list[str]],
) -> list[str]:
    """What a path's leaf edges go to, top to bottom: its leaves outside a group, and its groups (by name)."""
    ends = [
        (pos[w][1], w) for w in g.successors(u) if g.edges[u, w]["kind"] == "leaf" and (u, w) not in grouped
    ]
    ends += [
        (sum(pos[w][1] for w in members) / len(members), group)
        for (path, group), members in groups.items()
        if path == u
    ]
    return [end for _, end in sorted(ends, key=lambda e: -e[0])]


def _heading(ax: Any, g: nx.DiGraph, patch: Any) -> list[Any]:
    """Title (revision, registry), how to read the picture and the legend, above the graph; the texts."""
    counts = ", ".join(f"{arch} {n} of {total}" for arch, (n, total) in g.graph["asm_kernels"].items())
    title = ax.text(
        0.25,
        -0.22,
        f"vLLM ROCm AITER MLA decode routing: {g.graph['revision']} ({g.graph['title']}) "
        f"with {g.graph['registry']}",
        fontsize=13,
        fontweight="bold",
        va="top",
    )
    how = ax.text(
        0.25,
        -0.6,
        "\n".join(
            (
                "Left to right: forward_mqa's decisions in vLLM's order -> the five paths -> "
                "what finally runs.",
                "Reachable: z3 finds a shape the engine accepts that gets there; "
                "dead (grey, dashed): no valid shape does.",
                "ASM kernel leaf: AITER's code object; arch, q/kv dtype and the lookup key after "
                "asm_mla.cu's normalisation (gqa', qseqlen', ps' = persistent, causal').",
                f"Distinct ASM decode kernels reached: {counts} in {g.graph['registry']}'s tables.",
            )
        ),
        fontsize=8.5,
        va="top",
        color="#333333",
        linespacing=1.4,
    )
    legend = [
        patch(facecolor=STYLE[k][0], edgecolor=STYLE[k][1], label=t, linestyle="--" if k == "dead" else "-")
        for k, t in (
            ("decision", "decision (yes: condition on the edge)"),
            ("gluon", "Gluon path"),
            ("triton", "Triton path"),
            ("asm", "ASM path"),
            ("kernel", "kernel a valid shape reaches"),
            ("failure", "failure a valid shape reaches"),
            ("dead", "dead: no valid shape"),
        )
    ]
    ax.legend(
        handles=legend,
        loc="upper left",
        bbox_to_anchor=(0.2, -1.45),
        bbox_transform=ax.transData,
        ncol=len(legend),
        fontsize=8.5,
        frameon=False,
        handlelength=1.6,
        columnspacing=1.4,
    )
    return [title, how]


def _save_png(fig: Any, out: Path) -> None:
    """A palette PNG straight from the Agg buffer: the drawing has few flat colours, so 128 keep it sharp at a
    third of the size of an RGBA PNG."""
    from PIL import Image

    fig.canvas.draw()
    rgba = Image.frombuffer(
        "RGBA", fig.canvas.get_width_height(), fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1
    )
    rgba.convert("RGB").quantize(colors=128, method=Image.Quantize.FASTOCTREE).save(out, format="PNG")


# --- DOT ------------------------------------------------------------------------------------


def to_dot(g: nx.DiGraph) -> Any:
    """The same graph for graphviz users: rankdir LR, decisions as diamonds, dead nodes dashed."""
    import pydot

    dot = pydot.Dot(
        graph_type="digraph",
        rankdir="LR",
        fontname="Helvetica",
        labelloc="t",
        label=f'"{g.graph["revision"]} with {g.graph["registry"]}: dashed = dead (no valid shape)"',
    )
    shapes = {"decision": "diamond", "path": "box", "kernel": "box", "failure": "octagon"}
    for n, a in g.nodes.items():
        fill, border = STYLE[_style(g, n)]
        dot.add_node(
            pydot.Node(
                _quote(n),
                label=_quote(node_text(g, n)),
                shape=shapes[a["kind"]],
                style='"filled,dashed"' if not a["reachable"] else "filled",
                fillcolor=_quote(fill),
                color=_quote(border),
                fontname="Helvetica",
            )
        )
    for (u, v), a in g.edges.items():
        label = {"no": "no", "leaf": ""}.get(a["kind"], a["condition"])
        dot.add_edge(
            pydot.Edge(
                _quote(u),
                _quote(v),
                label=_quote(label),
                tooltip=_quote(a["condition"]),
                style="solid" if a["reachable"] else "dashed",
            )
        )
    return dot


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
