"""``megatron``: the Megatron-LM command line of a plan and the environment it needs on the plan's GPUs."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import Adapter, AdapterOptions, OutputFormat
from frenzy_core.config.megatron import megatron_launch
from frenzy_core.config.model import ModelConfig
from frenzy_core.planning.plan import Plan

__all__ = ["MEGATRON", "MegatronOptions"]


class MegatronOptions(AdapterOptions):
    """Options of the megatron adapter."""

    model: ModelConfig | None = Field(default=None, description="Model shape flags from this model instead of "
                                      "the plan's own (default: plan.model).")
    script: str = Field(default="pretrain_gpt.py", description="Megatron-LM entry point the shell line starts.")


def build_megatron(plan: Plan, options: MegatronOptions) -> dict[str, Any]:
    """``args``: the flag tokens; ``env``: what every rank needs; ``shell``: the flags on one line."""
    launch = megatron_launch(options.model or plan.model, plan.training, plan.parallel, plan.gpu_type)
    args = list(launch.args)
    return {"world_size": plan.num_gpus, "gpu_type": plan.gpu_type, "script": options.script, "args": args,
            "env": dict(launch.env), "padded_vocab_size": launch.padded_vocab_size, "notes": list(launch.notes),
            "shell": shlex.join(args)}


def render_megatron(data: dict[str, Any]) -> str:
    """The environment as ``export`` lines, then the script and its arguments, one flag per line (start it with
    torchrun on every node)."""
    lines = [f"# Megatron-LM on {data['world_size']} x {data['gpu_type']}: start the script with torchrun on every "
             "node, in this environment", *(f"# note: {n}" for n in data["notes"]),
             *(f"export {k}={shlex.quote(v)}" for k, v in data["env"].items())]
    command: list[str] = [shlex.quote(data["script"])]
    for token in data["args"]:
        if token.startswith("--"):
            command.append(token)
        else:
            command[-1] += " " + shlex.quote(token)
    return "\n".join(lines) + "\n" + " \\\n    ".join(command) + "\n"


MEGATRON: Adapter[MegatronOptions] = Adapter(
    name="megatron", summary="Megatron-LM arguments and environment (parallelism, batch, recompute, precision, model)",
    output=OutputFormat.TEXT, options=MegatronOptions, build=build_megatron, render=render_megatron)
