"""Figures of plans and memory estimates: what they draw is the plan's own numbers (bars that add up to each
stage's memory, the GPU's limits, one slot per pass, the runners-up), written as PNG, SVG or PDF."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")

from frenzy_core import (  # noqa: E402 - after the skip
    Cluster,
    ConfigError,
    ModelConfig,
    OptionalDependencyError,
    ParallelConfig,
    Plan,
    PlanConstraints,
    TrainingConfig,
    estimate_memory,
    get_gpu_spec,
    plan_job,
)
from frenzy_core.memory.result import MEMORY_CATEGORIES, OVERHEAD_CATEGORIES  # noqa: E402
from frenzy_core.plotting import check_plot_path, memory_figure, plan_figure, plot_memory, plot_plan  # noqa: E402

GIB = 2**30
CLUSTER = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2},
                                       {"gpu": "a100-40gb", "gpus_per_node": 8, "count": 1}]})


@pytest.fixture(scope="module")
def interleaved_plan() -> Plan:
    """A Megatron plan pinned to tp=2 pp=4 (the planner picks vpp=2, interleaved) with runners-up."""
    return plan_job(ModelConfig.preset("llama-3.1-8b"), CLUSTER,
                    TrainingConfig(seq_len=4096, global_batch_size=32, framework="megatron"),
                    constraints=PlanConstraints(tp=2, pp=4), time_limit_s=5)


def _stacks(ax: object) -> list[float]:
    """Total bar height per x position of a stacked bar chart, in its units."""
    totals: dict[float, float] = {}
    for patch in (p for bars in ax.containers for p in bars):  # type: ignore[attr-defined]
        x = round(patch.get_x() + patch.get_width() / 2, 6)
        totals[x] = max(totals.get(x, 0.0), patch.get_y() + patch.get_height())
    return [totals[x] for x in sorted(totals)]


def test_the_plan_figure_draws_the_plans_numbers(interleaved_plan: Plan) -> None:
    plan = interleaved_plan
    assert plan.parallel.pp == 4 and plan.alternatives
    fig = plan_figure(plan)
    memory_ax, runners_ax, schedule_ax = fig.axes
    # memory: one stack per stage adding up to what must fit on the card, against the GPU and its headroom line
    assert _stacks(memory_ax) == pytest.approx([s.device_bytes / GIB for s in plan.memory.stages], rel=1e-9)
    lines = sorted(line.get_ydata()[0] for line in memory_ax.get_lines())
    assert lines == pytest.approx([plan.usable_bytes / GIB, get_gpu_spec(plan.gpu_type).memory_bytes / GIB])
    assert "GiB" in memory_ax.get_ylabel()
    legend = [t.get_text() for t in memory_ax.get_legend().get_texts()]
    shown = {c.replace("_", " ") for c in (*MEMORY_CATEGORIES, *OVERHEAD_CATEGORIES)
             if any(s.breakdown.get(c, 0) or s.overhead.get(c, 0) for s in plan.memory.stages)}
    assert shown <= set(legend)
    # runners-up: the plan and each alternative at (GiB/GPU, tokens/s)
    points = sorted(tuple(map(float, c.get_offsets()[0])) for c in runners_ax.collections)
    expected = sorted([(a.device_bytes / GIB, a.tokens_per_s) for a in plan.alternatives]
                      + [(plan.memory.device_bytes / GIB, plan.time.tokens_per_s)])
    assert [v for p in points for v in p] == pytest.approx([v for p in expected for v in p], rel=1e-9)
    assert "GiB" in runners_ax.get_xlabel() and "tokens/s" in runners_ax.get_ylabel()
    # schedule: every forward and backward pass of every chunk on every stage, ending where the step ends
    slots = sum(len(c.get_paths()) for c in schedule_ax.collections)
    chunks, m = plan.parallel.vpp, plan.time.num_microbatches
    background = 2 * plan.parallel.pp  # the idle band and the exposed tail of each row
    assert slots == plan.parallel.pp * 2 * m * chunks + background
    assert schedule_ax.get_xlim()[1] == pytest.approx(plan.time.iteration_s * 1.005)
    assert "interleaved" in schedule_ax.get_title(loc="left") and "bubble" in schedule_ax.get_title(loc="left")
    title = fig._suptitle.get_text()  # type: ignore[attr-defined]
    assert plan.model.name in title and plan.gpu_type in title and "pp=4" in title


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_plots_are_written_as_the_suffix_says(interleaved_plan: Plan, tmp_path: Path, suffix: str) -> None:
    magic = {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF"}[suffix]
    out = plot_plan(interleaved_plan, tmp_path / f"plan{suffix}")
    assert out.read_bytes().startswith(magic)
    estimate = interleaved_plan.memory
    assert plot_memory(estimate, tmp_path / f"mem{suffix.upper()}").read_bytes().startswith(magic)


def test_the_same_figure_gives_the_same_svg(interleaved_plan: Plan, tmp_path: Path) -> None:
    a, b = plot_plan(interleaved_plan, tmp_path / "a.svg"), plot_plan(interleaved_plan, tmp_path / "b.svg")
    assert a.read_bytes() == b.read_bytes()


def test_the_memory_figure_draws_each_gpus_limits() -> None:
    estimate = estimate_memory(ModelConfig.preset("llama-3.1-8b"),
                               TrainingConfig(seq_len=4096, global_batch_size=64, recompute="selective",
                                              sequence_parallel=True),
                               ParallelConfig(tp=2, pp=4))
    (ax,) = memory_figure(estimate, gpus=["a100-40gb", "v100-32gb"], headroom=0.1).axes
    assert _stacks(ax) == pytest.approx([s.device_bytes / GIB for s in estimate.stages], rel=1e-9)
    for gpu in ("a100-40gb", "v100-32gb"):
        memory = get_gpu_spec(gpu).memory_bytes
        levels = [line.get_ydata()[0] for line in ax.get_lines()]
        assert any(math.isclose(y, memory / GIB) for y in levels)
        assert any(math.isclose(y, int(memory * 0.9) / GIB) for y in levels)
    assert f"{estimate.device_bytes / GIB:.1f} GiB" in ax.get_title(loc="left")


def test_dollar_signs_in_titles_and_names_are_drawn_as_text(interleaved_plan: Plan, tmp_path: Path) -> None:
    """A title or model name with dollar signs is drawn as written, not parsed as mathtext, which failed at save
    time with matplotlib's ValueError on ``$$`` or ``$x^$`` (found by issue 15's plotting campaign)."""
    from matplotlib.cbook import is_math_text

    for title in ("$$", "$x^$", r"$\frac$", r"a \$ b $"):
        assert plot_memory(interleaved_plan.memory, tmp_path / "m.png", title=title).stat().st_size > 0
        shown = memory_figure(interleaved_plan.memory, title=title).axes[0].get_title(loc="left")
        assert not is_math_text(shown) and shown.replace(r"\$", "$").startswith(title + "\n")
    named = interleaved_plan.replace(model=interleaved_plan.model.replace(name="$x^$"))
    assert plot_plan(named, tmp_path / "plan.png").stat().st_size > 0
    suptitle = plan_figure(named)._suptitle.get_text()  # type: ignore[attr-defined]
    assert not is_math_text(suptitle) and suptitle.replace(r"\$", "$").startswith("$x^$ on ")


def test_bad_paths_and_missing_matplotlib_are_config_errors(interleaved_plan: Plan, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"must end in \.png, \.svg or \.pdf"):
        check_plot_path(tmp_path / "plan.jpg")
    with pytest.raises(ConfigError, match="plan.txt"):
        plot_plan(interleaved_plan, tmp_path / "plan.txt")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if matplotlib were absent
    with pytest.raises(OptionalDependencyError, match="frenzy_core\\[plot\\]"):
        plot_plan(interleaved_plan, tmp_path / "plan.png")
