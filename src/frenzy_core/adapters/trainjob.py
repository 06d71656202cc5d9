"""``kubeflow-trainjob``: a Kubeflow Trainer v2 ``TrainJob`` (trainer.kubeflow.org/v1alpha1) running the plan.

Trainer v2 (2025) replaces the PyTorchJob: the job names a ``ClusterTrainingRuntime`` (``torch-distributed`` by
default), whose torch policy sets torchrun's ``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` and
``PET_MASTER_ADDR`` in every node's pod, so the container runs plain ``torchrun SCRIPT``. The GPU-type node
selector and ``/dev/shm`` go in a runtime patch on the runtime's ``node`` job and container.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from frenzy_core.adapters.base import Adapter, OutputFormat, gpu_vendor, node_slots, recipe_env, uniform_gpus_per_node
from frenzy_core.adapters.kubernetes import GPU_RESOURCE, PodOptions, gpu_node_selector, metadata
from frenzy_core.planning.plan import Plan

__all__ = ["TRAINJOB", "TrainJobOptions"]

NODE_JOB = "node"
"""The replicated job and container the torch-distributed runtimes name ``node`` (Kubeflow Trainer manifests)."""


class TrainJobOptions(PodOptions):
    """Options of the kubeflow-trainjob adapter."""

    runtime: str = Field(default="torch-distributed", min_length=1, description=(
        "ClusterTrainingRuntime the job runs on (Kubeflow Trainer installs torch-distributed)."))
    patch_manager: str = Field(default="frenzy.io/frenzy-core", min_length=1, description=(
        "runtimePatches manager that owns the node selector and volume patch."))


def build_trainjob(plan: Plan, options: TrainJobOptions) -> dict[str, Any]:
    """The TrainJob manifest: one node per plan node, the plan's GPUs on each, torchrun from the runtime."""
    per_node = uniform_gpus_per_node(plan, "kubeflow-trainjob")
    env = {**recipe_env(plan), **options.env}
    trainer: dict[str, Any] = {
        "image": options.image,
        "command": list(options.torchrun),
        "args": [options.script, *options.script_args],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "numNodes": len(node_slots(plan)),
        "numProcPerNode": per_node,
        "resourcesPerNode": {"limits": {GPU_RESOURCE[gpu_vendor(plan)]: per_node}},
    }
    pod: dict[str, Any] = {"nodeSelector": gpu_node_selector(plan, options, plan.gpu_type)}
    if options.shm:
        pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        pod["containers"] = [{"name": NODE_JOB, "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}]
    patch = {"manager": options.patch_manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": NODE_JOB, "template": {"spec": {"template": {"spec": pod}}}}]}}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": metadata(options),
            "spec": {"runtimeRef": {"name": options.runtime, "apiGroup": "trainer.kubeflow.org",
                                    "kind": "ClusterTrainingRuntime"},
                     "trainer": trainer, "runtimePatches": [patch]}}


TRAINJOB: Adapter[TrainJobOptions] = Adapter(
    name="kubeflow-trainjob", summary="Kubeflow Trainer v2 TrainJob (torch-distributed runtime, GPUs per node, selector)",
    output=OutputFormat.YAML, options=TrainJobOptions, build=build_trainjob)
