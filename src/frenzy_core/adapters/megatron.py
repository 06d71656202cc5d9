"""``megatron``: the Megatron-LM command line of a plan and the environment it needs on the plan's GPUs.

A pipeline whose stages run on different GPU types (issue 12, form a) is one Megatron-LM command where every
stage has one tensor-parallel degree (one binary, one ``--tensor-model-parallel-size``); its uneven split is
``--decoder-first/last-pipeline-num-layers`` or ``--account-for-*`` where those say it (Megatron-Core's
``get_num_layers_to_build`` fixes the first and last stages and splits the rest evenly), else
``--pipeline-model-parallel-layout``. Stages of different tp are refused, naming the launchers that run them.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import Adapter, AdapterOptions, OutputFormat, per_stage_tp_launchers
from frenzy_core.config.megatron import megatron_launch
from frenzy_core.config.model import ModelConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning.plan import Plan

__all__ = ["MEGATRON", "MegatronOptions"]


class MegatronOptions(AdapterOptions):
    """Options of the megatron adapter."""

    model: ModelConfig | None = Field(default=None, description="Model shape flags from this model instead of "
                                      "the plan's own (default: plan.model).")
    script: str = Field(default="pretrain_gpt.py", description="Megatron-LM entry point the shell line starts.")


def _check_stages(plan: Plan) -> None:
    """ConfigError when Megatron-LM cannot run a form (a) plan's per-stage tp (its split it can say: the first/
    last-stage flags or --pipeline-model-parallel-layout, config/megatron/writer.py)."""
    others = ", ".join(per_stage_tp_launchers())
    tps = [s.tp for s in plan.stages]
    if len(set(tps)) > 1:
        raise ConfigError(
            f"Megatron-LM runs one --tensor-model-parallel-size on every pipeline stage, but the plan's stages have "
            f"tp {', '.join(map(str, tps))}", field="plan.stages", value=tps,
            hint=f"launch it with {others} (a torch.distributed.pipelining script that builds each stage from "
                 f"FRENZY_STAGE*, docs/adapters.md), or plan with constraints={{'tp': {max(tps)}}}")


def build_megatron(plan: Plan, options: MegatronOptions) -> dict[str, Any]:
    """``args``: the flag tokens; ``env``: what every rank needs; ``shell``: the flags on one line. A pipeline
    over GPU types is checked on every stage's type (the environment is the union of theirs)."""
    model = options.model or plan.model
    if plan.stages[0].pipeline_stage is not None:
        _check_stages(plan)
    training = plan.stage_training(plan.stages[0])
    launches = [megatron_launch(model, training, plan.parallel, gpu_type) for gpu_type in plan.gpu_types]
    launch = launches[0]
    assert all(other.args == launch.args for other in launches), "Megatron's flags differ between GPU types"
    env = {k: v for other in launches for k, v in other.env.items()}
    notes = list(dict.fromkeys(n for other in launches for n in other.notes))
    args = list(launch.args)
    return {"world_size": plan.num_gpus, "gpu_type": ", ".join(plan.gpu_types), "script": options.script,
            "args": args, "env": env, "padded_vocab_size": launch.padded_vocab_size, "notes": notes,
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
