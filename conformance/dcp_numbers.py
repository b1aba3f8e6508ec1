"""DCP replay numbers: each route a release picks under DCP, at each dcp_world_size, clean and with a fault.

``python -m conformance.dcp_numbers --vllm 0.34.0 --vllm 0.33.0 --dcp 2 --dcp 4 --dcp 8`` runs, for
every release, one shape per DCP route the stand-ins serve (:data:`ROUTE_SHAPES`) through
:func:`conformance.dcp_replay.execute`, once clean and once with ``drop-rank-lse``, and prints one
line per (release, route, dcp): the route the ranks took, the clean verdict and its max abs error
against the float32 reference over the whole KV, the faulty verdict, and the step's wall time.
``--ranks gloo`` runs the ranks as processes; ``--device cuda`` runs simulated ranks on one GPU;
``--block-size`` sets the KV cache's block size (the harness's 1 by default), which the SEGMENTED
route's tiles follow (``_segmented_mla_page_size``, rocm_aiter_mla.py 0.34.0 L98-110).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

ROUTE_SHAPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("PLAIN qlen 1 bf16", {}),
    ("PLAIN qlen 1 fp8", {"kv_cache_dtype": "fp8"}),
    (
        "PLAIN non-causal qlen 4",
        {"max_qo_len": 4, "causal": False, "spec_method": "dflash", "num_spec_tokens": 3},
    ),
    (
        "CPRR qlen 3 (gfx950)",
        {"max_qo_len": 3, "spec_method": "mtp", "num_spec_tokens": 2, "heads": "native"},
    ),
    (  # gfx942 fp8 past 64 gathered heads: segmented MLA does not fit the LDS (0.34.0 L436-449)
        "TRITON qlen 2 fp8 (gfx942)",
        {
            "arch": "gfx942",
            "kv_cache_dtype": "fp8",
            "max_qo_len": 2,
            "spec_method": "mtp",
            "num_spec_tokens": 1,
            "heads": "native",
        },
    ),
    (
        "SEGMENTED qlen 2 (gfx950)",
        {"arch": "gfx950", "max_qo_len": 2, "spec_method": "mtp", "num_spec_tokens": 1},
    ),
)


def route_shape(fields: dict[str, Any], dcp: int) -> Any:
    """The route's shape at ``dcp`` ranks: 16 heads per rank, or (CPRR, TRITON) 128 gathered heads."""
    from mla_model.shape import Shape

    fields = dict(fields)
    heads = 128 // dcp if fields.pop("heads", None) == "native" else 16
    return Shape(num_heads=max(heads, 16), dcp_world_size=dcp, **fields)


def measure(
    releases: list[str],
    dcps: list[int],
    ranks: str,
    device: str,
    kv_len: int,
    registry: str,
    block_size: int = 1,
) -> list[dict[str, Any]]:
    """One result per (release, route, dcp): clean and faulty verdicts, error, routes taken, time."""
    from conformance.dcp_replay import execute
    from spec.realcode.executed.harness import release_code

    results = []
    for release in releases:
        code = release_code(release)
        labelled = [(label, dcp, route_shape(f, dcp)) for label, f in ROUTE_SHAPES for dcp in dcps]
        shapes = [s for _, _, s in labelled]
        runs = {}
        for fault in (None, "drop-rank-lse"):
            options = {
                "dcp_ranks": ranks,
                "device": device,
                "kv_len": kv_len,
                "block_size": block_size,
                "inject_fault": fault,
            }
            started = time.time()
            runs[fault] = execute(code, shapes, registry, options)
            runs[(fault, "s")] = time.time() - started
        for (label, dcp, _), clean, faulty in zip(labelled, runs[None], runs["drop-rank-lse"]):
            v, f = clean.get("verdict") or {}, faulty.get("verdict") or {}
            results.append(
                {
                    "release": release,
                    "route": label,
                    "dcp": dcp,
                    "ranks": ranks,
                    "taken": ",".join(clean.get("dcp_routes") or []),
                    "clean": v.get("status") or clean.get("outcome"),
                    "max_abs_err": v.get("max_abs_err"),
                    "fault": f.get("status") or faulty.get("outcome"),
                    "t_step_s": round(float(clean.get("t_step_s", 0.0)), 2),
                    "error": clean.get("error"),
                }
            )
    return results


@click.command()
@click.option("--vllm", "releases", multiple=True, default=("0.34.0", "0.33.0"), show_default=True)
@click.option("--dcp", "dcps", type=click.Choice(["2", "4", "8"]), multiple=True, default=("2", "4", "8"))
@click.option(
    "--ranks", type=click.Choice(["simulated", "gloo", "nccl"]), default="simulated", show_default=True
)
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda (simulated ranks on one GPU).")
@click.option("--kv-len", type=click.IntRange(1, 262_144), default=64, show_default=True)
@click.option("--block-size", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--registry", default="aiter-0.1.20", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line instead of the table.")
def main(releases, dcps, ranks, device, kv_len, block_size, registry, as_json) -> None:
    """Run the DCP replay over each route and dcp_world_size; print clean and faulty verdicts."""
    results = measure(list(releases), [int(d) for d in dcps], ranks, device, kv_len, registry, block_size)
    if as_json:
        for r in results:
            print(json.dumps(r))
        return
    head = ("release", "route", "dcp", "taken", "clean", "max abs err", "fault", "s")
    print("{:8} {:26} {:>3} {:9} {:9} {:>11} {:9} {:>5}".format(*head))
    for r in results:
        err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
        print(
            f"{r['release']:8} {r['route']:26} {r['dcp']:>3} {r['taken']:9} {r['clean']:9} {err:>11} "
            f"{r['fault']:9} {r['t_step_s']:>5.2f}"
        )
        if r["error"]:
            print(f"{'':8} {r['error']}", file=sys.stderr)


def markdown(results: list[dict[str, Any]]) -> str:
    """The results (``--json`` lines) as a table: a row per release and route, the max abs error per DCP size
    (clean run), and what the dropped-rank-LSE fault gives (every size)."""
    dcps = sorted({r["dcp"] for r in results})
    out = [
        "| release | route | taken | " + " | ".join(f"dcp {d}" for d in dcps) + " | with the fault |\n",
        "|---|---|---|" + "---|" * len(dcps) + "---|\n",
    ]
    rows: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in results:
        rows.setdefault((r["release"], r["route"]), {})[r["dcp"]] = r
    for (release, route), by_dcp in rows.items():
        cells = [
            f"{x['clean']} {x['max_abs_err']:.1e}" if x["max_abs_err"] is not None else x["clean"]
            for x in (by_dcp.get(d) for d in dcps)
            if x is not None
        ]
        taken = ", ".join(sorted({x["taken"] for x in by_dcp.values()}))
        faults = ", ".join(sorted({x["fault"] for x in by_dcp.values()}))
        out.append(f"| {release} | {route} | {taken} | " + " | ".join(cells) + f" | {faults} |\n")
    return "".join(out)


if __name__ == "__main__":
    main()
