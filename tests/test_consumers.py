"""Every launcher's output read by its real consumer (the ``consumers`` extra), on the five plan shapes of
``adapter_plans.FIVE_PLANS``: DeepSpeed's config and engine, Accelerate's config loader and launch validation,
SkyPilot's task parser, Ray Train's ScalingConfig and the snippet itself, kubernetes-validate and the Kubeflow
training (PyTorchJob) and Trainer (TrainJob) models. A consumer that is not installed skips its tests with the
install line. Slurm's real sbatch is in test_consumers_slurm.py; Megatron-LM in benchmarks/check_megatron_args.py.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter_plans import FIVE_PLANS, STAGE_PLANS, cpu_dp2, mixed_small, mixed_uneven, single_gpu
from frenzy_core.adapters import ADAPTERS, emit
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

pytestmark = pytest.mark.consumers

INSTALL = "pip install -e '.[consumers]' (after torch==2.13.0)"
REFUSED = {("accelerate", "tp_pp_nodes"): "vpp=2"}
"""Plans a launcher cannot express, and the word its ConfigError must name (the rest must be accepted)."""


def _need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed: {INSTALL}")


def _plans(launcher: str) -> list[Any]:
    out = []
    for name in FIVE_PLANS:
        marks = [pytest.mark.xfail(raises=ConfigError, strict=True, reason=f"{launcher} cannot express {name}")] \
            if (launcher, name) in REFUSED else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- DeepSpeed ---------------------------------------------------------------------------------------------


class _Mpu:
    """The model-parallel handle DeepSpeed counts data-parallel ranks with (what AutoTP and a PipelineModule
    give it on a real run); on one CPU process it stands in for the plan's dp."""

    def __init__(self, plan: Plan):
        self.dp = plan.parallel.dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.fixture(scope="module")
def one_rank_gloo() -> Any:
    """deepspeed.comm on one gloo rank, so DeepSpeedConfig asks the handle for the data-parallel size."""
    deepspeed = _need("deepspeed")
    import torch.distributed as torch_dist

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port())}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        # a CPU all-reduce kernel DeepSpeed compiles on first use (minutes); gloo does the same job here
        mp.setattr(importlib.import_module("deepspeed.comm.torch"), "build_shm_op", lambda: None)
        deepspeed.init_distributed(dist_backend="gloo")
        yield
        torch_dist.destroy_process_group()


@pytest.mark.parametrize("name", _plans("deepspeed"))
def test_deepspeed_config_accepts(name: str, one_rank_gloo: None) -> None:
    from deepspeed.runtime.config import DeepSpeedConfig

    plan = FIVE_PLANS[name]()
    config = json.loads(emit(plan, "deepspeed"))
    ds = DeepSpeedConfig(config, mpu=_Mpu(plan))
    t = plan.training
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu) == (t.global_batch_size, t.micro_batch_size)
    assert ds.zero_optimization_stage == t.effective_zero_stage
    assert ds.bfloat16_config.enabled


_DS_WORKER = """
import importlib, json, os, sys
import torch, deepspeed
# a CPU all-reduce kernel DeepSpeed compiles on first use (minutes); gloo does the same job here
importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
config = json.loads(open(sys.argv[1]).read())
deepspeed.init_distributed(dist_backend="gloo")
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
for _ in range(engine.gradient_accumulation_steps()):
    x = torch.randn(engine.train_micro_batch_size_per_gpu(), 16, dtype=torch.bfloat16)
    engine.backward(engine(x).float().pow(2).mean())
    engine.step()
out = {"world": engine.world_size, "dp": engine.dp_world_size, "train_batch_size": engine.train_batch_size(),
       "gas": engine.gradient_accumulation_steps(), "steps": engine.global_steps}
open(sys.argv[2] + f".{engine.global_rank}", "w").write(json.dumps(out))
# leave the process group before exit: torch's gloo threads torn down at interpreter exit abort the process
# ("terminate called without an active exception", exit -6) about one run in three
torch.distributed.barrier()
torch.distributed.destroy_process_group()
"""


@pytest.mark.parametrize("make", [single_gpu, cpu_dp2], ids=["1-gpu", "dp2"])
def test_deepspeed_initialize_runs_the_config_on_cpu_gloo_ranks(make: Any, tmp_path: Path) -> None:
    _need("deepspeed")
    plan = make()
    (tmp_path / "ds.json").write_text(emit(plan, "deepspeed"))
    (tmp_path / "worker.py").write_text(_DS_WORKER)
    port = str(_free_port())
    procs = []
    for rank in range(plan.num_gpus):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(plan.num_gpus),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "DS_ACCELERATOR": "cpu"}
        procs.append(subprocess.Popen([sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "ds.json"),
                                       str(tmp_path / "out")], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output[-3000:]
    for rank in range(plan.num_gpus):
        seen = json.loads((tmp_path / f"out.{rank}").read_text())
        assert seen == {"world": plan.num_gpus, "dp": plan.parallel.dp,
                        "train_batch_size": plan.training.global_batch_size,
                        "gas": plan.time.num_microbatches, "steps": 1}


# ---- Accelerate --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _plans("accelerate"))
def test_accelerate_loads_and_launch_validates(name: str, tmp_path: Path) -> None:
    _need("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    plan = FIVE_PLANS[name]()
    path = tmp_path / "accelerate.yaml"
    path.write_text(emit(plan, "accelerate", main_process_ip="10.0.0.1"))
    loaded = ClusterConfig.from_yaml_file(str(path))
    assert (loaded.num_processes, loaded.num_machines) == (plan.num_gpus, len(plan.placement))
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, mp_from_config_flag = _validate_launch_command(args)
    assert (args.num_processes, args.num_machines, args.mixed_precision) == (plan.num_gpus, len(plan.placement),
                                                                             "bf16")
    if loaded.distributed_type.value == "MEGATRON_LM":
        assert args.use_megatron_lm and args.megatron_lm_tp_degree == plan.parallel.tp
        assert args.megatron_lm_expert_model_parallel_size == plan.parallel.ep
    if plan.training.zero_stage == 3:
        assert args.use_fsdp and args.fsdp_sharding_strategy == "FULL_SHARD"


# ---- SkyPilot ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _plans("skypilot"))
def test_skypilot_task_from_yaml(name: str, tmp_path: Path) -> None:
    sky = _need("sky")
    plan = FIVE_PLANS[name]()
    path = tmp_path / "task.yaml"
    path.write_text(emit(plan, "skypilot"))
    task = sky.Task.from_yaml(str(path))
    (resources,) = task.resources
    per_node = len(next(iter(plan.placement.values())))
    assert task.num_nodes == len(plan.placement)
    assert resources.accelerators == {ADAPTERS["skypilot"](plan)["resources"]["accelerators"].popitem()[0]: per_node}
    assert task.envs["FRENZY_TP"] == str(plan.parallel.tp)


# ---- Ray Train ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _plans("ray"))
def test_ray_scaling_config_accepts_the_kwargs(name: str) -> None:
    _need("ray.train")
    from ray.train import ScalingConfig

    plan = FIVE_PLANS[name]()
    scaling = ScalingConfig(**ADAPTERS["ray"](plan)["scaling_config"])
    assert scaling.num_workers == plan.num_gpus and scaling.use_gpu
    assert scaling.total_resources["GPU"] == plan.num_gpus


_RAY_TRAIN = """
import json, os
import ray.train

def train_loop_per_worker(config):
    ctx = ray.train.get_context()
    out = {"world": ctx.get_world_size(), "dp": os.environ["FRENZY_DP"], "gas": config["gradient_accumulation_steps"]}
    open(os.path.join(os.environ["OUT_DIR"], f"rank{ctx.get_world_rank()}"), "w").write(json.dumps(out))
"""


def test_ray_snippet_runs_on_cpu(tmp_path: Path) -> None:
    """The emitted snippet itself, with use_gpu=False, on a local CPU Ray (about a minute on 2 cores)."""
    _need("ray.train")
    plan = cpu_dp2()
    (tmp_path / "frenzy_ray_train.py").write_text(_RAY_TRAIN)
    snippet = emit(plan, "ray", use_gpu=False, train_module="frenzy_ray_train")
    (tmp_path / "run.py").write_text(snippet.replace("ray.init(", "ray.init(num_cpus=2, include_dashboard=False, "))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OUT_DIR": str(tmp_path), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py")], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(plan.num_gpus):
        seen = json.loads((tmp_path / f"rank{rank}").read_text())
        assert seen == {"world": 2, "dp": "2", "gas": plan.time.num_microbatches}


# ---- Kubernetes: PyTorchJob and TrainJob ------------------------------------------------------------------


def _pod(job_name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": job_name}, "spec": spec}


@pytest.mark.parametrize("name", _plans("kubernetes"))
def test_pytorchjob_pods_validate_and_the_kubeflow_sdk_reads_the_job(name: str) -> None:
    kubernetes_validate = _need("kubernetes_validate")
    _need("kubeflow.training")
    from kubeflow.training import ApiClient

    plan = FIVE_PLANS[name]()
    manifest = yaml.safe_load(emit(plan, "kubernetes"))
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():
        kubernetes_validate.validate(_pod("frenzy-train", replica["template"]["spec"]), "1.30", strict=True)

    class _Response:
        data = json.dumps(manifest)

    job = ApiClient().deserialize(_Response(), "KubeflowOrgV1PyTorchJob")
    for replica in manifest["spec"]["pytorchReplicaSpecs"].values():  # the SDK writes quantities as strings
        limits = replica["template"]["spec"]["containers"][0]["resources"]["limits"]
        limits.update({k: str(v) for k, v in limits.items()})
    assert ApiClient().sanitize_for_serialization(job) == manifest  # nothing unknown was dropped
    assert job.spec.run_policy.clean_pod_policy == "None"


@pytest.mark.parametrize("name", _plans("kubeflow-trainjob"))
def test_trainjob_matches_the_trainer_api_models(name: str) -> None:
    _need("kubeflow_trainer_api")
    kubernetes_validate = _need("kubernetes_validate")
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    plan = FIVE_PLANS[name]()
    manifest = yaml.safe_load(emit(plan, "kubeflow-trainjob"))
    job = TrainerV1alpha1TrainJob.from_dict(manifest)
    assert job is not None
    assert job.to_dict() == manifest  # the models dropped no unknown key
    assert (job.spec.trainer.num_nodes, job.spec.trainer.num_proc_per_node) == (
        len(plan.placement), len(next(iter(plan.placement.values()))))
    pod = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod_spec = pod["template"]["spec"]["template"]["spec"]
    full = {**pod_spec, "containers": [{**pod_spec["containers"][0], "image": manifest["spec"]["trainer"]["image"]}]}
    kubernetes_validate.validate(_pod("frenzy-train", full), "1.30", strict=True)


@pytest.mark.parametrize("make", [mixed_small, mixed_uneven, *STAGE_PLANS.values()],
                         ids=["mixed_small", "mixed_uneven", *STAGE_PLANS])
def test_a_mixed_plans_jobset_matches_the_jobset_models_and_its_jobs_validate(make: Any) -> None:
    """A mixed plan's kubernetes output is a JobSet: JobSet's own models (shipped with kubeflow-trainer-api,
    which embeds them) drop nothing, and every replicated job's template is a strict batch/v1 Job."""
    _need("kubeflow_trainer_api")
    kubernetes_validate = _need("kubernetes_validate")
    from kubeflow_trainer_api.models import JobsetV1alpha2JobSet

    plan = make()
    manifest = yaml.safe_load(emit(plan, "kubernetes"))
    job_set = JobsetV1alpha2JobSet.from_dict(manifest)
    assert job_set is not None and job_set.to_dict() == manifest
    # one pod per node of each group (two pipeline stages on one node are two pods)
    assert sum(j.template.spec.parallelism for j in job_set.spec.replicated_jobs) == sum(len(s.placement)
                                                                                         for s in plan.stages)
    for job in manifest["spec"]["replicatedJobs"]:
        kubernetes_validate.validate({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job["name"]},
                                      "spec": job["template"]["spec"]}, "1.30", strict=True)


@pytest.mark.parametrize("name", ["stage_uneven", "stage_shared_node"])
def test_torchtitans_own_command_line_rules_read_the_pipeline_split(name: str) -> None:
    """torchtitan 0.3.0's ConfigManager rules (its comma-separated list[str] rule) and tyro parse the emitted
    --parallelism.* tokens into its ParallelismConfig: the split, degree, schedule and tp arrive as planned.
    torchtitan is installed without its dependencies (.ci/run): its config classes need only tyro."""
    tyro = _need("tyro")
    manager = pytest.importorskip("torchtitan.config.manager", reason="pip install --no-deps torchtitan==0.3.0 tyro")
    from torchtitan.config import ParallelismConfig

    from frenzy_core.adapters.torchtitan import module_fqns_per_model_part, torchtitan_args

    manager.ConfigManager()  # registers torchtitan's tyro rules on its registry
    plan = STAGE_PLANS[name]()
    config = tyro.cli(ParallelismConfig, args=[a.replace("--parallelism.", "--") for a in torchtitan_args(plan)],
                      registry=manager.custom_registry)
    assert config.module_fqns_per_model_part == module_fqns_per_model_part(plan)
    assert (config.pipeline_parallel_degree, config.tensor_parallel_degree) == (plan.parallel.pp, plan.stages[0].tp)
    assert config.pipeline_parallel_schedule == "1F1B"
