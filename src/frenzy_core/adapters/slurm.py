"""``slurm``: an sbatch script that starts torchrun on every node of the plan, rendezvous on the first.

A single-type plan is one homogeneous component. A plan spanning GPU types is a heterogeneous job (``#SBATCH
hetjob``, ``srun --het-group=0 ... : --het-group=1 ...``): one component per run of nodes of one replica group
and node size, each with its own GPU request and its group's environment; torchrun's static rendezvous takes
each node's rank from the het step's task id, so every group's ranks are consecutive.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from frenzy_core.adapters.base import (
    Adapter,
    OutputFormat,
    node_runs,
    node_slots,
    recipe_env,
    site_name,
    uniform_gpus_per_node,
)
from frenzy_core.adapters.torchrun import DEFAULT_RDZV_PORT, LaunchOptions, torchrun_flags
from frenzy_core.planning.plan import Plan

__all__ = ["DEFAULT_CPUS_PER_GPU", "SLURM", "SlurmComponent", "SlurmOptions", "slurm_script"]

DEFAULT_CPUS_PER_GPU = 8
"""CPU cores requested per GPU when neither ``cpus_per_task`` nor ``cpus_per_gpu`` is given: GPU nodes have 12 to 16
cores per GPU (DGX A100: 128 cores for 8 GPUs, DGX H100: 112; AWS p4d: 96 vCPUs), so 8 fits them and still
leaves each rank its data-loader workers (Slurm otherwise gives the task one CPU for all its ranks)."""


class SlurmOptions(LaunchOptions):
    """Options of the slurm adapter."""

    job_name: str = Field(default="frenzy-train", min_length=1)
    gpu_request: Literal["gres", "constraint"] = Field(default="gres", description=(
        "gres: --gres=gpu:<type>:<n>; constraint: --gres=gpu:<n> plus --constraint=<type>."))
    gpu_type_name: str | dict[str, str] | None = Field(default=None, description=(
        "The site's name for the GPU type (gres type or node feature; default: the plan's GPU type id); for a "
        "plan spanning types, a mapping GPU type id -> name."))
    partition: str | None = None
    account: str | None = None
    time: str | None = Field(default=None, description="Wall-time limit, e.g. '24:00:00'.")
    cpus_per_task: int | None = Field(default=None, gt=0, description=(
        "CPUs of the one task per node that runs torchrun (default: cpus_per_gpu x the node's GPUs)."))
    cpus_per_gpu: int = Field(default=DEFAULT_CPUS_PER_GPU, gt=0, description=(
        "CPUs per GPU (rank) on each node, when cpus_per_task is not given."))
    rdzv_port: int = Field(default=DEFAULT_RDZV_PORT, gt=0, lt=65536)


@dataclass(frozen=True)
class SlurmComponent:
    """One homogeneous part of a job: nodes of one GPU type, the same GPUs and CPUs on each."""

    gpu_type_name: str
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    env: dict[str, str] = field(default_factory=dict)
    """Environment of this component's ranks only (a mixed plan's group variables), besides the job's."""


def _directives(component: SlurmComponent, options: SlurmOptions) -> list[str]:
    out = [f"--nodes={component.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={component.cpus_per_task}"]
    if options.gpu_request == "gres":
        out.append(f"--gres=gpu:{component.gpu_type_name}:{component.gpus_per_node}")
    else:
        out += [f"--gres=gpu:{component.gpus_per_node}", f"--constraint={component.gpu_type_name}"]
    for flag, value in (("partition", options.partition), ("account", options.account), ("time", options.time)):
        if value is not None:
            out.append(f"--{flag}={value}")
    return out


def slurm_script(components: list[SlurmComponent], env: dict[str, str], options: SlurmOptions,
                 ordered: bool = False) -> dict[str, Any]:
    """The sbatch script for one component, or a heterogeneous job for several.

    Every node runs one torchrun with its own GPU count, all joined by one rendezvous on the first node of the
    first component (torch elastic allows nodes of different sizes). ``ordered``: a static rendezvous whose
    node ranks are the step's task ids (one task per node, numbered across the components in order), so the
    global ranks follow the components; otherwise c10d, which ranks nodes as they join.
    """
    assert components, "a job needs at least one component"
    groups = [_directives(c, options) for c in components]
    nnodes = sum(c.nodes for c in components)
    het = len(components) > 1
    steps = []
    for i, c in enumerate(components):
        own_env = shlex.join(["env", *(f"{k}={v}" for k, v in c.env.items())]) + " " if c.env else ""
        launch = own_env + shlex.join(options.torchrun) + " " + " ".join(torchrun_flags(
            nnodes=nnodes, nproc_per_node=c.gpus_per_node, rdzv_backend="static" if ordered else "c10d",
            node_rank='"${SLURM_PROCID}"' if ordered else None,
            rdzv_endpoint=f'"${{head_node}}:{options.rdzv_port}"', rdzv_id='"${SLURM_JOB_ID}"'))
        command = launch + " " + shlex.join([options.script, *options.script_args])
        if ordered:  # each task's own shell expands its SLURM_PROCID (srun starts the command without one)
            command = "bash -c " + shlex.quote("exec " + command)
        # srun >= 22.05 no longer takes --cpus-per-task from the allocation: pass it on
        group = f"--het-group={i} " if het else ""
        steps.append(f"{group}--ntasks-per-node=1 --cpus-per-task={c.cpus_per_task} {command}")
    nodelist = "SLURM_JOB_NODELIST_HET_GROUP_0" if het else "SLURM_JOB_NODELIST"
    header = [f"#SBATCH {shlex.quote('--job-name=' + options.job_name)}"]
    for i, directives in enumerate(groups):
        header += ["#SBATCH hetjob"] if i else []
        header += [f"#SBATCH {shlex.quote(d)}" for d in directives]
    srun = "srun " + " : ".join(steps)
    lines = ["#!/bin/bash", *header, "", "set -euo pipefail", *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
             "# torchrun's rendezvous runs on the first node of the allocation (no pipe into head: with",
             "# pipefail, scontrol killed by SIGPIPE would end the job)",
             f'hosts=$(scontrol show hostnames "${{{nodelist}}}")', "head_node=${hosts%%$'\\n'*}",
             *(["export head_node  # read by each task's shell"] if ordered else []), srun]
    return {"directives": [f"--job-name={options.job_name}", *[d for g in groups for d in g]], "env": env,
            "srun": srun, "script": "\n".join(lines) + "\n"}


def _mixed_components(plan: Plan, options: SlurmOptions) -> tuple[list[SlurmComponent], dict[str, str]]:
    """One component per run of nodes of one replica group and size, in rank order; the environment every
    group shares, and each component's own (the rest)."""
    envs = [{**recipe_env(plan, g), **options.env} for g in range(len(plan.stages))]
    shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    parts = []
    for run in node_runs(plan):
        group, per_node = run[0].group, len(run[0].gpus)
        gpu_type = plan.stages[group].gpu_type
        parts.append(SlurmComponent(
            gpu_type_name=site_name(plan, options.gpu_type_name, gpu_type, "gpu_type_name") or gpu_type,
            nodes=len(run), gpus_per_node=per_node,
            cpus_per_task=options.cpus_per_task or options.cpus_per_gpu * per_node,
            env={k: v for k, v in envs[group].items() if k not in shared}))
    return parts, shared


def build_slurm(plan: Plan, options: SlurmOptions) -> dict[str, Any]:
    """The sbatch directives, exported environment and the srun line, as data; ``script`` is the whole file."""
    if plan.grouped:
        parts, shared = _mixed_components(plan, options)
        return slurm_script(parts, shared, options, ordered=True)
    per_node = uniform_gpus_per_node(plan, "slurm")
    component = SlurmComponent(gpu_type_name=site_name(plan, options.gpu_type_name, plan.gpu_type, "gpu_type_name")
                               or plan.gpu_type, nodes=len(node_slots(plan)),
                               gpus_per_node=per_node,
                               cpus_per_task=options.cpus_per_task or options.cpus_per_gpu * per_node)
    return slurm_script([component], {**recipe_env(plan), **options.env}, options)


SLURM: Adapter[SlurmOptions] = Adapter(
    name="slurm", summary="sbatch script: one srun task per node running torchrun (rendezvous on the first node)",
    output=OutputFormat.TEXT, options=SlurmOptions, build=build_slurm, render=lambda data: str(data["script"]))
