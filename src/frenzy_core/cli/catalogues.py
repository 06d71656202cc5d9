"""``frenzy models`` / ``frenzy gpus`` / ``frenzy clusters``: the built-in catalogues."""

from __future__ import annotations

import typer
from rich.table import Table

from frenzy_core.cli._common import console, handle_errors, print_json
from frenzy_core.config.presets import model_preset_info, model_preset_names

__all__ = ["models"]


@handle_errors
def models(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the built-in model presets.

    Example: frenzy models --json
    """
    rows = []
    for name in model_preset_names():
        info = model_preset_info(name)
        m = info.model
        rows.append({
            "name": name, "params": m.num_params(), "published_params": info.published_params,
            "layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_attention_heads,
            "kv_heads": m.num_kv_heads, "mlp": m.mlp.value, "vocab": m.vocab_size,
            "experts": m.moe.num_experts if m.moe else 0,
        })
    if json_out:
        print_json(rows)
        return
    table = Table(title="Model presets")
    for col in ("name", "params (B)", "layers", "hidden", "heads/kv", "mlp", "vocab", "experts"):
        table.add_column(col, justify="left" if col in ("name", "mlp") else "right")
    for r in rows:
        table.add_row(r["name"], f"{r['params'] / 1e9:.2f}", str(r["layers"]), str(r["hidden"]),
                      f"{r['heads']}/{r['kv_heads']}", r["mlp"], str(r["vocab"]), str(r["experts"] or "-"))
    console.print(table)
