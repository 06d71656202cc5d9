"""torchrun adapter: per-node command lines, checked with torchrun's own parser and by a real 2-rank CPU run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adapter_plans import GPT2, cpu_dp2, make_plan, mixed_small, mixed_uneven, multi_node_dp, single_gpu, tp_pp_nodes, uneven_dp3
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from local_torchrun import free_port, run_lines

PROBE = Path(__file__).resolve().parent / "fixtures" / "adapters" / "rank_probe.py"
torchrun = ADAPTERS["torchrun"]


def _parse(argv: list[str]) -> Any:
    """torchrun's own argument parser applied to the flags after the launcher prefix."""
    run = pytest.importorskip("torch.distributed.run")
    return run.get_args_parser().parse_args(argv[1:])


def test_single_gpu() -> None:
    data = torchrun(single_gpu())
    (node,) = data["nodes"]
    assert (data["nnodes"], data["world_size"], data["rdzv_endpoint"]) == (1, 1, "127.0.0.1:29500")
    assert node["env"]["CUDA_VISIBLE_DEVICES"] == "3"  # the GPU the placement gave
    assert node["env"]["FRENZY_MICRO_BATCH_SIZE"] == "4"
    assert node["env"]["FRENZY_GRAD_ACCUM_STEPS"] == "4"  # 16 / (4 x 1)
    args = _parse(node["argv"])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("1", "1", "static")
    assert (args.training_script, args.training_script_args) == ("train.py", [])


def test_multi_node_data_parallel() -> None:
    data = torchrun(multi_node_dp(), hosts={"node:0": "gpu-a", "node:1": "gpu-b"}, script="fit.py",
                    script_args=["--epochs", "1"], rdzv_port=6000, rdzv_id="job7")
    assert data["rdzv_endpoint"] == "gpu-a:6000"
    for rank, (node, host) in enumerate(zip(data["nodes"], ("gpu-a", "gpu-b"))):
        assert (node["node_rank"], node["host"], node["nproc_per_node"]) == (rank, host, 8)
        args = _parse(node["argv"])
        assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "8", rank)
        assert (args.rdzv_endpoint, args.rdzv_id) == ("gpu-a:6000", "job7")
        assert (args.training_script, args.training_script_args) == ("fit.py", ["--epochs", "1"])
        assert node["env"]["FRENZY_GRAD_ACCUM_STEPS"] == "4"  # 128 / (2 x 16)
        assert node["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_tp_pp_across_nodes() -> None:
    data = torchrun(tp_pp_nodes())
    assert data["rdzv_endpoint"] == "node-2:29500"  # first node of the placement hosts the rendezvous
    env = data["nodes"][1]["env"]
    assert (env["FRENZY_TP"], env["FRENZY_PP"], env["FRENZY_VPP"], env["FRENZY_DP"]) == ("4", "2", "2", "2")
    assert env["FRENZY_GRAD_ACCUM_STEPS"] == "16"  # 32 / (1 x 2)
    assert [n["node"] for n in data["nodes"]] == ["node:2", "node:5"]


def test_uneven_placement_gets_per_node_process_counts() -> None:
    plan = make_plan(GPT2, "a100-80gb", {"node:0": list(range(8)), "node:1": [4, 5, 6, 7]},
                     ParallelConfig(dp=12), TrainingConfig(seq_len=512))
    nodes = torchrun(plan)["nodes"]
    assert [n["nproc_per_node"] for n in nodes] == [8, 4]
    assert nodes[1]["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


def test_amd_plans_restrict_devices_with_hip_visible_devices() -> None:
    plan = make_plan(GPT2, "mi300x", {"node:0": [0, 1]}, ParallelConfig(dp=2), TrainingConfig(seq_len=512))
    env = torchrun(plan)["nodes"][0]["env"]
    assert env["HIP_VISIBLE_DEVICES"] == "0,1" and "CUDA_VISIBLE_DEVICES" not in env


def test_command_line_is_the_env_and_argv_quoted() -> None:
    node = torchrun(single_gpu(), env={"NOTE": "two words"}, script_args=["--name", "a b"])["nodes"][0]
    tokens = shlex.split(node["command"])
    assigns = dict(t.split("=", 1) for t in tokens[: len(node["env"])])
    assert assigns == node["env"] and assigns["NOTE"] == "two words"
    assert tokens[len(node["env"]):] == node["argv"]


def test_hosts_must_name_plan_nodes() -> None:
    with pytest.raises(ConfigError, match="node:9") as err:
        torchrun(multi_node_dp(), hosts={"node:9": "gpu-z"})
    assert "node:0, node:1" in str(err.value)


def test_bad_env_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="env"):
        torchrun(single_gpu(), env={"NOT VALID": "x"})


def test_text_has_one_command_per_node() -> None:
    text = torchrun.emit(multi_node_dp())
    commands = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(commands) == 2 and all("torchrun --nnodes=2" in c for c in commands)


def test_emitted_command_runs_two_ranks_on_cpu(tmp_path: Path) -> None:
    """Run the emitted torchrun command (gloo, 2 processes, 1 node): every rank sees what the plan prescribes."""
    pytest.importorskip("torch")
    plan = cpu_dp2()
    data = torchrun(plan, torchrun=[sys.executable, "-m", "torch.distributed.run"], script=str(PROBE),
                    script_args=[str(tmp_path)], rdzv_host="127.0.0.1", rdzv_port=free_port(),
                    rdzv_id="frenzy-test")
    (node,) = data["nodes"]
    env = {**os.environ, **node["env"], "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(node["argv"], env=env, check=False, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[:2000] + "\n...\n" + proc.stderr[-2000:]
    records = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [r["rank"] for r in records] == [0, 1]
    for r in records:
        assert r["world_size"] == 2 and r["local_rank"] == r["rank"]
        assert (r["micro_batch_size"], r["grad_accum_steps"]) == (2, 3)  # global 12 = 2 x 3 x dp 2
        assert r["global_samples"] == 12
        assert r["weights_in_sync"] and r["matches_full_batch"]
        assert r["visible_devices"] == "0,1"



def test_mixed_plan_lines_carry_each_nodes_group() -> None:
    plan = mixed_uneven()
    data = torchrun(plan)
    assert data["mixed"] and data["world_size"] == plan.num_gpus
    first = 0
    for node, (name, gpus) in zip(data["nodes"], ((n, g) for s in plan.stages for n, g in s.placement.items())):
        stage = plan.stages[node["group"]]
        assert (node["node"], node["gpus"], node["first_rank"]) == (name, gpus, first)
        assert node["env"]["FRENZY_GPU_TYPE"] == stage.gpu_type
        assert node["env"]["FRENZY_GRAD_ACCUM_STEPS"] == str(stage.micro_batches)
        args = _parse(node["argv"])
        assert (args.node_rank, args.nproc_per_node, args.rdzv_backend) == (data["nodes"].index(node), str(len(gpus)),
                                                                             "static")
        first += len(gpus)
    assert "group 1 (h100-sxm" in torchrun.emit(plan)


def test_mixed_plans_need_the_static_rendezvous() -> None:
    with pytest.raises(ConfigError, match="static rendezvous") as err:
        torchrun(mixed_small(), rdzv_backend="c10d")
    assert err.value.field == "rdzv_backend"


@pytest.mark.slow  # three ranks and two agents start torch: tens of seconds; CI runs the Slurm hetjob of this plan
@pytest.mark.parametrize("make", [mixed_small, uneven_dp3], ids=["mixed_types", "uneven_one_type"])
def test_a_grouped_plans_lines_run_one_data_parallel_step_equal_to_the_full_batch(tmp_path: Path, make: Any) -> None:
    """Both groups' emitted lines started on this host (gloo, CPU): 3 ranks in one process group, each with its
    group's micro-batch count and samples, and the step equals one full-batch step (the loss-scaling contract):
    replica groups of two types, and ranks of one type that differ by one micro-batch (two lines for one node)."""
    pytest.importorskip("torch")
    plan = make()
    records = run_lines(plan, PROBE, tmp_path)
    assert [r["rank"] for r in records] == list(range(plan.num_gpus))
    ranks = [(str(g), s) for g, s in enumerate(plan.stages) for _ in range(s.num_gpus)]
    for r, (group, stage) in zip(records, ranks):
        assert (r["group"], r["gpu_type"], r["grad_accum_steps"]) == (group, stage.gpu_type, stage.micro_batches)
        assert r["global_samples"] == plan.training.global_batch_size
        assert r["weights_in_sync"] and r["matches_full_batch"]
