"""torchtitan's pipeline split for a plan: which modules each pipeline stage builds, as torchtitan's
``parallelism.module_fqns_per_model_part`` (its Python config field and its ``--parallelism.*`` command-line
form), so that a plan's uneven stages run as planned.

Written from pytorch/torchtitan at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21) and checked
against torchtitan 0.3.0's own command-line rules (tests/test_consumers.py): ``torchtitan/config/configs.py``
(``ParallelismConfig.module_fqns_per_model_part: list[list[str]] | None``, one list of module names per model
chunk, "e.g. [['tok_embeddings', 'layers.0'], ['layers.1', 'layers.2'], ...]"; the older
``pipeline_parallel_split_points`` option is gone) and ``torchtitan/distributed/pipeline_parallel.py``
(``_generate_llm_fqn_per_model_part``: ``tok_embeddings`` on the first stage, ``norm`` and ``lm_head`` on the
last; pp rank r builds stage r under a single-stage schedule such as 1F1B; the device mesh is pp x dp x tp, so
every stage has one ``tensor_parallel_degree``).
"""

from __future__ import annotations

import numpy as np

from frenzy_core.adapters.base import per_stage_tp_launchers
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.parallel import PipelineSchedule
from frenzy_core.errors import ConfigError
from frenzy_core.planning.launchers import FULL_OFFLOAD, TORCHTITAN, launchers_where, offload_kind
from frenzy_core.planning.plan import Plan

__all__ = ["module_fqns_per_model_part", "stage_layer_counts", "torchtitan_args"]

EMBEDDING_FQN = "tok_embeddings"
HEAD_FQNS = ("norm", "lm_head")
"""torchtitan's decoder module names (``_generate_llm_fqn_per_model_part``): the first stage's input module,
the last stage's output modules; the layers are ``layers.<i>``."""

SCHEDULES: dict[PipelineSchedule, str] = {PipelineSchedule.ONE_F_ONE_B: "1F1B", PipelineSchedule.GPIPE: "GPipe"}
"""torchtitan's ``pipeline_parallel_schedule`` (torch.distributed.pipelining's schedule names, one stage per pp
rank) for each single-stage schedule of the plan (pipelines over GPU types are 1F1B)."""


def stage_layer_counts(plan: Plan) -> tuple[int, ...]:
    """Transformer layers of each pipeline stage in model order: a form (a) plan's stages, else the plan's
    layout (its ``stage_layers``, or the even split, the first stages one layer longer)."""
    if plan.stages[0].pipeline_stage is not None:
        return tuple(s.num_layers for s in plan.stages)
    lay = LayoutArrays.from_configs(plan.training, plan.parallel)
    return tuple(int(n) for n in lay.stage_layer_count(plan.model.num_layers, np.arange(plan.parallel.pp)))


def _check(plan: Plan) -> None:
    """ConfigError where torchtitan cannot run the plan as written: stages of different tp, virtual stages,
    replica groups with their own micro-batch counts, context or expert parallelism (not written here), an offload
    other than FSDP2's, or FSDP2's without data or context parallel ranks to apply it."""
    p = plan.parallel
    if plan.grouped and plan.stages[0].pipeline_stage is None:
        raise ConfigError(
            "torchtitan gives every data-parallel rank one local batch, but the plan's replica groups run their own "
            f"micro-batch counts ({', '.join(str(s.micro_batches) for s in plan.stages)})",
            field="plan.stages", value=[s.micro_batches for s in plan.stages],
            hint=f"launch it with {', '.join(launchers_where(lambda s: s.mixed))} and a script that reads "
                 "FRENZY_GRAD_ACCUM_STEPS, or plan with plan_job(..., uneven_dp=False) on one GPU type")
    if p.cp > 1 or p.ep > 1:
        raise ConfigError(
            f"only the pipeline and tensor-parallel degrees are written for torchtitan, not {p.describe()}'s "
            "context or expert parallelism", field="plan.parallel", value=p.describe(),
            hint="set the config's context_parallel_degree / expert_parallel_degree to the plan's, or plan with "
                 "constraints={'cp': 1} and no experts")
    tps = sorted({s.tp for s in plan.stages})
    if len(tps) > 1:
        raise ConfigError(
            "torchtitan runs one tensor_parallel_degree on every pipeline stage (its device mesh is pp x dp x tp), "
            f"but the plan's stages have tp {', '.join(str(s.tp) for s in plan.stages)}",
            field="plan.stages", value=[s.tp for s in plan.stages],
            hint=f"launch it with {', '.join(per_stage_tp_launchers())} and a script that builds each stage from "
                 f"FRENZY_STAGE* (docs/adapters.md), or plan with constraints={{'tp': {tps[-1]}}} so every stage "
                 "shares one tp")
    kind = offload_kind(plan.training)
    if TORCHTITAN.offload is not None and kind not in TORCHTITAN.offload:
        raise ConfigError(
            f"torchtitan offloads only through FSDP2's CPUOffloadPolicy (parameters, gradients and the optimizer "
            f"together, --training.enable_cpu_offload), not offload {kind!r}", field="training.offload_optimizer",
            value=kind, hint="launch it with torchrun and a script that reads FRENZY_OFFLOAD_*, or plan with "
                             "offload_optimizer='cpu' and offload_params='cpu'")
    if p.vpp > 1 or p.schedule not in SCHEDULES:
        raise ConfigError(
            f"torchtitan's split is written here for one stage per pp rank (1F1B or GPipe), not {p.describe()} "
            f"with the {p.schedule.value} schedule", field="plan.parallel", value=p.describe(),
            hint="use the megatron adapter for interleaved plans")
    # every other rule of the declaration was checked above: what is left is the offload's
    if not TORCHTITAN.allows(LayoutArrays.from_configs(plan.training, p), plan.training)[0]:
        # parallelize.py passes cpu_offload to apply_fsdp only when parallel_dims.fsdp_enabled (dp_shard or cp > 1)
        raise ConfigError("torchtitan offloads through FSDP2, which it applies only with data or context parallel "
                          "ranks: at dp = cp = 1 --training.enable_cpu_offload would keep everything on the GPU",
                          field="plan.parallel.dp", value=p.dp,
                          hint="plan with dp > 1 (plan_job(..., launcher=frenzy_core.planning.launchers.TORCHTITAN), "
                               "frenzy plan --emit torchrun -o torchtitan=true), or launch it with torchrun and a "
                               "script that reads FRENZY_OFFLOAD_*")


def module_fqns_per_model_part(plan: Plan) -> list[list[str]]:
    """torchtitan's ``module_fqns_per_model_part`` for the plan: stage i's module names in model order.

    ConfigError where torchtitan cannot run the plan as written: stages of different tp, virtual stages.
    """
    _check(plan)
    counts = stage_layer_counts(plan)
    starts = np.cumsum((0, *counts[:-1]))
    parts = [[f"layers.{k}" for k in range(int(first), int(first) + n)] for first, n in zip(starts, counts)]
    parts[0].insert(0, EMBEDDING_FQN)
    parts[-1].extend(HEAD_FQNS)
    return parts


def torchtitan_args(plan: Plan) -> list[str]:
    """The ``--parallelism.*`` command-line tokens that give torchtitan the plan's pipeline: degree, schedule,
    tensor-parallel degree and each stage's modules (one comma-separated list per stage, torchtitan's
    ``A,B,C,...`` form for a list of names). The data-parallel sharding, cp, ep, batch and recipe stay the
    config's."""
    parts = module_fqns_per_model_part(plan)
    return [f"--parallelism.pipeline_parallel_degree={plan.parallel.pp}",
            f"--parallelism.pipeline_parallel_schedule={SCHEDULES[plan.parallel.schedule]}",
            f"--parallelism.tensor_parallel_degree={plan.stages[0].tp}",
            "--parallelism.module_fqns_per_model_part", *(",".join(part) for part in parts),
            *(["--training.enable_cpu_offload"] if offload_kind(plan.training) == FULL_OFFLOAD else [])]
