"""``kubernetes``: a Kubeflow PyTorchJob (kubeflow.org/v1) running the plan, one pod per node.

The training operator starts one Master pod and ``nnodes - 1`` Worker pods and sets ``MASTER_ADDR`` and
``MASTER_PORT`` in each; every pod runs torchrun with the rendezvous on the Master. Pods ask for the plan's GPUs
(``nvidia.com/gpu`` or ``amd.com/gpu``) and select nodes by the GPU product label that GPU feature discovery
(NVIDIA) or the node labeller (AMD) sets.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from frenzy_core.adapters.base import (
    Adapter,
    OutputFormat,
    gpu_vendor,
    launcher_gpu_name,
    node_slots,
    recipe_env,
    uniform_gpus_per_node,
)
from frenzy_core.adapters.torchrun import LaunchOptions, torchrun_flags
from frenzy_core.planning.plan import Plan

__all__ = ["GPU_RESOURCE", "KUBERNETES", "PRODUCT_LABEL", "KubernetesOptions", "PodOptions", "gpu_node_selector",
           "metadata"]

GPU_RESOURCE: dict[str, str] = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
"""Extended resource each vendor's device plugin advertises."""

PRODUCT_LABEL: dict[str, str] = {"nvidia": "nvidia.com/gpu.product", "amd": "amd.com/gpu.product-name"}
"""Node label holding the GPU product name (NVIDIA GPU feature discovery; AMD GPU node labeller)."""

_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""Kubernetes object names (RFC 1123 label)."""

CONTAINER_NAME = "pytorch"
"""The training operator finds the training container by this name."""


class PodOptions(LaunchOptions):
    """Options of the adapters that write Kubernetes objects (PyTorchJob, TrainJob)."""

    job_name: str = Field(default="frenzy-train", max_length=63, description="metadata.name (RFC 1123 label).")
    namespace: str | None = None
    image: str = Field(default="pytorch/pytorch:latest", min_length=1, description="Container image.")
    gpu_product: str | None = Field(default=None, description=(
        "Value of the product label to select (default: the name GPU feature discovery reports)."))
    node_selector: dict[str, str] = Field(default_factory=dict, description="More node labels to select.")
    shm: bool = Field(default=True, description="Mount a memory-backed /dev/shm (data loaders, NCCL).")

    @field_validator("job_name", "namespace")
    @classmethod
    def _dns_name(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_1123.match(value):
            raise ValueError(f"{value!r} is not a Kubernetes name: use lowercase letters, digits and '-'")
        return value


class KubernetesOptions(PodOptions):
    """Options of the kubernetes adapter (a Kubeflow PyTorchJob)."""

    restart_policy: Literal["OnFailure", "Never", "Always", "ExitCode"] = "OnFailure"
    clean_pod_policy: Literal["None", "Running", "All"] = Field(default="None", description=(
        "runPolicy.cleanPodPolicy: which pods the operator deletes when the job ends (None keeps their logs)."))
    backoff_limit: int | None = Field(default=None, ge=0, description="runPolicy.backoffLimit: retries before failing.")


def metadata(options: PodOptions) -> dict[str, Any]:
    """``metadata``: the job's name, and its namespace when given."""
    out: dict[str, Any] = {"name": options.job_name}
    if options.namespace is not None:
        out["namespace"] = options.namespace
    return out


def gpu_node_selector(plan: Plan, options: PodOptions) -> dict[str, str]:
    """Node labels that pin the pods to the plan's GPU type (plus the user's own)."""
    vendor = gpu_vendor(plan)
    product = launcher_gpu_name(plan, "kubernetes", "gpu_product", options.gpu_product)
    return {PRODUCT_LABEL[vendor]: product, **options.node_selector}


def _pod_template(plan: Plan, options: KubernetesOptions, per_node: int, nnodes: int) -> dict[str, Any]:
    vendor = gpu_vendor(plan)
    flags = torchrun_flags(nnodes=nnodes, nproc_per_node=per_node, rdzv_backend="c10d",
                           rdzv_endpoint="$(MASTER_ADDR):$(MASTER_PORT)", rdzv_id=options.job_name)
    env = {**recipe_env(plan), **options.env}
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": options.image,
        "command": list(options.torchrun),
        "args": [*flags, options.script, *options.script_args],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": {"limits": {GPU_RESOURCE[vendor]: per_node}},
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "nodeSelector": gpu_node_selector(plan, options),
    }
    if options.shm:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return {"spec": spec}


def build_kubernetes(plan: Plan, options: KubernetesOptions) -> dict[str, Any]:
    """The PyTorchJob manifest: a Master replica, plus Workers when the plan spans several nodes."""
    per_node = uniform_gpus_per_node(plan, "kubernetes")
    nnodes = len(node_slots(plan))
    groups = {"Master": 1, "Worker": nnodes - 1}
    replicas = {  # a fresh template per group: YAML would write a shared one as an anchor and alias
        group: {"replicas": count, "restartPolicy": options.restart_policy,
                "template": _pod_template(plan, options, per_node, nnodes)}
        for group, count in groups.items() if count > 0}
    run_policy: dict[str, Any] = {"cleanPodPolicy": options.clean_pod_policy}
    if options.backoff_limit is not None:
        run_policy["backoffLimit"] = options.backoff_limit
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata(options),
            "spec": {"nprocPerNode": str(per_node), "runPolicy": run_policy, "pytorchReplicaSpecs": replicas}}


KUBERNETES: Adapter[KubernetesOptions] = Adapter(
    name="kubernetes", summary="Kubeflow PyTorchJob manifest (Master + Workers, GPU limits, GPU product selector)",
    output=OutputFormat.YAML, options=KubernetesOptions, build=build_kubernetes)
