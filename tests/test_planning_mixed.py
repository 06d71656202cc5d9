"""Plans spanning several GPU types (issue 12): the plan's groups, data-parallel replica groups of different types
(form b), and the search that chooses them."""

from __future__ import annotations

from frenzy_core import Cluster, ModelConfig, TrainingConfig
from frenzy_core.planning import Plan, plan_job


def _small_plan() -> Plan:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2}]})
    return plan_job(ModelConfig.preset("llama-2-7b"), cluster, TrainingConfig(seq_len=4096, global_batch_size=64))


def test_a_single_type_plan_is_one_group_of_its_own_fields() -> None:
    plan = _small_plan()
    assert plan.gpu_types == (plan.gpu_type,) and not plan.mixed
    (group,) = plan.stages
    assert (group.gpu_type, group.num_gpus, group.placement) == (plan.gpu_type, plan.num_gpus, plan.placement)
    assert (group.tp, group.pp, group.dp, group.cp) == (plan.parallel.tp, plan.parallel.pp, plan.parallel.dp,
                                                        plan.parallel.cp)
    assert group.num_layers == plan.model.num_layers and group.first_layer == 0
    assert group.samples == plan.training.global_batch_size
    assert group.micro_batches * group.dp * plan.training.micro_batch_size == group.samples
    assert (group.device_bytes, group.iteration_s) == (plan.memory.device_bytes, plan.time.iteration_s)
    assert Plan.model_validate_json(plan.model_dump_json()) == plan
    assert "Groups" not in plan.explain()
