"""The slurm adapter's script submitted with a real ``sbatch`` to a single-host Slurm cluster on 127.0.0.1.

The fixture starts Debian's slurm-wlm daemons (slurmctld and one slurmd per virtual node, auth/none, each node
with 2 fake GPUs as gres) from a config in a temporary folder, submits the emitted script, waits for COMPLETED
and checks that every planned rank ran and joined one process group. Skipped, with the reason, where the Slurm
binaries are missing (``apt-get install slurm-wlm``; .ci/run installs it) or the daemons do not come up.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter_plans import GPT2, make_plan, mixed_small, stage_uneven
from frenzy_core.adapters import emit
from frenzy_core.adapters.slurm import SlurmComponent, SlurmOptions, slurm_script
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.planning.plan import Plan

pytestmark = pytest.mark.consumers

GPUS_PER_NODE = 2
CPUS_PER_NODE = 4
PORTS = {"ctld": 16817, "slurmd": 16818}  # above the well-known range; nodes get 16821, 16822, ...
FEATURES = ("a100x", "h100x")
"""Node i's feature: the GPU type a mixed plan's hetjob components ask for with --constraint."""

_TRAIN = """
import os, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
open(os.path.join(os.environ["OUT_DIR"], f"rank{rank}"), "w").write(f"{world} {os.environ['FRENZY_DP']}")
open(os.path.join(os.environ["OUT_DIR"], f"env{rank}"), "w").write(
    "\\n".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith(("FRENZY_", "SLURMD_NODENAME"))))
dist.barrier()
dist.destroy_process_group()
"""


def _loopback_names(count: int) -> list[str]:
    """Host names /etc/hosts maps to 127.x (each virtual node needs one its torchrun can resolve)."""
    names: list[str] = []
    for line in Path("/etc/hosts").read_text().splitlines():
        fields = line.split("#")[0].split()
        if fields and fields[0].startswith("127."):
            # not "localhost": Slurm resolves a node of that name to the machine's own host name
            names += [n for n in fields[1:] if re.fullmatch(r"[a-z][a-z0-9-]*", n) and n not in (*names, "localhost")]
    return names[:count]


def _config(root: Path, nodes: list[str]) -> str:
    lines = [
        "ClusterName=frenzytest", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={PORTS['ctld']}",
        f"SlurmdPort={PORTS['slurmd']}", "AuthType=auth/none", "CredType=cred/none", "SlurmUser=root",
        "SlurmdUser=root", f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/ctld.log", f"SlurmdLogFile={root}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "GresTypes=gpu", "MpiDefault=none",
        "SlurmdParameters=config_overrides",  # virtual nodes report the configured CPUs and GPUs
        "ReturnToService=2", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MinJobAge=600",
    ]
    for i, node in enumerate(nodes):
        lines.append(f"NodeName={node} NodeHostname=127.0.0.1 NodeAddr=127.0.0.1 Port={16821 + i} "
                     f"CPUs={CPUS_PER_NODE} RealMemory=2000 Gres=gpu:a100:{GPUS_PER_NODE} Feature={FEATURES[i]}")
    lines.append(f"PartitionName=test Nodes={','.join(nodes)} Default=YES MaxTime=10 State=UP")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A two-node Slurm on this host; yields the environment that points sbatch and squeue at it."""
    missing = [b for b in ("slurmctld", "slurmd", "sbatch", "scontrol") if shutil.which(b) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm")
    nodes = _loopback_names(2)
    if len(nodes) < 2:
        pytest.skip(f"/etc/hosts names fewer than 2 loopback hosts ({nodes}) for the virtual nodes")
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("state", *(f"spool/{n}" for n in nodes)):
        (root / sub).mkdir(parents=True)
    (root / "slurm.conf").write_text(_config(root, nodes))
    # gres/gpu needs device files; /dev/null and /dev/zero stand in for two GPUs per node.
    (root / "gres.conf").write_text(f"NodeName={','.join(nodes)} Name=gpu Type=a100 File=/dev/null,/dev/zero\n")
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    started = [subprocess.Popen(["slurmctld", "-D", "-c", "-i"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)]
    time.sleep(1)
    started += [subprocess.Popen(["slurmd", "-D", "-N", n], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for n in nodes]
    try:
        deadline, state = time.monotonic() + 30, ""
        while time.monotonic() < deadline and all(p.poll() is None for p in started):
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True,
                                   timeout=10).stdout
            if state.split() and set(state.split()) == {"idle"}:
                break
            time.sleep(0.5)
        else:
            pytest.skip(f"the Slurm daemons did not come up (sinfo: {state.strip()!r}; logs in {root})")
        yield env
    finally:
        for proc in started:  # only the daemons this fixture started, by their process id
            proc.terminate()
        for proc in started:
            proc.wait(timeout=30)


def _run_to_completion(script: str, env: dict[str, str], tmp_path: Path) -> None:
    """sbatch the script and wait: it must end COMPLETED (else the assertion shows the end of its log)."""
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    job = subprocess.run(["sbatch", "--parsable", "-o", str(tmp_path / "job.out"), str(path)], env=env,
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    state = "TIMEOUT"
    for _ in range(240):
        info = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True).stdout
        found = re.search(r"JobState=(\S+)", info)
        if found and found.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            state = found.group(1)
            break
        time.sleep(0.5)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert state == "COMPLETED", log[-3000:]


def _typed_script(plan: Plan, names: dict[str, str], tmp_path: Path, out: Path) -> str:
    """The emitted script of a plan over GPU types, each type's components constrained to its node feature."""
    return emit(plan, "slurm", gpu_request="constraint", gpu_type_name=names, cpus_per_gpu=1, partition="test",
                time="00:05:00", torchrun=[sys.executable, "-m", "torch.distributed.run"],
                script=str(tmp_path / "train.py"), env={"OUT_DIR": str(out)})


def _ranks(out: Path) -> list[str]:
    return sorted(p.read_text() for p in out.glob("rank*"))


def _envs(out: Path) -> dict[int, dict[str, str]]:
    """Global rank -> the FRENZY_* variables (and the Slurm node name) that rank saw."""
    return {int(p.name.removeprefix("env")): dict(line.split("=", 1) for line in p.read_text().splitlines())
            for p in out.glob("env*")}


def test_sbatch_of_the_emitted_script_completes_with_every_planned_rank(slurm_cluster: dict[str, str],
                                                                        tmp_path: Path) -> None:
    placement = {"node:0": [0, 1], "node:1": [0, 1]}
    plan = make_plan(GPT2, "a100-80gb", placement, ParallelConfig(dp=4),
                     TrainingConfig(seq_len=128, micro_batch_size=1, global_batch_size=8))
    (tmp_path / "train.py").write_text(_TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    script = emit(plan, "slurm", gpu_type_name="a100", cpus_per_gpu=1, partition="test", time="00:05:00",
                  torchrun=[sys.executable, "-m", "torch.distributed.run"], script=str(tmp_path / "train.py"),
                  env={"OUT_DIR": str(out)})
    _run_to_completion(script, slurm_cluster, tmp_path)
    assert _ranks(out) == ["4 4"] * plan.num_gpus  # 4 ranks, one group of 4, dp=4 from the plan


def test_heterogeneous_job_runs_one_torchrun_group_across_components(slurm_cluster: dict[str, str],
                                                                      tmp_path: Path) -> None:
    """Two components (1 node with 2 GPUs, 1 node with 1 GPU) as one hetjob: 3 ranks in one process group."""
    (tmp_path / "train.py").write_text(_TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    options = SlurmOptions(partition="test", time="00:05:00", torchrun=[sys.executable, "-m", "torch.distributed.run"],
                           script=str(tmp_path / "train.py"))
    parts = [SlurmComponent("a100", nodes=1, gpus_per_node=2, cpus_per_task=2),
             SlurmComponent("a100", nodes=1, gpus_per_node=1, cpus_per_task=1)]
    script = slurm_script(parts, {"FRENZY_DP": "3", "OUT_DIR": str(out)}, options)["script"]
    _run_to_completion(script, slurm_cluster, tmp_path)
    assert _ranks(out) == ["3 3"] * 3


def test_a_mixed_plan_runs_as_a_heterogeneous_job_with_each_group_on_its_type(slurm_cluster: dict[str, str],
                                                                              tmp_path: Path) -> None:
    """The emitted hetjob of a mixed plan (an A100 group of 2 ranks, an H100 group of 1): each component lands on
    the node with its type's feature, the ranks form one process group, and every rank sees its own group's
    variables at the global ranks the plan gives that group."""
    plan = mixed_small()
    (tmp_path / "train.py").write_text(_TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    names = dict(zip(("a100-80gb", "h100-sxm"), FEATURES))
    script = _typed_script(plan, names, tmp_path, out)
    _run_to_completion(script, slurm_cluster, tmp_path)
    assert _ranks(out) == [f"{plan.num_gpus} {plan.parallel.dp}"] * plan.num_gpus
    nodes = _loopback_names(2)
    envs = _envs(out)
    for group, stage in enumerate(plan.stages):
        first = sum(s.num_gpus for s in plan.stages[:group])
        for rank in range(first, first + stage.num_gpus):
            seen = envs[rank]
            assert (seen["FRENZY_GROUP"], seen["FRENZY_GPU_TYPE"], seen["FRENZY_GRAD_ACCUM_STEPS"]) == (
                str(group), stage.gpu_type, str(stage.micro_batches))
            assert seen["SLURMD_NODENAME"] == nodes[FEATURES.index(names[stage.gpu_type])]


def test_sbatch_test_only_accepts_a_pipeline_over_two_types(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    """sbatch --test-only (Slurm validates the script and finds where each component would start, runs nothing):
    the fast CI check of the form (a) hetjob whose real run follows (slow)."""
    plan = stage_uneven()
    names = dict(zip(plan.gpu_types, FEATURES))
    script = emit(plan, "slurm", gpu_request="constraint", gpu_type_name=names, cpus_per_gpu=1, partition="test",
                  time="00:05:00")
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    proc = subprocess.run(["sbatch", "--test-only", str(path)], env=slurm_cluster, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stderr
    # each stage's component can only go to the node with its type's feature: the job spans both
    assert all(node in proc.stderr for node in _loopback_names(2)), proc.stderr


@pytest.mark.slow  # about a minute (4 ranks start torch on 2 cores); CI runs the form (b) hetjob above, the
# --test-only check above, and tests/test_adapters_stages.py checks this script's components and stage variables
def test_a_pipeline_over_two_types_runs_as_a_heterogeneous_job_with_each_stage_on_its_type(
        slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    """The emitted hetjob of a form (a) plan (stage 0: 5 layers on 2 A10G, stage 1: 3 layers on 2 L4; dp 2): each
    component lands on the node with its stage's type, the 4 ranks form one process group, and every rank sees
    its own stage's variables at the global ranks the plan gives that stage."""
    plan = stage_uneven()
    (tmp_path / "train.py").write_text(_TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    names = dict(zip(plan.gpu_types, FEATURES))
    script = _typed_script(plan, names, tmp_path, out)
    _run_to_completion(script, slurm_cluster, tmp_path)
    assert _ranks(out) == [f"{plan.num_gpus} {plan.parallel.dp}"] * plan.num_gpus
    nodes = _loopback_names(2)
    envs = _envs(out)
    for i, stage in enumerate(plan.stages):
        first = sum(s.num_gpus for s in plan.stages[:i])
        for rank in range(first, first + stage.num_gpus):
            seen = envs[rank]
            assert (seen["FRENZY_STAGE"], seen["FRENZY_GPU_TYPE"], seen["FRENZY_TP"]) == (str(i), stage.gpu_type,
                                                                                         str(stage.tp))
            assert (seen["FRENZY_STAGE_FIRST_LAYER"], seen["FRENZY_STAGE_NUM_LAYERS"], seen["FRENZY_STAGE_FIRST_RANK"]) == (
                str(stage.first_layer), str(stage.num_layers), str(first))
            assert seen["SLURMD_NODENAME"] == nodes[FEATURES.index(names[stage.gpu_type])]
