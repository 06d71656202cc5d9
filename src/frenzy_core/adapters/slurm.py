"""``slurm``: an sbatch script that starts torchrun on every node of the plan, rendezvous on the first."""

from __future__ import annotations

import shlex
from typing import Any, Literal

from pydantic import Field

from frenzy_core.adapters.base import Adapter, OutputFormat, node_slots, recipe_env, uniform_gpus_per_node
from frenzy_core.adapters.torchrun import DEFAULT_RDZV_PORT, LaunchOptions, torchrun_flags
from frenzy_core.planning.plan import Plan

__all__ = ["SLURM", "SlurmOptions"]

class SlurmOptions(LaunchOptions):
    """Options of the slurm adapter."""

    job_name: str = Field(default="frenzy-train", min_length=1)
    gpu_request: Literal["gres", "constraint"] = Field(default="gres", description=(
        "gres: --gres=gpu:<type>:<n>; constraint: --gres=gpu:<n> plus --constraint=<type>."))
    gpu_type_name: str | None = Field(default=None, description=(
        "The site's name for the GPU type (gres type or node feature; default: the plan's GPU type id)."))
    partition: str | None = None
    account: str | None = None
    time: str | None = Field(default=None, description="Wall-time limit, e.g. '24:00:00'.")
    cpus_per_task: int | None = Field(default=None, gt=0)
    rdzv_port: int = Field(default=DEFAULT_RDZV_PORT, gt=0, lt=65536)


def build_slurm(plan: Plan, options: SlurmOptions) -> dict[str, Any]:
    """The sbatch directives, exported environment and the srun line, as data; ``script`` is the whole file."""
    per_node = uniform_gpus_per_node(plan, "slurm")
    nnodes = len(node_slots(plan))
    gpu_name = options.gpu_type_name or plan.gpu_type
    directives = [f"--job-name={options.job_name}", f"--nodes={nnodes}", "--ntasks-per-node=1"]
    if options.gpu_request == "gres":
        directives.append(f"--gres=gpu:{gpu_name}:{per_node}")
    else:
        directives += [f"--gres=gpu:{per_node}", f"--constraint={gpu_name}"]
    for flag, value in (("partition", options.partition), ("account", options.account), ("time", options.time),
                        ("cpus-per-task", options.cpus_per_task)):
        if value is not None:
            directives.append(f"--{flag}={value}")
    env = {**recipe_env(plan), **options.env}
    launch = shlex.join(options.torchrun) + " " + " ".join(torchrun_flags(
        nnodes=nnodes, nproc_per_node=per_node, rdzv_backend="c10d",
        rdzv_endpoint=f'"${{head_node}}:{options.rdzv_port}"', rdzv_id='"${SLURM_JOB_ID}"'))
    srun = f"srun {launch} {shlex.join([options.script, *options.script_args])}"
    lines = ["#!/bin/bash", *(f"#SBATCH {shlex.quote(d)}" for d in directives), "",
             "set -euo pipefail", *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
             "# torchrun's rendezvous runs on the first node of the allocation (no pipe into head: with",
             "# pipefail, scontrol killed by SIGPIPE would end the job)",
             'hosts=$(scontrol show hostnames "${SLURM_JOB_NODELIST}")', "head_node=${hosts%%$'\\n'*}", srun]
    return {"directives": directives, "env": env, "srun": srun, "script": "\n".join(lines) + "\n"}


SLURM: Adapter[SlurmOptions] = Adapter(
    name="slurm", summary="sbatch script: one srun task per node running torchrun (rendezvous on the first node)",
    output=OutputFormat.TEXT, options=SlurmOptions, build=build_slurm, render=lambda data: str(data["script"]))
