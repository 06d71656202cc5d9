"""skypilot adapter: a task YAML with the plan's accelerators and nodes; its ``run`` passes ``bash -n`` and, run
with SkyPilot's variables and a stub torchrun, starts torchrun as the plan prescribes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter_plans import GPT2, make_plan, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

skypilot = ADAPTERS["skypilot"]
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _task(plan: Plan, **options: Any) -> dict[str, Any]:
    task = yaml.safe_load(skypilot.emit(plan, **options))
    assert task == skypilot(plan, **options)
    assert all(isinstance(v, str) for v in task["envs"].values())
    return task  # type: ignore[no-any-return]


def _run(task: dict[str, Any], tmp_path: Path, node_rank: int) -> list[str]:
    """Run ``run`` as SkyPilot would on node ``node_rank`` (task envs + SKYPILOT_* set), torchrun stubbed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "torchrun"
    stub.write_text(f"#!/bin/bash\nprintf '%s\\n' \"$@\" > {tmp_path}/argv\n")
    stub.chmod(0o755)
    nodes = task["num_nodes"]
    (count,) = task["resources"]["accelerators"].values()
    env = {**os.environ, **task["envs"], "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "SKYPILOT_NODE_IPS": "\n".join(f"10.0.0.{i + 1}" for i in range(nodes)),
           "SKYPILOT_NUM_NODES": str(nodes), "SKYPILOT_NODE_RANK": str(node_rank),
           "SKYPILOT_NUM_GPUS_PER_NODE": str(count), "SKYPILOT_TASK_ID": "sky-1"}
    script = tmp_path / "run.sh"
    script.write_text(task["run"])
    assert subprocess.run([BASH, "-n", str(script)], check=False).returncode == 0  # type: ignore[list-item]
    proc = subprocess.run([BASH, str(script)], env=env, check=False, capture_output=True, text=True, timeout=30)  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "argv").read_text().splitlines()


def test_single_gpu(tmp_path: Path) -> None:
    task = _task(single_gpu())
    assert (task["num_nodes"], task["resources"]) == (1, {"accelerators": {"A100-80GB": 1}})
    assert task["envs"]["FRENZY_MICRO_BATCH_SIZE"] == "4"
    argv = _run(task, tmp_path, 0)
    assert argv[:3] == ["--nnodes=1", "--nproc-per-node=1", "--node-rank=0"]


def test_multi_node_data_parallel(tmp_path: Path) -> None:
    task = _task(multi_node_dp(), script="fit.py", script_args=["--lr", "3e-4"], setup="pip install -e .",
                 workdir=".")
    assert (task["num_nodes"], task["resources"]["accelerators"]) == (2, {"A100-80GB": 8})
    assert (task["setup"], task["workdir"]) == ("pip install -e .", ".")
    argv = _run(task, tmp_path, 1)
    assert argv == ["--nnodes=2", "--nproc-per-node=8", "--node-rank=1", "--rdzv-backend=static",
                    "--rdzv-endpoint=10.0.0.1:29500", "--rdzv-id=sky-1", "fit.py", "--lr", "3e-4"]


def test_tp_pp_across_nodes(tmp_path: Path) -> None:
    task = _task(tp_pp_nodes())
    assert task["resources"]["accelerators"] == {"H100": 8}
    assert (task["envs"]["FRENZY_TP"], task["envs"]["FRENZY_PP"]) == ("4", "2")
    run = pytest.importorskip("torch.distributed.run")
    args = run.get_args_parser().parse_args(_run(task, tmp_path, 0))
    assert (args.nnodes, args.nproc_per_node, args.rdzv_endpoint) == ("2", "8", "10.0.0.1:29500")


def test_gpu_without_skypilot_name_needs_accelerator() -> None:
    plan = make_plan(GPT2, "h100-pcie", {"node:0": [0]}, ParallelConfig(), TrainingConfig(seq_len=512))
    with pytest.raises(ConfigError, match="accelerator="):
        skypilot(plan)
    assert skypilot(plan, accelerator="H100-PCIE")["resources"] == {"accelerators": {"H100-PCIE": 1}}
