"""Comparing simulations: a text table (``compare``) and a figure (``plot_results``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from frenzy_core._files import figure_path
from frenzy_core.errors import ConfigError, OptionalDependencyError, require_instance, short_repr
from frenzy_core.scheduling.result import SimulationResult

__all__ = ["compare", "plot_results"]


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def compare(results: Sequence[SimulationResult]) -> str:
    """A plain-text table, one row per result: jobs finished, placement violations, unschedulable, JCT (h),
    queue delay (h), makespan (h), mean GPU utilisation, goodput (tokens per GPU-hour), median round latency
    (ms), and avg JCT relative to the first row."""
    head = ["policy", "finished", "violations", "unsched", "avg JCT h", "median JCT h", "p99 JCT h", "avg queue h",
            "makespan h", "util %", "Mtok/GPU-h", "round ms", "vs first"]
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise ConfigError(f"results must be a list of SimulationResult, got {type(results).__name__}", field="results")
    for i, r in enumerate(results):
        require_instance(f"results[{i}]", r, SimulationResult)
    base = (results[0].avg_jct_s or None) if results else None  # None or 0: nothing to compare against
    rows = []
    for r in results:
        util = r.mean_utilisation()
        busy = (sum(util[t] * r.utilisation.capacity_gpus[t] for t in util) / max(
            1, sum(r.utilisation.capacity_gpus.values()))) if util and r.utilisation else None
        rel = "-" if base is None or r.avg_jct_s is None else f"{r.avg_jct_s / base - 1:+.1%}"
        good = r.goodput_tokens_per_gpu_hour
        rows.append([r.policy, str(r.finished), str(r.violations), str(len(r.unschedulable)),
                     _hours(r.avg_jct_s), _hours(r.median_jct_s), _hours(r.p99_jct_s), _hours(r.avg_queue_delay_s),
                     _hours(r.makespan_s), "-" if busy is None else f"{100 * busy:.1f}",
                     "-" if good is None else f"{good / 1e6:.2f}", _ms(r.median_round_s), rel])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths)))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in rows]
    return "\n".join(lines)


def plot_results(results: Sequence[SimulationResult], path: str | Path) -> None:
    """Save a figure: the JCT CDF of every result (one line per policy), then one panel per result with the busy
    fraction of each GPU type over time."""
    out = figure_path(path, hint="e.g. jct.png or jct.svg")  # a figure type, checked before any drawing
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise OptionalDependencyError("matplotlib", "plot", "SimulationResult.plot") from None
    fig, axes = plt.subplots(1 + len(results), 1, figsize=(7, 3.2 * (1 + len(results))), squeeze=False)
    cdf = axes[0][0]
    for res, (util,) in zip(results, axes[1:]):
        jct_h = np.sort([r.jct_s / 3600 for r in res.jobs if r.jct_s is not None])
        if jct_h.size:
            cdf.step(jct_h, np.arange(1, jct_h.size + 1) / jct_h.size, where="post", label=res.policy)
        u = res.utilisation
        if u is not None and u.times_s:
            for gpu_type, busy in u.busy_gpus.items():
                share = np.asarray(busy) / max(1, u.capacity_gpus[gpu_type])
                util.step(np.asarray(u.times_s) / 3600, share, where="post", label=gpu_type)
        util.set(title=res.policy, xlabel="time (h)", ylabel="busy fraction", ylim=(0, 1.05))
    cdf.set(xlabel="job completion time (h)", ylabel="fraction of finished jobs", xscale="log")
    for (ax,) in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120)
    except (OSError, ValueError) as exc:  # no permission, a name too long; a type matplotlib does not write
        raise ConfigError(f"cannot write the figure {short_repr(str(out), 200)}: {exc}", field="path",
                          value=str(out), hint="e.g. jct.png or jct.svg") from None
    finally:
        plt.close(fig)
