"""``megatron``: the Megatron-LM command-line arguments of a plan (written by :func:`to_megatron_args`)."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import Adapter, AdapterOptions, OutputFormat
from frenzy_core.config.megatron_writer import to_megatron_args
from frenzy_core.config.model import ModelConfig
from frenzy_core.planning.plan import Plan

__all__ = ["MEGATRON", "MegatronOptions"]


class MegatronOptions(AdapterOptions):
    """Options of the megatron adapter."""

    model: ModelConfig | None = Field(default=None, description="Model shape flags from this model instead of "
                                      "the plan's own (default: plan.model).")
    script: str = Field(default="pretrain_gpt.py", description="Megatron-LM entry point the shell line starts.")


def build_megatron(plan: Plan, options: MegatronOptions) -> dict[str, Any]:
    """``args``: the flag tokens; ``shell``: them quoted on one line; ``world_size``: GPUs to launch them on."""
    args = to_megatron_args(options.model or plan.model, plan.training, plan.parallel)
    return {"world_size": plan.num_gpus, "script": options.script, "args": args, "shell": shlex.join(args)}


def render_megatron(data: dict[str, Any]) -> str:
    """The script and its arguments, one flag per line (pass it to torchrun on every node)."""
    lines: list[str] = [data["script"]]
    for token in data["args"]:
        if token.startswith("--"):
            lines.append(token)
        else:
            lines[-1] += " " + shlex.quote(token)
    return " \\\n    ".join(lines) + "\n"


MEGATRON: Adapter[MegatronOptions] = Adapter(
    name="megatron", summary="Megatron-LM arguments (parallelism, batch, recompute, precision, model shape)",
    output=OutputFormat.TEXT, options=MegatronOptions, build=build_megatron, render=render_megatron)
