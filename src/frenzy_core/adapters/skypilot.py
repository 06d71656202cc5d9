"""``skypilot``: a SkyPilot task YAML: the plan's GPUs per node, its node count, and torchrun in ``run``."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import (
    MULTILINE,
    Adapter,
    OutputFormat,
    launcher_gpu_name,
    node_slots,
    recipe_env,
    uniform_gpus_per_node,
)
from frenzy_core.adapters.torchrun import DEFAULT_RDZV_PORT, LaunchOptions, torchrun_flags
from frenzy_core.planning.plan import Plan

__all__ = ["SKYPILOT", "SkyPilotOptions"]


class SkyPilotOptions(LaunchOptions):
    """Options of the skypilot adapter."""

    job_name: str = Field(default="frenzy-train", min_length=1)
    accelerator: str | None = Field(default=None, description=(
        "SkyPilot's accelerator name (default: `sky show-gpus` name of the plan's GPU type)."))
    setup: str | None = Field(default=None, json_schema_extra=MULTILINE, description=(
        "Shell commands run once per node before `run` (several lines allowed)."))
    workdir: str | None = Field(default=None, description="Local directory synced to every node.")
    rdzv_port: int = Field(default=DEFAULT_RDZV_PORT, gt=0, lt=65536)


def build_skypilot(plan: Plan, options: SkyPilotOptions) -> dict[str, Any]:
    """The task mapping; ``run`` reads node count, rank and head IP from SkyPilot's SKYPILOT_* variables."""
    per_node = uniform_gpus_per_node(plan, "skypilot")
    nnodes = len(node_slots(plan))
    accelerator = launcher_gpu_name(plan.gpu_type, "skypilot", "accelerator", options.accelerator)
    flags = torchrun_flags(nnodes='"${SKYPILOT_NUM_NODES}"', nproc_per_node='"${SKYPILOT_NUM_GPUS_PER_NODE}"',
                           node_rank='"${SKYPILOT_NODE_RANK}"', rdzv_backend="static",
                           rdzv_endpoint=f'"${{head_ip}}:{options.rdzv_port}"', rdzv_id='"${SKYPILOT_TASK_ID}"')
    run = "\n".join([
        "# SKYPILOT_NODE_IPS lists the nodes' IPs, head node first",
        "head_ip=${SKYPILOT_NODE_IPS%%$'\\n'*}",
        " ".join([shlex.join(options.torchrun), *flags, shlex.join([options.script, *options.script_args])]),
    ]) + "\n"
    task: dict[str, Any] = {"name": options.job_name, "num_nodes": nnodes,
                            "resources": {"accelerators": {accelerator: per_node}},
                            "envs": {**recipe_env(plan), **options.env}}
    if options.workdir is not None:
        task["workdir"] = options.workdir
    if options.setup is not None:
        task["setup"] = options.setup
    task["run"] = run
    return task


SKYPILOT: Adapter[SkyPilotOptions] = Adapter(
    name="skypilot", summary="SkyPilot task YAML (accelerators, num_nodes, torchrun over SKYPILOT_* variables)",
    output=OutputFormat.YAML, options=SkyPilotOptions, build=build_skypilot)
