"""slurm adapter: an sbatch script that passes ``bash -n`` and, run with stub srun/scontrol, starts torchrun
with the plan's node count, processes per node and rendezvous on the allocation's first host."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from adapter_plans import GPT2, make_plan, mixed_small, mixed_uneven, multi_node_dp, single_gpu, tp_pp_nodes
from frenzy_core.adapters import ADAPTERS
from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.planning import Plan

slurm = ADAPTERS["slurm"]
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def _cpus(script: str) -> int:
    return int(next(d for d in _directives(script) if d.startswith("--cpus-per-task=")).split("=")[1])


def _run_with_stubs(script: str, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Run the script with fake scontrol (two hosts) and srun (records its argv and env); return both."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n")
    (bin_dir / "srun").write_text(
        f"#!/bin/bash\nprintf '%s\\n' \"$@\" > {tmp_path}/argv\nenv > {tmp_path}/env\n")
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "4242"}
    proc = subprocess.run([BASH, str(path)], env=env, check=False, capture_output=True, text=True, timeout=30)  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    at = argv.index("torchrun")
    assert argv[:at] == ["--ntasks-per-node=1", f"--cpus-per-task={_cpus(script)}"]  # srun's own options
    argv = argv[at:]
    seen = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    return argv, seen


@pytest.mark.parametrize("make", [single_gpu, multi_node_dp, tp_pp_nodes])
def test_script_is_valid_bash(make: object, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(slurm.emit(make()))  # type: ignore[operator]
    proc = subprocess.run([BASH, "-n", str(path)], check=False, capture_output=True, text=True)  # type: ignore[list-item]
    assert proc.returncode == 0, proc.stderr


def test_single_gpu(tmp_path: Path) -> None:
    script = slurm.emit(single_gpu())
    assert _directives(script) == ["--job-name=frenzy-train", "--nodes=1", "--ntasks-per-node=1",
                                   "--cpus-per-task=8", "--gres=gpu:a100-80gb:1"]  # 8 CPUs per GPU by default
    argv, env = _run_with_stubs(script, tmp_path)
    assert argv[:3] == ["torchrun", "--nnodes=1", "--nproc-per-node=1"]
    assert env["FRENZY_GRAD_ACCUM_STEPS"] == "4"


def test_multi_node_runs_torchrun_with_rendezvous_on_first_host(tmp_path: Path) -> None:
    script = slurm.emit(multi_node_dp(), script="fit.py", script_args=["--data", "/d x"], partition="gpu",
                        time="01:00:00", gpu_type_name="a100")
    assert _directives(script)[1:] == ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64", "--gres=gpu:a100:8",
                                       "--partition=gpu", "--time=01:00:00"]
    argv, env = _run_with_stubs(script, tmp_path)
    assert argv == ["torchrun", "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
                    "--rdzv-endpoint=gpu-a:29500", "--rdzv-id=4242", "fit.py", "--data", "/d x"]
    assert (env["FRENZY_DP"], env["FRENZY_MICRO_BATCH_SIZE"], env["FRENZY_GRAD_ACCUM_STEPS"]) == ("16", "2", "4")


def test_tp_pp_with_constraint(tmp_path: Path) -> None:
    script = slurm.emit(tp_pp_nodes(), gpu_request="constraint", gpu_type_name="h100")
    assert {"--gres=gpu:8", "--constraint=h100", "--nodes=2"} <= set(_directives(script))
    argv, env = _run_with_stubs(script, tmp_path)
    run = pytest.importorskip("torch.distributed.run")
    args = run.get_args_parser().parse_args(argv[1:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_endpoint) == ("2", "8", "gpu-a:29500")
    assert (env["FRENZY_TP"], env["FRENZY_PP"]) == ("4", "2")


def test_uneven_placement_is_refused() -> None:
    plan: Plan = make_plan(GPT2, "a100-80gb", {"node:0": list(range(8)), "node:1": [0, 1, 2, 3]},
                           ParallelConfig(dp=12), TrainingConfig(seq_len=512))
    with pytest.raises(ConfigError, match="uneven"):
        slurm(plan)


def test_control_characters_in_any_option_are_refused() -> None:
    """A newline in an option would add a line to the script (issue 14: job_name="x\\necho INJECTED")."""
    for options in ({"job_name": "x\necho INJECTED"}, {"partition": "gpu\r"}, {"script_args": ["a\x1b[2J"]},
                    {"env": {"A": "1\nrm -rf /"}}):
        with pytest.raises(ConfigError, match="control character"):
            slurm(single_gpu(), **options)


def test_cpus_per_task_from_the_options() -> None:
    assert "--cpus-per-task=4" in slurm(single_gpu(), cpus_per_gpu=4)["directives"]
    assert "--cpus-per-task=3" in slurm(multi_node_dp(), cpus_per_task=3)["directives"]


def test_heterogeneous_job_from_per_type_components(tmp_path: Path) -> None:
    from frenzy_core.adapters.slurm import SlurmComponent, SlurmOptions, slurm_script

    parts = [SlurmComponent("a100", nodes=2, gpus_per_node=8, cpus_per_task=64),
             SlurmComponent("v100", nodes=1, gpus_per_node=4, cpus_per_task=32)]
    script = slurm_script(parts, {"FRENZY_TP": "1"}, SlurmOptions())["script"]
    assert _directives(script) == [
        "--job-name=frenzy-train", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64", "--gres=gpu:a100:8",
        "hetjob", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=32", "--gres=gpu:v100:4"]
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    first, second = srun.removeprefix("srun ").split(" : ")
    assert first.startswith("--het-group=0 ") and "--nnodes=3 --nproc-per-node=8" in first
    assert second.startswith("--het-group=1 ") and "--nnodes=3 --nproc-per-node=4" in second
    assert "SLURM_JOB_NODELIST_HET_GROUP_0" in script
    path = tmp_path / "het.sbatch"
    path.write_text(script)
    assert subprocess.run([BASH, "-n", str(path)], check=False).returncode == 0  # type: ignore[list-item]


def test_a_mixed_plan_is_a_hetjob_with_a_component_per_group_and_node_size(tmp_path: Path) -> None:
    plan = mixed_uneven()  # A100 group on a node of 6 and a node of 4, then the H100 group on 3
    names = {"a100-80gb": "a100", "h100-sxm": "h100"}
    data = slurm(plan, gpu_type_name=names)
    script = data["script"]
    parts = " ".join(_directives(script)).split(" hetjob ")
    sizes = [(len(s.placement[n]), s.gpu_type) for s in plan.stages for n in s.placement]
    assert len(parts) == len(sizes) == 3
    for part, (per_node, gpu_type) in zip(parts, sizes):
        assert "--nodes=1 " in part and f"--gres=gpu:{names[gpu_type]}:{per_node}" in part
    steps = data["srun"].removeprefix("srun ").split(" : ")
    stage_of = {s.gpu_type: s for s in plan.stages}
    for i, (step, (per_node, gpu_type)) in enumerate(zip(steps, sizes)):
        assert step.startswith(f"--het-group={i} ")
        assert f"--nproc-per-node={per_node} " in step and "--node-rank=\"${SLURM_PROCID}\"" in step
        assert "--rdzv-backend=static" in step
        tokens = shlex.split(step)
        inner = shlex.split(tokens[tokens.index("-c") + 1])  # bash -c 'exec env K=V ... torchrun ...'
        own = dict(t.split("=", 1) for t in inner[2:inner.index("torchrun")])
        seen = {**data["env"], **own}  # the job's exports, then the component's own
        stage = stage_of[gpu_type]
        assert (seen["FRENZY_GPU_TYPE"], seen["FRENZY_GRAD_ACCUM_STEPS"], seen["FRENZY_GROUP_DP"]) == (
            gpu_type, str(stage.micro_batches), str(stage.dp))
    path = tmp_path / "mixed.sbatch"
    path.write_text(script)
    assert subprocess.run([BASH, "-n", str(path)], check=False).returncode == 0  # type: ignore[list-item]


def test_one_site_name_for_a_mixed_plan_is_refused_with_the_mapping_it_needs() -> None:
    with pytest.raises(ConfigError, match="mapping from GPU type id") as err:
        slurm(mixed_small(), gpu_type_name="a100")
    assert err.value.field == "gpu_type_name"
