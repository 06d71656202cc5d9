"""kubernetes adapter: a PyTorchJob manifest that parses with the safe loader and validates against the schema in
tests/fixtures/k8s/ (a subset of the training-operator CRD and core/v1 PodSpec), checked by a small validator."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter_plans import GPT2, make_plan, mixed_small, mixed_uneven, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

kubernetes = ADAPTERS["kubernetes"]
SCHEMA = json.loads((Path(__file__).resolve().parent / "fixtures" / "k8s" / "pytorchjob.schema.json").read_text())

_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "boolean": bool}


def schema_errors(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """JSON-Schema keywords the fixture uses: $ref, anyOf, const, enum, type, pattern, minLength, maxLength,
    minimum, required, properties, additionalProperties, propertyNames, items, minItems."""
    if "$ref" in schema:
        return schema_errors(value, SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]], where)
    if "anyOf" in schema:
        if all(schema_errors(value, option, where) for option in schema["anyOf"]):
            return [f"{where}: {value!r} matches no option"]
        return []
    errors: list[str] = []
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return errors + [f"{where}: {value!r} is not an integer"]
    elif kind is not None and not isinstance(value, _TYPES[kind]):
        return errors + [f"{where}: {type(value).__name__} is not {kind}"]
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", len(value)):
            errors.append(f"{where}: {value!r} has a bad length")
    if isinstance(value, int) and "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: {value} < {schema['minimum']}")
    if isinstance(value, dict):
        errors += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        for key, item in value.items():
            if "propertyNames" in schema:
                errors += schema_errors(key, schema["propertyNames"], f"{where}.<key {key}>")
            if key in schema.get("properties", {}):
                errors += schema_errors(item, schema["properties"][key], f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{where}: unexpected field {key!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(item, schema["additionalProperties"], f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{where}[{i}]")
    return errors


def _manifest(plan: Plan, **options: Any) -> dict[str, Any]:
    text = kubernetes.emit(plan, **options)
    assert "&id" not in text and "*id" not in text  # no YAML anchors/aliases
    manifest = yaml.safe_load(text)
    assert manifest == kubernetes(plan, **options)
    assert schema_errors(manifest, SCHEMA) == []
    return manifest  # type: ignore[no-any-return]


def _container(manifest: dict[str, Any], group: str = "Master") -> dict[str, Any]:
    return manifest["spec"]["pytorchReplicaSpecs"][group]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def test_validator_rejects_what_the_api_server_would() -> None:
    good = kubernetes(multi_node_dp())
    broken: list[tuple[str, Any]] = [
        ("metadata.name", "Frenzy_Train"),
        ("spec.pytorchReplicaSpecs.Chief", {"replicas": 1, "template": {"spec": {"containers": []}}}),
        ("spec.pytorchReplicaSpecs.Master.replicas", "1"),
        ("spec.pytorchReplicaSpecs.Master.restartPolicy", "Sometimes"),
        ("spec.pytorchReplicaSpecs.Master.template.spec.nodeSelector", {"nvidia.com/gpu.product": "A100 80GB"}),
        ("spec.pytorchReplicaSpecs.Master.template.spec.containers", []),
        ("spec.pytorchReplicaSpecs.Master.template.spec.nodeSelectr", {}),
        ("spec.nprocPerNode", 8),
    ]
    for dotted, bad in broken:
        manifest = copy.deepcopy(good)
        *parents, last = dotted.split(".")
        node = manifest
        for key in parents:
            node = node[key]
        node[last] = bad
        assert schema_errors(manifest, SCHEMA), dotted
    manifest = copy.deepcopy(good)
    _container(manifest)["resources"]["limits"]["nvidia.com/gpu"] = "eight"
    assert schema_errors(manifest, SCHEMA)
    quantity = {"$ref": "#/$defs/quantity"}
    assert [q for q in (8, "8", "16Gi", "500m") if schema_errors(q, quantity)] == []


def test_single_gpu() -> None:
    manifest = _manifest(single_gpu())
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"] and replicas["Master"]["replicas"] == 1
    container = _container(manifest)
    assert container["name"] == "pytorch"  # the training operator looks the container up by this name
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert replicas["Master"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_multi_node_has_master_and_workers() -> None:
    manifest = _manifest(multi_node_dp(), job_name="gpt2-dp", namespace="ml", image="nvcr.io/nvidia/pytorch:24.05-py3")
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    assert manifest["spec"]["nprocPerNode"] == "8"
    assert manifest["metadata"] == {"name": "gpt2-dp", "namespace": "ml"}
    for group in ("Master", "Worker"):
        container = _container(manifest, group)
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["FRENZY_GRAD_ACCUM_STEPS"] == "4"
        assert container["command"] == ["torchrun"]
        assert container["args"][:2] == ["--nnodes=2", "--nproc-per-node=8"]
        assert "--rdzv-endpoint=$(MASTER_ADDR):$(MASTER_PORT)" in container["args"]


def test_tp_pp_across_nodes_torchrun_args_parse() -> None:
    manifest = _manifest(tp_pp_nodes(), script="pretrain.py", script_args=["--tp", "4"])
    args = _container(manifest, "Worker")["args"]
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    run = pytest.importorskip("torch.distributed.run")
    parsed = run.get_args_parser().parse_args(args)
    assert (parsed.nnodes, parsed.nproc_per_node, parsed.training_script) == ("2", "8", "pretrain.py")
    assert parsed.training_script_args == ["--tp", "4"]


def test_amd_uses_amd_resource_and_label() -> None:
    plan = make_plan(GPT2, "mi300x", {"node:0": list(range(8))}, ParallelConfig(dp=8), TrainingConfig(seq_len=512))
    manifest = _manifest(plan)
    spec = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 8}
    assert spec["nodeSelector"] == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}


def test_unknown_product_needs_an_override() -> None:
    plan = make_plan(GPT2, "h800", {"node:0": [0]}, ParallelConfig(), TrainingConfig(seq_len=512))
    with pytest.raises(ConfigError, match="gpu_product="):
        kubernetes(plan)
    manifest = _manifest(plan, gpu_product="NVIDIA-H800", node_selector={"pool": "train"})
    assert manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H800", "pool": "train"}


def test_bad_job_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="job_name"):
        kubernetes(single_gpu(), job_name="Train_Job")


def test_a_mixed_plan_is_a_jobset_with_an_indexed_job_per_group_and_node_size() -> None:
    plan = mixed_uneven()
    manifest = kubernetes(plan, job_name="mixed")
    assert (manifest["apiVersion"], manifest["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    jobs = manifest["spec"]["replicatedJobs"]
    runs = [(s, len(g)) for s in plan.stages for g in s.placement.values()]  # one node per run in this plan
    assert len(jobs) == len(runs)
    head = f"mixed-{jobs[0]['name']}-0-0.mixed:29500"
    for rank, (job, (stage, per_node)) in enumerate(zip(jobs, runs)):
        spec = job["template"]["spec"]
        assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (1, 1, "Indexed")
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": per_node}
        product = {"a100-80gb": "NVIDIA-A100-SXM4-80GB", "h100-sxm": "NVIDIA-H100-80GB-HBM3"}[stage.gpu_type]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": product}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert (env["FRENZY_GPU_TYPE"], env["FRENZY_GRAD_ACCUM_STEPS"]) == (stage.gpu_type, str(stage.micro_batches))
        line = container["command"][2]
        assert f"--node-rank=$(({rank} + JOB_COMPLETION_INDEX))" in line and f"--rdzv-endpoint={head}" in line
        assert f"--nproc-per-node={per_node} --" in line and f"--nnodes={len(runs)} " in line


def test_a_jobset_name_too_long_for_its_pod_hostnames_is_refused() -> None:
    with pytest.raises(ConfigError, match="63 characters") as err:
        kubernetes(mixed_small(), job_name="j" * 60)
    assert err.value.field == "job_name"


def test_mixed_plans_across_vendors_are_refused() -> None:
    plan = mixed_small()
    amd = plan.stages[1].model_copy(update={"gpu_type": "mi300x"})
    other = plan.model_copy(update={"stages": (plan.stages[0], amd), "gpu_types": (plan.gpu_types[0], "mi300x")})
    with pytest.raises(ConfigError, match="NCCL and RCCL"):
        kubernetes(other)
