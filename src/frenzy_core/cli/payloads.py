"""The ``--json`` documents of the commands, assembled from what each command computed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from frenzy_core.cli._common import ClusterArg
from frenzy_core.cli.emit import LaunchOutput
from frenzy_core.config import ModelConfig, ParallelConfig, TrainingConfig
from frenzy_core.memory.result import MemoryEstimate
from frenzy_core.planning.plan import Plan
from frenzy_core.planning.request import SEARCHED_TRAINING_FIELDS, Objective, PlanConstraints

if TYPE_CHECKING:
    from frenzy_core.scheduling import SimulationResult, TraceFormat
    from frenzy_core.timing.calibrate import CalibrationResult

__all__ = ["calibrate_payload", "memory_payload", "plan_payload", "simulate_payload"]


def plan_payload(model: str, where: ClusterArg, training: TrainingConfig, constraints: PlanConstraints,
                 objective: Objective, plan: Plan, launch: LaunchOutput | None, plot: Path | None) -> dict[str, Any]:
    """``frenzy plan --json``: the request (fixed training fields only; the searched ones are in the plan), the
    whole plan, its explanation, and the launch config and figure when asked for."""
    out: dict[str, Any] = {
        "model": model,
        "cluster": where.to_json(),
        "request": {
            "training": training.model_dump(mode="json", exclude=set(SEARCHED_TRAINING_FIELDS)),
            "constraints": constraints.model_dump(mode="json", exclude_none=True),
            "objective": objective.value,
        },
        "plan": plan.model_dump(mode="json"),
        "global_batch": {"samples": plan.training.global_batch_size, "default": plan.default_batch is not None},
        "explanation": plan.explain(),
    }
    if launch is not None:
        out["launch"] = launch.to_json()
    if plot is not None:
        out["plot"] = str(plot)
    return out


def memory_payload(model: ModelConfig, training: TrainingConfig, parallel: ParallelConfig, headroom: float,
                   estimate: MemoryEstimate, gpus: list[dict[str, Any]], plot: Path | None) -> dict[str, Any]:
    """``frenzy memory --json``: the layout, the whole estimate and every GPU type's fit."""
    out: dict[str, Any] = {
        "model": model.name,
        "training": training.model_dump(mode="json"),
        "parallel": parallel.model_dump(mode="json"),
        "headroom": headroom,
        "estimate": estimate.model_dump(mode="json"),
        "gpus": gpus,
    }
    if plot is not None:
        out["plot"] = str(plot)
    return out


def simulate_payload(trace: Path, trace_format: TraceFormat, where: ClusterArg, jobs: int, skipped_rows: int,
                     plot: Path | None, results: list[SimulationResult]) -> dict[str, Any]:
    """``frenzy simulate --json``: the trace, the cluster, and each policy's whole result."""
    return {
        "trace": str(trace),
        "format": trace_format.value,
        "cluster": where.to_json(),
        "jobs": jobs,
        "skipped_rows": skipped_rows,
        "plot": None if plot is None else str(plot),
        "results": [r.model_dump(mode="json") for r in results],
    }


def calibrate_payload(out: Path, results: dict[str, CalibrationResult]) -> dict[str, Any]:
    """``frenzy calibrate --json``: the file written and each GPU type's fit."""
    return {"out": str(out), "gpus": {g: r.model_dump(mode="json") for g, r in results.items()}}
