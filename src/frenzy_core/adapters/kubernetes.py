"""``kubernetes``: a Kubeflow PyTorchJob (kubeflow.org/v1) running the plan, one pod per node; a JobSet
(jobset.x-k8s.io/v1alpha2) for a plan spanning GPU types.

The training operator starts one Master pod and ``nnodes - 1`` Worker pods and sets ``MASTER_ADDR`` and
``MASTER_PORT`` in each; every pod runs torchrun with the rendezvous on the Master. Pods ask for the plan's GPUs
(``nvidia.com/gpu`` or ``amd.com/gpu``) and select nodes by the GPU product label that GPU feature discovery
(NVIDIA) or the node labeller (AMD) sets. A PyTorchJob has one Worker template, so a mixed plan is a JobSet
instead: one replicated job (an Indexed Job) per run of nodes of one replica group and size, each with its own
node selector, GPU limits and group environment, joined by torchrun's static rendezvous on the first pod.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

from pydantic import Field, field_validator

from frenzy_core.adapters.base import (
    Adapter,
    OutputFormat,
    gpu_vendor,
    launcher_gpu_name,
    node_runs,
    node_slots,
    recipe_env,
    site_name,
    uniform_gpus_per_node,
)
from frenzy_core.adapters.torchrun import DEFAULT_RDZV_PORT, LaunchOptions, torchrun_flags
from frenzy_core.errors import ConfigError
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
    gpu_product: str | dict[str, str] | None = Field(default=None, description=(
        "Value of the product label to select (default: the name GPU feature discovery reports); for a plan "
        "spanning types, a mapping GPU type id -> value."))
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


def gpu_node_selector(plan: Plan, options: PodOptions, gpu_type: str) -> dict[str, str]:
    """Node labels that pin pods to ``gpu_type`` (plus the user's own)."""
    vendor = gpu_vendor(plan)
    override = site_name(plan, options.gpu_product, gpu_type, "gpu_product")
    product = launcher_gpu_name(gpu_type, "kubernetes", "gpu_product", override)
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
        "nodeSelector": gpu_node_selector(plan, options, plan.gpu_type),
    }
    _shm(container, spec, options)
    return {"spec": spec}


def _shm(container: dict[str, Any], spec: dict[str, Any], options: PodOptions) -> None:
    """A memory-backed /dev/shm for the container (data loaders and NCCL need more than the default 64 MB)."""
    if options.shm:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def build_jobset(plan: Plan, options: KubernetesOptions) -> dict[str, Any]:
    """A mixed plan's JobSet: per run of nodes of one group and size, an Indexed Job of that many pods whose
    torchrun takes node rank ``offset + JOB_COMPLETION_INDEX``; the first pod (hostname
    ``<name>-<job>-0-0.<name>``, JobSet's DNS hostnames) hosts the static rendezvous."""
    runs = node_runs(plan)
    names = [f"group{run[0].group}-{i}" for i, run in enumerate(runs)]
    longest = max(f"{options.job_name}-{name}-0-{len(run) - 1}" for name, run in zip(names, runs))
    if len(longest) > 63:  # a pod hostname is one DNS label (RFC 1123): 63 characters at most
        room = 63 - (len(longest) - len(options.job_name))
        raise ConfigError(f"job_name {options.job_name!r} makes pod hostnames such as {longest!r} longer than "
                          "63 characters", field="job_name", value=options.job_name,
                          hint=f"use a job_name of at most {max(room, 1)} characters")
    head = f"{options.job_name}-{names[0]}-0-0.{options.job_name}:{DEFAULT_RDZV_PORT}"
    jobs = []
    for name, run in zip(names, runs):
        per_node, first = len(run[0].gpus), run[0].rank
        flags = torchrun_flags(nnodes=len(node_slots(plan)), nproc_per_node=per_node, rdzv_backend="static",
                               node_rank=f"$(({first} + JOB_COMPLETION_INDEX))", rdzv_endpoint=head,
                               rdzv_id=options.job_name)
        # sh expands the node rank; JOB_COMPLETION_INDEX is the pod's index in its Indexed Job
        line = " ".join(["exec", shlex.join(options.torchrun), *flags, shlex.join([options.script, *options.script_args])])
        env = {**recipe_env(plan, run[0].group), **options.env}
        container: dict[str, Any] = {
            "name": CONTAINER_NAME, "image": options.image, "command": ["/bin/sh", "-c", line],
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "resources": {"limits": {GPU_RESOURCE[gpu_vendor(plan)]: per_node}}}
        spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container],
                                "nodeSelector": gpu_node_selector(plan, options, plan.stages[run[0].group].gpu_type)}
        _shm(container, spec, options)
        # a failed pod fails its Job (backoffLimit 0) and JobSet restarts every job: a static group restarts whole
        jobs.append({"name": name, "replicas": 1, "template": {"spec": {
            "parallelism": len(run), "completions": len(run), "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": spec}}}})
    out: dict[str, Any] = {"network": {"enableDNSHostnames": True}, "replicatedJobs": jobs}
    if options.backoff_limit is not None:
        out["failurePolicy"] = {"maxRestarts": options.backoff_limit}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata(options), "spec": out}


def build_kubernetes(plan: Plan, options: KubernetesOptions) -> dict[str, Any]:
    """The PyTorchJob manifest: a Master replica, plus Workers when the plan spans several nodes (a JobSet for
    a plan spanning GPU types)."""
    if plan.grouped:
        return build_jobset(plan, options)
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
    name="kubernetes", summary=("Kubeflow PyTorchJob manifest (Master + Workers, GPU limits, GPU product selector); a "
                                "JobSet with one replicated job per GPU type for mixed plans"),
    output=OutputFormat.YAML, options=KubernetesOptions, build=build_kubernetes)
