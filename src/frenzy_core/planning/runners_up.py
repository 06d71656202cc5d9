"""Runners-up of a plan: the best placeable candidates after the chosen one."""

from __future__ import annotations

import numpy as np

from frenzy_core.config.training import Recompute
from frenzy_core.planning.candidates import CandidateTable
from frenzy_core.planning.plan import Alternative

__all__ = ["alternative_of", "runners_up"]


def alternative_of(table: CandidateTable, r: int) -> Alternative:
    """The :class:`Alternative` of candidate row ``r``."""
    lay = table.layouts
    i = int(table.layout[r])
    pph = float(table.price_per_hour_usd[r])
    return Alternative(
        gpu_type=table.gpu_types[int(table.gpu[r])], num_gpus=int(table.world[r]), parallel=lay.parallel(i),
        micro_batch_size=int(lay.micro_batch_size[i]), recompute=Recompute.from_code(int(lay.recompute[i])),
        zero_stage=int(lay.zero_stage[i]), distributed_optimizer=bool(lay.distributed_optimizer[i]),
        sequence_parallel=bool(lay.sequence_parallel[i]), device_bytes=int(table.device_bytes[i]),
        tokens_per_s=float(table.tokens_per_s[r]), price_per_hour_usd=None if np.isnan(pph) else pph,
        objective_value=float(table.value[r]))


def runners_up(table: CandidateTable, rows: np.ndarray, feasible: np.ndarray, chosen: int,
                  top_k: int) -> list[Alternative]:
    """The best placeable candidates after the chosen one, one per distinct (type, parallel layout)."""
    if top_k == 0:
        return []
    ok_groups = {(int(table.gpu[r]), int(table.tp[r]), int(table.world[r])) for r, f in zip(rows, feasible) if f}
    lay = table.layouts
    out: list[Alternative] = []

    def layout_key(r: int) -> tuple[int, ...]:
        i = int(table.layout[r])
        return (int(table.gpu[r]), int(lay.tp[i]), int(lay.pp[i]), int(lay.dp[i]), int(lay.cp[i]), int(lay.ep[i]),
                int(lay.vpp[i]))

    seen = {layout_key(chosen)}
    for r in table.by_score:
        r = int(r)
        if (int(table.gpu[r]), int(table.tp[r]), int(table.world[r])) not in ok_groups:
            continue
        key = layout_key(r)
        if key in seen:
            continue
        seen.add(key)
        out.append(alternative_of(table, r))
        if len(out) == top_k:
            break
    return out
