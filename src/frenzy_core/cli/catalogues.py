"""``frenzy models`` / ``frenzy gpus`` / ``frenzy clusters``: the built-in catalogues."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from frenzy_core.cli import options as opt
from frenzy_core.cli._common import console, gib, handle_errors, load_cluster_arg, new_table, print_json
from frenzy_core.config.presets import model_preset_info, model_preset_names

__all__ = ["clusters", "gpus", "models"]

@handle_errors
def models(json_out: opt.Json = False) -> None:
    """List the built-in model presets (names usable as MODEL in plan and memory).

    Examples:

      frenzy models

      frenzy models --json
    """
    rows: list[dict[str, Any]] = []
    for name in model_preset_names():
        info = model_preset_info(name)
        m = info.model
        rows.append(
            {
                "name": name,
                "params": m.num_params(),
                "published_params": info.published_params,
                "layers": m.num_layers,
                "hidden": m.hidden_size,
                "heads": m.num_attention_heads,
                "kv_heads": m.num_kv_heads,
                "mlp": m.mlp.value,
                "vocab": m.vocab_size,
                "experts": m.moe.num_experts if m.moe else 0,
                "source": info.source,
            }
        )
    if json_out:
        print_json(rows)
        return
    table = new_table(
        "Model presets",
        ["name", "params (B)", "layers", "hidden", "heads/kv", "mlp", "vocab", "experts"],
        left=("mlp",),
    )
    for r in rows:
        table.add_row(
            r["name"],
            f"{r['params'] / 1e9:.2f}",
            str(r["layers"]),
            str(r["hidden"]),
            f"{r['heads']}/{r['kv_heads']}",
            r["mlp"],
            str(r["vocab"]),
            str(r["experts"] or "-"),
        )
    console.print(table)


@handle_errors
def gpus(json_out: opt.Json = False) -> None:
    """List the GPU catalogue: memory, dense bf16 peak, bandwidths, links and prices.

    GPU type ids (or aliases such as 'a100' or 'A100-SXM4-80GB') are what --gpu-types and cluster files take.

    Examples:

      frenzy gpus

      frenzy gpus --json
    """
    from frenzy_core.hardware import load_gpu_specs

    specs = sorted(load_gpu_specs().values(), key=lambda s: (s.vendor, s.memory_bytes, s.id))
    if json_out:
        print_json([s.model_dump(mode="json") for s in specs])
        return
    table = new_table(
        "GPU types: memory as the driver reports it, dense bf16 peak, bandwidths per GPU and "
        "direction, price per GPU-hour",
        ["id", "GiB", "bf16 TF", "HBM GB/s", "link", "link GB/s", "net GB/s", "per node", "$/h"],
        left=("link",),
    )
    for s in specs:
        bf16 = s.peak_tflops.get("bf16")
        price = s.price_per_gpu_hour_usd
        table.add_row(
            s.id,
            gib(s.memory_bytes),
            f"{bf16:g}" if bf16 else "-",
            f"{s.memory_bandwidth_bytes_per_s / 1e9:,.0f}",
            s.intra_node_link.value,
            f"{s.intra_node_bytes_per_s / 1e9:,.0f}",
            f"{s.inter_node_bytes_per_s / 1e9:,.1f}",
            str(s.gpus_per_node),
            f"{price:.2f}" if price else "-",
        )
    console.print(table)


def _type_counts(nodes: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.gpu] = counts.get(n.gpu, 0) + n.gpus_per_node * n.count
    return counts


@handle_errors
def clusters(
    name: Annotated[
        str | None, typer.Argument(metavar="NAME", help="A preset name or cluster YAML file: show its nodes.")
    ] = None,
    scale: opt.Scale[int | None] = None,
    json_out: opt.Json = False,
) -> None:
    """List the built-in cluster presets, or show the nodes of one (optionally scaled).

    Examples:

      frenzy clusters

      frenzy clusters frenzy-paper

      frenzy clusters philly-like --scale 64 --json
    """
    from frenzy_core.hardware import Cluster, cluster_preset_info

    if name is None:
        if scale is not None:
            raise typer.BadParameter("--scale needs a cluster NAME", param_hint="--scale")
        rows: list[dict[str, Any]] = []
        for preset in Cluster.presets():
            info = cluster_preset_info(preset)
            c = info.cluster
            rows.append(
                {
                    "name": preset,
                    "resolves_to": info.name,
                    "description": info.description,
                    "source": info.source,
                    "total_gpus": c.total_gpus,
                    "nodes": c.num_nodes,
                    "gpus": _type_counts(c.nodes),
                }
            )
        if json_out:
            print_json(rows)
            return
        table = new_table(
            "Cluster presets ('default' is what plan and simulate use without --cluster)",
            ["name", "GPUs", "nodes", "GPU types"],
            left=("GPU types",),
        )
        for r in rows:
            label = r["name"] if r["name"] == r["resolves_to"] else f"{r['name']} (= {r['resolves_to']})"
            types = ", ".join(f"{n} x {gpu}" for gpu, n in r["gpus"].items())
            table.add_row(label, str(r["total_gpus"]), str(r["nodes"]), types)
        console.print(table)
        return

    arg = load_cluster_arg(name, scale)
    cluster = arg.cluster
    if json_out:
        print_json({**arg.to_json(), "cluster": cluster.to_dict()})
        return
    table = new_table(
        arg.describe() + "; per node shape: bandwidths per GPU and direction, fast-link domain in GPUs",
        ["gpu", "per node", "nodes", "free", "link", "link GB/s", "domain", "net GB/s", "rack/zone"],
        left=("link", "rack/zone"),
    )
    for n in cluster.nodes:
        place = "/".join(x for x in (n.rack, n.zone) if x) or "-"
        table.add_row(
            n.gpu,
            str(n.gpus_per_node),
            str(n.count),
            str(n.free_gpus),
            n.intra_node_link.value if n.intra_node_link else "-",
            f"{(n.intra_node_bytes_per_s or 0) / 1e9:,.0f}",
            str(n.link_domain_gpus),
            f"{(n.inter_node_bytes_per_s or 0) / 1e9:,.1f}",
            place,
        )
    console.print(table)
    if arg.preset is not None:
        info = cluster_preset_info(arg.preset)
        console.print(f"{info.description}\nSource: {info.source}", highlight=False)
