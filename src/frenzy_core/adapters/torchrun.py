"""``torchrun``: one command line and environment per node of the plan (for a plan spanning GPU types, each
node's line carries its replica group's or pipeline stage's GPU type, micro-batch count, tp and layers; the
static rendezvous keeps every group's ranks consecutive, stage after stage)."""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

from pydantic import Field, field_validator

from frenzy_core.adapters.base import (
    Adapter,
    AdapterOptions,
    OutputFormat,
    gpu_vendor,
    node_slots,
    recipe_env,
)
from frenzy_core.adapters.torchtitan import torchtitan_args
from frenzy_core.errors import ConfigError
from frenzy_core.planning.launchers import TORCHTITAN, LaunchScope
from frenzy_core.planning.plan import Plan

__all__ = ["DEFAULT_RDZV_PORT", "TORCHRUN", "LaunchOptions", "TorchrunOptions", "torchrun_flags"]

DEFAULT_RDZV_PORT = 29500
"""torchrun's default ``--master-port`` (torch.distributed.run), used for the rendezvous endpoint too."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""A POSIX shell variable name (the environment is written as shell assignments)."""


class LaunchOptions(AdapterOptions):
    """What every adapter that starts the training script needs."""

    script: str = Field(default="train.py", description="Training script each rank runs.")
    script_args: list[str] = Field(default_factory=list, description="Arguments passed to the script.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every rank.")
    torchrun: list[str] = Field(default_factory=lambda: ["torchrun"], min_length=1, description=(
        "How to start torchrun, e.g. ['python', '-m', 'torch.distributed.run']."))

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        bad = [k for k in env if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"not shell variable names: {bad}; use letters, digits and _")
        return env


class TorchrunOptions(LaunchOptions):
    """Options of the torchrun adapter."""

    rdzv_host: str | None = Field(default=None, description=(
        "Rendezvous host (default: 127.0.0.1 on one node, else the host of the plan's first node)."))
    rdzv_port: int = Field(default=DEFAULT_RDZV_PORT, gt=0, lt=65536, description="Rendezvous port.")
    rdzv_backend: Literal["static", "c10d", "etcd", "etcd-v2"] = Field(default="static", description=(
        "torchrun --rdzv-backend: static gives each node the rank its line names (the rendezvous host is rank 0); "
        "the dynamic backends rank nodes in arrival order, so their lines name no rank."))
    rdzv_id: str = Field(default="frenzy", min_length=1, description="Job id shared by every node's agent.")
    hosts: dict[str, str] = Field(default_factory=dict, description=(
        "Plan node name -> hostname or IP (default: the plan name, ':' written as '-')."))
    torchtitan: bool = Field(default=False, description=(
        "Append torchtitan's --parallelism.* pipeline flags (degree, schedule, tp, each stage's modules: "
        "adapters/torchtitan.py) to the script's arguments; refused where torchtitan cannot run the plan."))


def torchrun_flags(*, nnodes: int | str, nproc_per_node: int | str, rdzv_backend: str, rdzv_endpoint: str,
                   rdzv_id: str, node_rank: int | str | None = None) -> list[str]:
    """torchrun's flags as ``--flag=value`` tokens; values may be shell expressions in script templates.

    ``node_rank`` is for the static backend only: the dynamic ones (c10d, etcd) ignore it and rank nodes as
    they arrive (torch.distributed.run).
    """
    assert node_rank is None or rdzv_backend == "static", "torchrun ignores --node-rank without static rendezvous"
    flags = [f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}"]
    if node_rank is not None:
        flags.append(f"--node-rank={node_rank}")
    flags += [f"--rdzv-backend={rdzv_backend}", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
    return flags


def _visible_devices_var(plan: Plan) -> str:
    """The variable that restricts a process to some GPUs: CUDA_VISIBLE_DEVICES, or HIP_VISIBLE_DEVICES on ROCm."""
    return "HIP_VISIBLE_DEVICES" if gpu_vendor(plan) == "amd" else "CUDA_VISIBLE_DEVICES"


def build_torchrun(plan: Plan, options: TorchrunOptions) -> dict[str, Any]:
    """Per node: node rank, host, GPUs, replica group, environment, argv and the shell command line."""
    if plan.grouped and options.rdzv_backend != "static":
        raise ConfigError(
            f"a plan of replica groups needs torchrun's static rendezvous, not {options.rdzv_backend}: each replica "
            "group's ranks must be the consecutive ones its nodes' lines announce (FRENZY_GROUP_FIRST_RANK), and only "
            "static node ranks fix the order", field="rdzv_backend", value=options.rdzv_backend,
            hint="use rdzv_backend='static' (the default)")
    slots = node_slots(plan)
    unknown = sorted(set(options.hosts) - {slot.name for slot in slots})
    if unknown:
        raise ConfigError(f"hosts names nodes the plan does not use: {unknown}", field="hosts", value=unknown,
                          hint="the plan's nodes are " + ", ".join(slot.name for slot in slots))
    hosts = {slot.name: options.hosts.get(slot.name, slot.host) for slot in slots}
    rdzv_host = options.rdzv_host or ("127.0.0.1" if len(slots) == 1 else hosts[slots[0].name])
    endpoint = f"{rdzv_host}:{options.rdzv_port}"
    devices = _visible_devices_var(plan)
    script_args = [*options.script_args, *(torchtitan_args(plan) if options.torchtitan else [])]
    nodes = []
    for slot in slots:
        env = {devices: ",".join(map(str, slot.gpus)), **recipe_env(plan, slot.group), **options.env}
        static = options.rdzv_backend == "static"
        argv = [*options.torchrun, *torchrun_flags(
            nnodes=len(slots), nproc_per_node=len(slot.gpus), node_rank=slot.rank if static else None,
            rdzv_backend=options.rdzv_backend, rdzv_endpoint=endpoint, rdzv_id=options.rdzv_id),
            options.script, *script_args]
        command = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])
        stage = plan.stages[slot.group]
        layers = None if stage.pipeline_stage is None else [stage.first_layer, stage.first_layer + stage.num_layers]
        nodes.append({"node": slot.name, "host": hosts[slot.name], "node_rank": slot.rank if static else None,
                      "nproc_per_node": len(slot.gpus), "gpus": list(slot.gpus), "group": slot.group,
                      "gpu_type": stage.gpu_type, "micro_batches": stage.micro_batches, "first_rank": slot.first_rank,
                      "stage": stage.pipeline_stage, "tp": stage.tp, "layers": layers,
                      "env": env, "argv": argv, "command": command})
    stages = plan.stages[0].pipeline_stage is not None
    return {"nnodes": len(slots), "world_size": plan.num_gpus, "mixed": plan.grouped, "stages": stages,
            "rdzv_endpoint": endpoint, "rdzv_backend": options.rdzv_backend, "rdzv_id": options.rdzv_id,
            "nodes": nodes}


def render_torchrun(data: dict[str, Any]) -> str:
    """One commented command line per node, to run on that node."""
    lines = [f"# torchrun: {data['nnodes']} node(s), {data['world_size']} processes; run each line on its node"]
    if data["rdzv_backend"] != "static" and data["nnodes"] > 1:
        lines.append(f"# {data['rdzv_backend']} rendezvous: torchrun ranks the nodes in the order they join")
    if data["stages"]:
        lines.append("# pipeline stages on different GPU types: each node's ranks follow the earlier nodes' (static "
                     "rendezvous), stage after stage; FRENZY_STAGE*, FRENZY_TP and FRENZY_GPU_TYPE are its stage's")
    elif data["mixed"]:
        lines.append("# replica groups (GPU types or micro-batch counts): each node's ranks follow the earlier nodes' (static "
                     "rendezvous); FRENZY_GROUP* and FRENZY_GRAD_ACCUM_STEPS are its group's")
    for node in data["nodes"]:
        rank = "" if node["node_rank"] is None else f"node_rank {node['node_rank']}: "
        ranks = f"ranks {node['first_rank']}..{node['first_rank'] + node['nproc_per_node'] - 1}"
        group = ""
        if data["stages"]:
            first, end = node["layers"]
            group = f", stage {node['stage']} ({node['gpu_type']}, tp {node['tp']}, layers {first}..{end - 1}, {ranks})"
        elif data["mixed"]:
            group = (f", group {node['group']} ({node['gpu_type']}, {ranks}, micro-batches per step: "
                     f"{node['micro_batches']})")
        lines.append(f"# {rank}{node['node']} ({node['host']}), GPUs {node['gpus']}{group}")
        lines.append(node["command"])
    return "\n".join(lines) + "\n"


def _narrower(options: TorchrunOptions) -> LaunchScope | None:
    """torchtitan's flags write only what torchtitan runs."""
    return TORCHTITAN if options.torchtitan else None


TORCHRUN: Adapter[TorchrunOptions] = Adapter(
    name="torchrun", summary="torchrun command line and environment per node", output=OutputFormat.TEXT,
    options=TorchrunOptions, build=build_torchrun, render=render_torchrun, narrower=_narrower)
