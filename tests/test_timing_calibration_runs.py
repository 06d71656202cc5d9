"""Calibration from a user's own runs: run tables, torchtitan / Megatron-LM / HF Trainer logs, ``frenzy calibrate``
and the calibrated-parameter file that ``plan_job`` and ``frenzy plan --time-model`` read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, TrainingConfig, get_gpu_spec, plan_job
from frenzy_core.cli import app
from frenzy_core.timing import calibrate, default_time_model_params, estimate_iteration_time
from frenzy_core.timing.logs import read_log_step_time
from frenzy_core.timing.params import load_time_model_params
from frenzy_core.timing.runs import load_measurements

runner = CliRunner()
ESC = "\x1b"

# torchtitan/components/metrics.py, MetricsProcessor.log: one line per logged step, coloured fields.
TITAN = (f"[titan] 2025-06-01 12:00:{{i:02d}},000 - root - INFO - {ESC}[31mstep: {{step:2}}  {ESC}[32mloss:  7.9231  "
         f"{ESC}[38;2;180;60;0mgrad_norm:  1.2345  {ESC}[38;2;54;234;195mmemory: 45.67GiB(48.09%)  "
         f"{ESC}[34mtps: {{tps:,}}  {ESC}[36mtflops: 289.70  {ESC}[35mmfu: 29.29%{ESC}[39m")
# megatron/training/training.py, training_log: the per-interval iteration line.
MEGATRON = (" [2025-04-13 23:41:{i:02d}] iteration {it:8d}/    1000 | consumed samples: {samples:12d} | elapsed time per "
            "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 402.1 | learning rate: 1.000000E-04 | "
            "global batch size:    64 | lm loss: 7.412347E+00 | loss scale: 1.0 | grad norm: 1.234 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |")

TITAN_RUN = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "dp": 8, "seq_len": 8192, "micro_batch_size": 2,
             "global_batch_size": 16, "zero_stage": 3, "compile": True}
MEGATRON_RUN = {"model": "llama-3.1-70b", "gpu": "h100-sxm", "dp": 2, "tp": 8, "pp": 4, "seq_len": 4096,
                "micro_batch_size": 1, "global_batch_size": 64, "framework": "megatron", "sequence_parallel": True,
                "distributed_optimizer": True}
TITAN_STEP_S, MEGATRON_STEP_S = 4.2, 21.0  # the runs' true step times, written into the logs below


def _titan_log(path: Path, step_s: float) -> Path:
    tps = round(16 * 8192 / (step_s * 8))  # tokens per second per GPU
    lines = [TITAN.format(i=1, step=1, tps=tps // 3)]  # the first logged step includes warm-up
    lines += [TITAN.format(i=i, step=10 * i, tps=tps + (-1) ** i * 3) for i in range(1, 6)]
    path.write_text("\n".join(["[titan] Starting job: Llama 3 8B training", *lines, ""]), encoding="utf-8")
    return path


def _megatron_log(path: Path, step_s: float) -> Path:
    lines = ["training ...", MEGATRON.format(i=0, it=10, samples=640, ms=3 * step_s * 1000)]
    lines += [MEGATRON.format(i=i, it=10 * (i + 1), samples=640 * (i + 1), ms=step_s * 1000 + (-1) ** i * 5)
              for i in range(1, 6)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_log_formats_read_with_warm_up_dropped(tmp_path: Path) -> None:
    titan = read_log_step_time(_titan_log(tmp_path / "t.log", 4.2), global_batch_size=16, seq_len=8192, world_size=8)
    assert titan.format == "torchtitan" and titan.readings == 5 and titan.step_s == pytest.approx(4.2, rel=1e-3)
    meg = read_log_step_time(_megatron_log(tmp_path / "m.log", 21.0), global_batch_size=64, seq_len=4096,
                             world_size=64)
    assert meg.format == "megatron" and meg.readings == 5 and meg.step_s == pytest.approx(21.0, rel=1e-3)
    hf = tmp_path / "hf.log"
    # transformers trainer_utils.speed_metrics, as Trainer.log prints it and as log_metrics("train", ...) does.
    hf.write_text("{'train_runtime': 620.3, 'train_samples_per_second': 25.6, 'train_steps_per_second': 0.4, "
                  "'train_loss': 1.72, 'epoch': 1.0}\n***** train metrics *****\n  epoch                    =        1.0\n"
                  "  train_samples_per_second =       25.6\n", encoding="utf-8")
    got = read_log_step_time(hf, global_batch_size=64, seq_len=2048, world_size=8)
    assert got.format == "hf-trainer" and got.step_s == pytest.approx(64 / 25.6)


def test_log_errors_name_the_line(tmp_path: Path) -> None:
    log = _megatron_log(tmp_path / "m.log", 2.0)
    text = log.read_text().splitlines()
    text[3] = text[3].replace("elapsed time per iteration (ms): 2005.0", "elapsed time per iteration (ms): nan")
    log.write_text("\n".join(text) + "\n")
    with pytest.raises(ConfigError, match=r"m\.log:4: cannot read the megatron step time"):
        read_log_step_time(log, global_batch_size=64, seq_len=4096, world_size=64)
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    with pytest.raises(ConfigError, match="no step-time lines"):
        read_log_step_time(empty, global_batch_size=1, seq_len=1, world_size=1)
    with pytest.raises(ConfigError, match="layout"):
        load_measurements([empty])


def _predicted(run: dict, params_file: Path) -> float:
    model = ModelConfig.preset(run["model"])
    parallel = ParallelConfig(**{k: run[k] for k in ("dp", "tp", "pp") if k in run})
    training = TrainingConfig(**{k: v for k, v in run.items() if k not in ("model", "gpu", "dp", "tp", "pp")})
    gpu = get_gpu_spec(run["gpu"])
    return estimate_iteration_time(model, training, parallel, gpu,
                                   params=load_time_model_params(params_file, gpu)).iteration_s


def _cli_options(run: dict) -> list[str]:
    names = {"seq_len": "--seq-len", "micro_batch_size": "--micro-batch", "global_batch_size": "--global-batch",
             "zero_stage": "--zero-stage"}
    out: list[str] = []
    for key, value in run.items():
        option = names.get(key, "--" + key.replace("_", "-"))
        if value is True:
            out.append(option)
        else:
            out += [option, str(value)]
    return out


@pytest.mark.parametrize(("run", "write", "step_s"), [(TITAN_RUN, _titan_log, TITAN_STEP_S),
                                                      (MEGATRON_RUN, _megatron_log, MEGATRON_STEP_S)])
def test_frenzy_calibrate_on_a_log_reproduces_its_step_time(tmp_path: Path, run: dict, write, step_s: float) -> None:
    log = write(tmp_path / "train.log", step_s)
    out = tmp_path / "fitted.yaml"
    result = runner.invoke(app, ["calibrate", str(log), "--out", str(out), *_cli_options(run)])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(out.read_text())
    assert data["format"] == "frenzy-time-model/1" and set(data["gpus"]) == {"h100-sxm"}
    assert _predicted(run, out) == pytest.approx(step_s, rel=0.02)
    # ... which the defaults did not: calibration had something to do.
    gpu = get_gpu_spec(run["gpu"])
    model, lay = ModelConfig.preset(run["model"]), {k: run[k] for k in ("dp", "tp", "pp") if k in run}
    training = TrainingConfig(**{k: v for k, v in run.items() if k not in ("model", "gpu", "dp", "tp", "pp")})
    before = estimate_iteration_time(model, training, ParallelConfig(**lay), gpu,
                                     params=default_time_model_params(gpu)).iteration_s
    assert abs(before / step_s - 1) > 0.05


def test_runs_table_with_logs_and_step_times(tmp_path: Path) -> None:
    _titan_log(tmp_path / "titan.log", TITAN_STEP_S)
    _megatron_log(tmp_path / "megatron.log", MEGATRON_STEP_S)
    header = "model,gpu,dp,tp,pp,seq_len,micro_batch_size,global_batch_size,zero_stage,framework,sequence_parallel," \
             "distributed_optimizer,compile,step_s,log,label\n"
    rows = ["llama-3.1-8b,h100-sxm,8,1,1,8192,2,16,3,torch,false,false,true,,titan.log,titan",
            "llama-3.1-70b,h100-sxm,2,8,4,4096,1,64,0,megatron,true,true,false,,megatron.log,megatron",
            "llama-3.1-8b,a100-80gb,8,1,1,4096,1,32,3,torch,false,false,false,6.5,,a100 run"]
    table = tmp_path / "runs.csv"
    table.write_text(header + "\n".join(rows) + "\n")
    ms = load_measurements([table])
    assert [m.label for m in ms] == ["titan", "megatron", "a100 run"]
    assert ms[0].measured_iteration_s() == pytest.approx(TITAN_STEP_S, rel=1e-3)
    assert ms[1].measured_iteration_s() == pytest.approx(MEGATRON_STEP_S, rel=1e-3)
    h100 = calibrate([m for m in ms if m.gpu.id == "h100-sxm"])
    assert h100.median_abs_error_after < h100.median_abs_error_before
    with pytest.raises(ConfigError, match="one GPU type"):
        calibrate(table)  # the table holds two GPU types; calibrate_by_gpu / frenzy calibrate split them
    out = tmp_path / "fitted.json"
    result = runner.invoke(app, ["calibrate", str(table), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert '"h100-sxm"' in result.stdout and out.exists()
    bad = tmp_path / "bad.csv"
    bad.write_text(header.replace("step_s", "seconds") + rows[2] + "\n")
    result = runner.invoke(app, ["calibrate", str(bad)])
    assert result.exit_code == 2 and "unknown columns ['seconds']" in result.output


def test_plan_job_and_frenzy_plan_take_the_calibrated_file(tmp_path: Path) -> None:
    out = tmp_path / "slow.yaml"
    out.write_text("format: frenzy-time-model/1\ngpus:\n  a100-80gb:\n    params: {matmul_efficiency: 0.3}\n")
    cluster = {"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 8, "count": 1}]}
    model = ModelConfig.preset("gpt2")
    base = plan_job(model, cluster, time_limit_s=2)
    slow = plan_job(model, cluster, time_limit_s=2, time_model=out)
    assert slow.time.iteration_s > base.time.iteration_s
    result = runner.invoke(app, ["plan", "gpt2", "--cluster", _cluster_file(tmp_path), "--time-model", str(out),
                                 "--time-limit", "2", "--json"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["plan", "gpt2", "--time-model", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "missing.yaml" in result.output


def _cluster_file(tmp_path: Path) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes:\n  - {gpu: a100-80gb, gpus_per_node: 8, count: 1}\n")
    return str(path)
