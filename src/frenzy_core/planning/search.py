"""A planning request made ready to solve: validated inputs, the node pool, GPU specs and links per type.

:class:`Search` is what the candidate table is built from; the planner solves it, and the infeasibility
diagnosis rebuilds it with one input relaxed at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from frenzy_core.config.batch import DefaultBatch, default_batch
from frenzy_core.config.layout import validate_layout
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig
from frenzy_core.config.training import Framework, Precision, TrainingConfig
from frenzy_core.errors import ConfigError, UnknownNameError
from frenzy_core.hardware.cluster import Cluster
from frenzy_core.hardware.gpu import GPUSpec, Links, usable_bytes
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.memory.kernel import TORCH_TP_REFUSAL, torch_sp_covered, torch_sp_gap, torch_sp_refusal
from frenzy_core.planning.candidates import CandidateTable, build_candidates, tp_searched
from frenzy_core.planning.estimators import AnalyticEstimator, LayoutEstimator
from frenzy_core.planning.launchers import OFFLOAD_ZERO_STAGES, LaunchScope, get_launch_scope, offload_kind
from frenzy_core.planning.nodes import NodePool
from frenzy_core.planning.request import Objective, PlacementMode, PlanConstraints

__all__ = ["HALF_PRECISION_FALLBACK", "ClusterLike", "Search", "make_search", "precision_on"]

HALF_PRECISION_FALLBACK: dict[Precision, Precision] = {
    Precision.BF16_MIXED: Precision.FP16_MIXED, Precision.BF16: Precision.FP16, Precision.AMP_BF16: Precision.AMP_FP16,
}
"""What a bf16 recipe left at its default runs as on a GPU without bf16 (V100, T4, P100): the same recipe in
fp16, with loss scaling (as Megatron-LM and DeepSpeed do on pre-Ampere GPUs)."""


@dataclass(frozen=True)
class Search:
    """Everything one request is solved from; rebuilt with relaxed inputs to find suggestions."""

    model: ModelConfig
    training: TrainingConfig
    pool: NodePool
    specs: dict[str, GPUSpec]
    constraints: PlanConstraints
    objective: Objective
    estimator: LayoutEstimator
    links: dict[str, Links]
    """Per GPU type: the link speeds its time estimates are computed with (:meth:`Cluster.links`)."""
    default_batch: DefaultBatch | None = None
    """The default global batch when the request gave none (then it may move to split evenly over dp)."""
    scope: LaunchScope | None = None
    """The launcher the plan must be launchable by."""
    precisions: dict[str, Precision] = field(default_factory=dict)
    """Per GPU type whose precision falls back (bf16 left at its default on a GPU without bf16)."""
    allow_uneven: bool = True
    """Whether the request allows data-parallel ranks that differ by one micro-batch (``plan_job(...,
    uneven_dp=...)``; the scheduler's runs carry one recipe and say no)."""
    fallback: bool = False
    """Whether this is one of the offload fallback's searches (its recipe pins ZeRO stages of its own: where the
    launcher can write none of its layouts, nothing fits, rather than a ConfigError about the request's pins)."""
    mixed_placement: PlacementMode = PlacementMode.ANY
    """The placement rule mixed-type plans keep: the request's (a launcher that launches mixed plans writes one
    part per GPU type and node size, so its single-type rule does not apply to them)."""

    @property
    def mixable(self) -> bool:
        """Whether mixed-type plans are searched: placement ``any`` for them, and no launcher or one that
        launches them."""
        return (self.scope is None or self.scope.mixed) and self.mixed_placement is PlacementMode.ANY

    @property
    def uneven(self) -> bool:
        """Whether data-parallel ranks may run micro-batch counts that differ by one (a batch that does not split
        evenly): the torch runtime only (Megatron-Core's ``ConstantNumMicroBatchesCalculator`` asserts
        ``global_batch_size % (micro_batch_size x data_parallel_size) == 0``, megatron/core/
        num_microbatches_calculator.py), and no launcher or one that passes each rank its own count."""
        return (self.allow_uneven and self.training.framework is Framework.TORCH
                and (self.scope is None or self.scope.mixed))

    def usable_bytes(self, gpu_type: str) -> int:
        """Bytes a GPU of ``gpu_type`` may hold under the request's headroom."""
        return usable_bytes(self.specs[gpu_type].memory_bytes, self.constraints.headroom)

    def recipe(self, gpu_type: str) -> TrainingConfig:
        """The recipe ``gpu_type`` runs: the request's, in its fallback precision where it has one."""
        fallback = self.precisions.get(gpu_type)
        return self.training if fallback is None else self.training.replace(precision=fallback)

    def table(self) -> CandidateTable:
        return build_candidates(self.model, self.training, self.pool, self.specs, self.constraints, self.objective,
                                self.estimator, links=self.links, adjustable_batch=self.default_batch is not None,
                                uneven=self.uneven, scope=self.scope, precisions=self.precisions,
                                refuse_scope=not self.fallback)

    def feasible(self) -> bool:
        """Whether any candidate can be placed (no solver needed: the count check is exact)."""
        _, ok = self.table().options
        return bool(ok.any())


def _constraints(constraints: PlanConstraints | Mapping[str, Any] | None) -> PlanConstraints:
    if constraints is None:
        return PlanConstraints()
    if isinstance(constraints, PlanConstraints):
        return constraints
    if isinstance(constraints, Mapping):
        return PlanConstraints.model_validate(dict(constraints))  # type: ignore[no-any-return]
    raise ConfigError(f"constraints must be a PlanConstraints or a mapping, got {type(constraints).__name__}",
                      field="constraints")


def _pin_explicit_fields(training: TrainingConfig, cons: PlanConstraints) -> PlanConstraints:
    """Searched training fields the caller set explicitly stay fixed, unless ``constraints`` already pins them."""
    explicit = training.model_fields_set
    pins: dict[str, Any] = {}
    if "micro_batch_size" in explicit and cons.micro_batch_sizes is None:
        pins["micro_batch_sizes"] = [training.micro_batch_size]
    if "recompute" in explicit and cons.recompute is None:
        pins["recompute"] = [training.recompute]
    if "zero_stage" in explicit and cons.zero_stages is None:
        pins["zero_stages"] = [training.zero_stage]
    for name in ("distributed_optimizer", "sequence_parallel"):
        if name in explicit and getattr(cons, name) is None:
            pins[name] = getattr(training, name)
    return cons.replace(**pins) if pins else cons


def _check_pins(model: ModelConfig, training: TrainingConfig, cons: PlanConstraints, adjustable: bool) -> None:
    """Pinned tp/pp/micro-batch sizes that no layout of this model and batch can use are bad input, not an
    infeasible plan: ConfigError naming the pin (a default batch moves to fit the micro-batch)."""
    free = training.replace(micro_batch_size=1, global_batch_size=None)
    if cons.sequence_parallel and training.framework is Framework.TORCH and not torch_sp_covered(model):
        raise ConfigError(torch_sp_refusal(model), field="constraints.sequence_parallel", value=True,
                          hint="leave sequence_parallel unset or False for this model with framework 'torch' (the "
                          "planner searches it for framework 'megatron' and for the models torchtitan's plan covers)")
    if cons.tp is not None:
        validate_layout(model, free, ParallelConfig(tp=cons.tp))
    if cons.tp is not None and cons.tp > 1 and not tp_searched(model, training, cons):
        raise ConfigError(TORCH_TP_REFUSAL, field="constraints.tp", value=cons.tp,
                          hint="pin tp=1 or leave it unset" + (
                              ", or leave sequence_parallel unset or True" if torch_sp_covered(model) else
                              f" (torchtitan's plan does not cover this model: {torch_sp_gap(model)})")
                          + ", or use framework='megatron'")
    if cons.pp is not None:
        validate_layout(model, free, ParallelConfig(pp=cons.pp))
        if model.num_layers % cons.pp != 0:
            even = [d for d in range(1, model.num_layers + 1) if model.num_layers % d == 0]
            raise ConfigError(f"pp={cons.pp} does not divide num_layers={model.num_layers} (the planner gives every "
                              "stage the same number of layers)", field="constraints.pp", value=cons.pp,
                              hint=f"use pp in {even}")
    gbs = training.global_batch_size
    if gbs is not None and not adjustable and cons.micro_batch_sizes is not None:
        usable = [m for m in cons.micro_batch_sizes if gbs % m == 0]
        if not usable:
            raise ConfigError(
                f"global_batch_size={gbs} is not divisible by any pinned micro-batch size {cons.micro_batch_sizes}",
                field="constraints.micro_batch_sizes", value=cons.micro_batch_sizes,
                hint=f"use a divisor of {gbs}")


def _objective(objective: Objective | str) -> Objective:
    try:
        return Objective(objective)
    except ValueError:
        raise ConfigError(f"unknown objective {objective!r}", field="objective", value=objective,
                          hint="use one of " + ", ".join(repr(o.value) for o in Objective)) from None


ClusterLike = Cluster | NodePool | Mapping[str, Any]
"""What the planner accepts as a cluster: a :class:`Cluster`, its ``to_dict()`` form, or a pool of free nodes."""


def _specs(cluster: Cluster | NodePool, pool: NodePool) -> dict[str, GPUSpec]:
    """Every GPU type's spec from the cluster's own catalogue (a bare node pool: the built-in one)."""
    if isinstance(cluster, Cluster):
        return {name: cluster.gpu_spec(name) for name in pool.gpu_types}
    return {name: get_gpu_spec(name) for name in pool.gpu_types}


def _allowed_types(cons: PlanConstraints, specs: dict[str, GPUSpec], pool: NodePool) -> PlanConstraints:
    """``gpu_types`` as the cluster's ids (names resolve in its catalogue first, then the built-in one)."""
    if cons.gpu_types is None:
        return cons
    wanted = []
    for name in cons.gpu_types:
        try:
            wanted.append(get_gpu_spec(name, specs).id)
        except UnknownNameError:
            wanted.append(get_gpu_spec(name).id)  # a known type this cluster lacks; unknown names raise here
    if not any(w in specs for w in wanted):
        raise ConfigError(f"constraints.gpu_types {cons.gpu_types} names no GPU type of the cluster",
                          field="constraints.gpu_types", value=cons.gpu_types,
                          hint="the cluster has " + ", ".join(pool.gpu_types))
    return cons.replace(gpu_types=[w for w in wanted if w in specs])


def _fallback_precisions(training: TrainingConfig, specs: dict[str, GPUSpec]) -> dict[str, Precision]:
    """Types that run a defaulted bf16 recipe in fp16 (they list an fp16 peak and no bf16 one)."""
    fallback = HALF_PRECISION_FALLBACK.get(training.precision)
    if "precision" in training.model_fields_set or fallback is None:
        return {}
    return {name: fallback for name, spec in specs.items()
            if "bf16" not in spec.peak_tflops and "fp16" in spec.peak_tflops}


def precision_on(training: TrainingConfig, spec: GPUSpec) -> Precision:
    """The precision a plan of ``training`` runs in on ``spec``: its own, or the fp16 fallback of a defaulted bf16
    recipe on a GPU without bf16 (what a checker of the planner's layouts must expect)."""
    return _fallback_precisions(training, {spec.id: spec}).get(spec.id, training.precision)


def _within_scope(scope: LaunchScope, training: TrainingConfig, cons: PlanConstraints
                  ) -> tuple[TrainingConfig, PlanConstraints]:
    """The request narrowed to what the launcher can run (a defaulted framework becomes the launcher's, the
    placement the stricter of the two); ConfigError for a fixed field it cannot express."""
    if training.framework not in scope.frameworks and "framework" not in training.model_fields_set:
        training = training.replace(framework=scope.frameworks[0])
    scope.check(training)
    cons = cons.replace(placement=cons.placement.at_least(scope.placement))
    stages = OFFLOAD_ZERO_STAGES.get(offload_kind(training))
    if scope.offload is not None and stages is not None and training.framework is Framework.TORCH:
        # the launcher writes the offload only at the ZeRO stages that run it (its adapter refuses the others)
        zeros = [z for z in cons.zero_stages or (0, 1, 2, 3) if z in stages]
        if not zeros:
            raise ConfigError(f"{scope.name} offloads {offload_kind(training)} at ZeRO stage "
                              f"{' or '.join(map(str, stages))} only", field="constraints.zero_stages",
                              value=cons.zero_stages, hint=f"allow zero_stages {list(stages)}")
        cons = cons.replace(zero_stages=zeros)
    return training, cons


def make_search(model: ModelConfig, cluster: ClusterLike, training: TrainingConfig | None, objective: Objective | str,
                constraints: PlanConstraints | Mapping[str, Any] | None,
                estimator: LayoutEstimator | None = None, launcher: str | LaunchScope | None = None,
                uneven: bool = True) -> Search:
    """Validate a request and gather what solving it needs; bad input raises ConfigError."""
    if not isinstance(model, ModelConfig):
        raise ConfigError(f"model must be a ModelConfig, got {type(model).__name__}", field="model",
                          hint="use ModelConfig.preset(name) or ModelConfig(...)")
    training = TrainingConfig(seq_len=model.default_seq_len()) if training is None else training
    if not isinstance(training, TrainingConfig):
        raise ConfigError(f"training must be a TrainingConfig, got {type(training).__name__}", field="training")
    validate_layout(model, training.replace(micro_batch_size=1), ParallelConfig())  # model and recipe agree
    obj = _objective(objective)
    cons = _pin_explicit_fields(training, _constraints(constraints))
    scope = None if launcher is None else get_launch_scope(launcher)
    mixed_placement = cons.placement
    if scope is not None:
        training, cons = _within_scope(scope, training, cons)
        mixed_placement = mixed_placement if scope.mixed else cons.placement
    batch = default_batch(model, training.seq_len) if training.global_batch_size is None else None
    if batch is not None:
        training = training.replace(global_batch_size=batch.global_batch_size)
    _check_pins(model, training, cons, adjustable=batch is not None)
    if isinstance(cluster, Mapping):
        cluster = Cluster.from_dict(cluster)
    if not isinstance(cluster, (Cluster, NodePool)):
        raise ConfigError(f"cluster must be a Cluster, a mapping or a NodePool, got {type(cluster).__name__}",
                          field="cluster", hint="use Cluster.preset(name) or Cluster.from_dict({'nodes': [...]})")
    pool = cluster if isinstance(cluster, NodePool) else NodePool.from_cluster(cluster)
    if not pool.nodes:
        raise ConfigError("the cluster has no nodes", field="cluster", hint="add nodes: [{gpu: ..., gpus_per_node: ...}]")
    specs = _specs(cluster, pool)
    cons = _allowed_types(cons, specs, pool)
    if obj is Objective.TIME_TO_TRAIN and cons.token_budget is None:
        raise ConfigError(f"objective {obj.value!r} needs constraints.token_budget (tokens to train)",
                          field="constraints.token_budget", hint="e.g. constraints={'token_budget': 10**9}")
    # a bare node pool carries no link speeds: its types get their typical node's
    links = {name: cluster.links(name) if isinstance(cluster, Cluster) else spec.links for name, spec in specs.items()}
    return Search(model=model, training=training, pool=pool, specs=specs, constraints=cons, objective=obj,
                  estimator=estimator or AnalyticEstimator(), links=links, default_batch=batch, scope=scope,
                  precisions=_fallback_precisions(training, specs), mixed_placement=mixed_placement,
                  allow_uneven=uneven)
