"""The ``frenzy`` command line through typer's CliRunner: every command, its ``--json`` output, and bad input
(one line on stderr, exit 2; exit 1 when nothing fits; never a traceback)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frenzy_core import Cluster, ConfigError, ModelConfig, ParallelConfig, TrainingConfig
from frenzy_core.cli import app
from frenzy_core.cli._common import parse_count, parse_names
from frenzy_core.cli.emit import parse_emit_options
from frenzy_core.cli.memory_view import stage_groups
from frenzy_core.config.presets import model_preset_names
from frenzy_core.hardware import DEFAULT_PRESET, load_gpu_specs
from frenzy_core.memory import estimate_memory

runner = CliRunner()

SMALL_CLUSTER = """\
nodes:
  - {gpu: a100-80gb, gpus_per_node: 8, count: 1}
  - {gpu: rtx-3090, gpus_per_node: 4, count: 1}
"""
"""Two GPU types on two nodes: enough for a runner-up and a losing type, small enough to solve in ms."""

PHILLY = """\
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-03 00:00:00,600,1,600,vcA
2017-10-03 00:01:00,1200,2,2400,vcA
2017-10-03 00:02:00,300,4,1200,vcB
"""
"""Three Philly rows (the Sia artifact's columns); sizes 1, 2 and 4 GPUs."""

FAST = ["--time-limit", "2"]


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def ok_json(*args: str) -> Any:
    """Run a ``--json`` command; it must succeed and print JSON and nothing else on stdout."""
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_user_error(result: Any, code: int, *fragments: str) -> None:
    """Exit ``code``, one line on stderr containing ``fragments``, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture()
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_CLUSTER, encoding="utf-8")
    return path


# ---- parsing helpers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1000", 1000), ("1e9", 10**9), ("300M", 300 * 10**6), ("1.5B", 1_500_000_000), ("2t", 2 * 10**12)],
)
def test_parse_count_accepts_plain_scientific_and_suffixed(text: str, expected: int) -> None:
    assert parse_count(text, "--tokens") == expected


@pytest.mark.parametrize("text", ["abc", "0", "-5", "1e9x", "", "0.4"])
def test_parse_count_rejects_what_is_not_a_positive_count(text: str) -> None:
    with pytest.raises(ConfigError, match="--tokens"):
        parse_count(text, "--tokens")


def test_parse_names_and_emit_options() -> None:
    assert parse_names(" a100-80gb, h100 ,", "--gpu-types") == ["a100-80gb", "h100"]
    with pytest.raises(ConfigError):
        parse_names(" , ", "--gpu-types")
    opts = parse_emit_options(["script=train.py", "script-args=[--lr, '3e-4']", "rdzv_port=1234", "env={A: b}"])
    assert opts == {"script": "train.py", "script_args": ["--lr", "3e-4"], "rdzv_port": 1234, "env": {"A": "b"}}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_emit_options(["script"])


def test_stage_groups_cover_every_stage_once_and_mark_the_busiest() -> None:
    model = ModelConfig.preset("gpt2")  # 12 layers: pp=6 gives a first stage, identical middle ones, a last one
    estimate = estimate_memory(model, TrainingConfig(seq_len=512), ParallelConfig(pp=6))
    groups = stage_groups(estimate)
    covered: list[int] = []
    for label, _ in groups:
        span = label.removesuffix(" *").split(" ", 1)[1]
        first, _, last = span.partition("-")
        covered += list(range(int(first), int(last or first) + 1))
    assert covered == list(range(6))
    assert len(groups) < 6  # middle stages merged
    starred = [label for label, _ in groups if label.endswith("*")]
    assert len(starred) == 1 and str(estimate.busiest_stage) in starred[0]


# ---- catalogues -----------------------------------------------------------------------------------------------


def test_models_lists_every_preset() -> None:
    rows = ok_json("models")
    assert [r["name"] for r in rows] == model_preset_names()
    assert "llama-3.1-8b" in invoke("models").stdout


def test_gpus_lists_the_catalogue() -> None:
    rows = ok_json("gpus")
    assert sorted(r["id"] for r in rows) == sorted(load_gpu_specs())
    assert "h100-sxm" in invoke("gpus").stdout


def test_clusters_list_show_and_scale() -> None:
    rows = ok_json("clusters")
    names = {r["name"] for r in rows}
    assert {"default", DEFAULT_PRESET} <= names
    default = next(r for r in rows if r["name"] == "default")
    assert default["resolves_to"] == DEFAULT_PRESET
    assert default["total_gpus"] == sum(default["gpus"].values())

    full = ok_json("clusters", "aws-mixed")
    scaled = ok_json("clusters", "aws-mixed", "--scale", "64")
    assert scaled["total_gpus"] <= 64 < full["total_gpus"]
    assert set(scaled["gpu_types"]) == set(full["gpu_types"])  # every type keeps a node
    text = invoke("clusters", "frenzy-paper").stdout
    assert "a100-80gb" in text and "Source:" in text


def test_clusters_bad_input(cluster_file: Path) -> None:
    assert_user_error(invoke("clusters", "aws-mix"), 2, "unknown cluster preset", "aws-mixed")
    assert invoke("clusters", "--scale", "8").exit_code == 2  # --scale needs a NAME (a usage error)
    shown = ok_json("clusters", str(cluster_file))
    assert shown["total_gpus"] == 12 and shown["preset"] is None


# ---- memory ---------------------------------------------------------------------------------------------------


def test_memory_json_matches_the_fit_rule() -> None:
    data = ok_json("memory", "llama-3.1-8b", "--tp", "2", "--sp", "--pp", "2", "--dp", "2", "--headroom", "0.1")
    needed = data["estimate"]["device_bytes"]
    assert len(data["estimate"]["stages"]) == 2
    for gpu in data["gpus"]:
        assert gpu["fits"] == (needed <= gpu["memory_bytes"] * 0.9)
    v100 = next(g for g in data["gpus"] if g["gpu"] == "v100-32gb")
    assert v100["runs_recipe"] is False  # bf16-mixed needs a bf16 peak


def test_memory_table_output() -> None:
    result = invoke("memory", "gpt2", "--pp", "4", "--seq-len", "512")
    assert result.exit_code == 0, result.output
    for fragment in ("stage 0", "= on the device", "GPU types", "Fits on:"):
        assert fragment in result.stdout


def test_memory_bad_input(tmp_path: Path) -> None:
    assert_user_error(invoke("memory", "lama-3.1-8b"), 2, "unknown model preset", "llama-3.1-8b")
    assert_user_error(invoke("memory", str(tmp_path / "missing.json")), 2, "does not exist")
    assert_user_error(invoke("memory", "gpt2", "--tp", "5", "--seq-len", "1024"), 2, "not divisible by tp=5")
    assert_user_error(invoke("memory", "gpt2", "--seq-len", "2048"), 2, "max_position_embeddings=1024")
    assert invoke("memory", "gpt2", "--precision", "bf17").exit_code == 2


# ---- plan -----------------------------------------------------------------------------------------------------


def test_default_seq_len_fits_a_learned_position_table() -> None:
    result = invoke("memory", "gpt2", "--json")
    assert result.exit_code == 0, result.output
    out = invoke("plan", "bert-base", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["plan"]["training"]["seq_len"] == 512


def test_plan_defaults_to_the_default_cluster() -> None:
    result = invoke("plan", "llama-3.1-8b")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"cluster '{DEFAULT_PRESET}' (the default preset" in out
    for section in ("Plan", "Memory per GPU by pipeline stage", "Time per step", "Runners-up",
                    "Why the other GPU types lost"):
        assert section in out


def test_plan_json_is_consistent_with_the_cluster(cluster_file: Path) -> None:
    data = ok_json("plan", "qwen2.5-0.5b", "--cluster", str(cluster_file), *FAST)
    plan = data["plan"]
    cluster = Cluster.from_yaml(cluster_file)
    assert plan["gpu_type"] in cluster.gpu_types
    assert sum(len(g) for g in plan["placement"].values()) == plan["num_gpus"]
    p = plan["parallel"]
    assert p["dp"] * p["tp"] * p["pp"] * p["cp"] == plan["num_gpus"]
    assert plan["memory"]["device_bytes"] <= plan["usable_bytes"]
    assert data["cluster"]["preset"] is None and data["cluster"]["total_gpus"] == 12
    assert data["explanation"].startswith("Plan:")


def test_plan_constraints_reach_the_planner(cluster_file: Path) -> None:
    data = ok_json("plan", "qwen2.5-0.5b", "--cluster", str(cluster_file), "--gpu-types", "rtx-3090",
                   "--max-gpus", "2", "--micro-batch", "1", "--precision", "fp16-mixed", *FAST)
    plan = data["plan"]
    assert plan["gpu_type"] == "rtx-3090" and plan["num_gpus"] <= 2
    assert plan["training"]["micro_batch_size"] == 1
    assert plan["training"]["precision"] == "fp16-mixed"
    cost = ok_json("plan", "qwen2.5-0.5b", "--cluster", "aws-mixed", "--objective", "cost", "--tokens", "1B", *FAST)
    assert cost["plan"]["objective"] == "cost"
    assert cost["request"]["constraints"]["token_budget"] == 10**9


def test_plan_bad_input(cluster_file: Path, tmp_path: Path) -> None:
    assert_user_error(invoke("plan", "nope-7b"), 2, "unknown model preset")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--gpu-types", "h100x", *FAST), 2, "unknown GPU type", "h100")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--cluster", str(tmp_path / "none.yaml")), 2, "does not exist")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [{gpu: a100-80gb, gpus_per_node: -1}]\n", encoding="utf-8")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--cluster", str(bad)), 2, "bad.yaml", "gpus_per_node")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--cluster", "nowhere"), 2, "unknown cluster preset")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--objective", "time_to_train"), 2, "--tokens")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--objective", "cost", "--tokens", "lots"), 2, "--tokens")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "-o", "script=x.py"), 2, "--emit")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--max-price-per-hour", "0"), 2, "--max-price-per-hour")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--time-limit", "-1"), 2, "--time-limit must be > 0")
    assert_user_error(invoke("plan", "qwen2.5-0.5b", "--emit", "mpirun"), 2, "unknown launcher")
    assert invoke("plan", "qwen2.5-0.5b", "--objective", "fastest").exit_code == 2  # click's own usage error


def test_plan_infeasible_exits_1(cluster_file: Path) -> None:
    # (llama-3.1-70b fits the cluster's 8 A100s by offloading its optimizer; 405B does not)
    result = invoke("plan", "llama-3.1-405b", "--cluster", str(cluster_file), *FAST)
    assert_user_error(result, 1, "infeasible:")
    # the a100-80gb node costs $5.12 per GPU-hour, so a $1 limit fails and the fix is named as the option
    result = invoke("plan", "qwen2.5-0.5b", "--cluster", str(cluster_file), "--max-price-per-hour", "1", *FAST)
    assert_user_error(result, 1, "infeasible:", "--max-price-per-hour 5.12 (or more)")
    assert "max_price_per_hour_usd" not in result.stderr


def test_plan_emit_after_the_plan_and_in_json(cluster_file: Path) -> None:
    result = invoke("plan", "qwen2.5-0.5b", "--cluster", str(cluster_file), "--emit", "torchrun",
                    "-o", "script=pretrain.py", *FAST)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("Why the other GPU types lost") < out.index("torchrun --nnodes") < out.index("pretrain.py")
    data = ok_json("plan", "qwen2.5-0.5b", "--cluster", str(cluster_file), "--emit", "megatron", *FAST)
    assert data["launch"]["launcher"] == "megatron"
    assert "--num-layers" in data["launch"]["text"]  # the CLI passed the model the adapter needs


# ---- simulate -------------------------------------------------------------------------------------------------


def test_simulate_json_accounts_for_every_job(tmp_path: Path, cluster_file: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY, encoding="utf-8")
    data = ok_json("simulate", str(trace), "--cluster", str(cluster_file), "--limit", "2")
    assert data["jobs"] == 2
    for res in data["results"]:
        assert res["violations"] == 0 and len(res["unschedulable"]) + sum(
            j["status"] == "finished" for j in res["jobs"]) == 2
    plot = tmp_path / "jct.png"
    result = invoke("simulate", str(trace), "--cluster", str(cluster_file), "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert "fifo-requested" in result.stdout and plot.stat().st_size > 0


def test_simulate_failures_makes_nodes_fail_and_loses_no_job(tmp_path: Path, cluster_file: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # the default rate (Llama 3's, one failure per ~5.8 GPU-years) hits nothing in a 3-job trace: --failures
    # gets a model 25,000x as harsh here, so the option's wiring and its report can be seen
    from frenzy_core.scheduling import FailureModel, simulator

    harsh = functools.partial(FailureModel, failures_per_gpu_hour=0.5, repair_s=600.0)
    monkeypatch.setattr(simulator, "FailureModel", harsh)
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY, encoding="utf-8")
    calm = ok_json("simulate", str(trace), "--cluster", str(cluster_file))
    stormy = ok_json("simulate", str(trace), "--cluster", str(cluster_file), "--failures")
    assert all(r["node_failures"] == 0 for r in calm["results"])
    assert sum(r["node_failures"] for r in stormy["results"]) > 0  # nodes fail while some policy still runs
    for res in stormy["results"]:
        assert res["violations"] == 0 and len(res["unschedulable"]) + sum(
            j["status"] == "finished" for j in res["jobs"]) == 3
    assert sum(r["interruptions"] for r in stormy["results"]) > 0  # some run lost its node and resumed


def test_simulate_bad_input(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY, encoding="utf-8")
    assert_user_error(invoke("simulate", str(tmp_path / "none.csv")), 2, "does not exist")
    assert_user_error(invoke("simulate", str(trace), "--policies", "sjf"), 2, "unknown policies")
    assert_user_error(invoke("simulate", str(trace), "--format", "sia"), 2, "sia")
    assert_user_error(invoke("simulate", str(trace), "--plot", str(tmp_path / "x.txt")), 2, "--plot")
    assert_user_error(invoke("simulate", str(trace), "--on-error", "ignore"), 2, "--on-error")
    bad = tmp_path / "bad.csv"
    bad.write_text(PHILLY + "12,soon,1,10,vc1\n", encoding="utf-8")
    assert_user_error(invoke("simulate", str(bad), "--on-error", "fail"), 2, "'soon' is not a number")


# ---- help and surface -----------------------------------------------------------------------------------------

SURFACE = {
    "plan": {"--cluster", "--seq-len", "--global-batch", "--micro-batch", "--precision", "--optimizer", "--attention",
             "--framework", "--objective", "--tokens", "--max-gpus", "--num-gpus", "--gpu-types", "--max-price-per-hour",
             "--keep-outputs", "--headroom", "--placement", "--mixed-types", "--mixed-stages", "--tp", "--pp", "--time-limit",
             "--runners-up",
             "--emit",
             "--emit-option", "--emit-to", "--json", "--time-model", "--plot"},
    "memory": {"--seq-len", "--micro-batch", "--global-batch", "--precision", "--optimizer", "--optimizer-impl",
               "--zero", "--zero-stage", "--distributed-optimizer", "--recompute", "--attention", "--sp",
               "--sequence-parallel", "--framework", "--dp", "--tp", "--pp", "--vpp", "--cp", "--ep", "--schedule",
               "--keep-outputs", "--headroom", "--json", "--plot"},
    "simulate": {"--format", "--cluster", "--scale", "--policies", "--limit", "--on-error", "--seed", "--default-duration",
                 "--plot", "--json", "--failures"},
    "calibrate": {"--out", "--model", "--gpu", "--dp", "--tp", "--pp", "--vpp", "--cp", "--seq-len", "--micro-batch",
                  "--global-batch", "--precision", "--recompute", "--attention", "--zero", "--zero-stage", "--framework",
                  "--sp", "--sequence-parallel", "--distributed-optimizer", "--compile", "--fp8-recipe", "--json"},
    "models": {"--json"},
    "gpus": {"--json"},
    "clusters": {"--scale", "--json"},
}
"""The CLI's commands and long options: changing them changes docs/cli.md and users' scripts."""


def test_cli_surface_is_frozen() -> None:
    import typer.main

    group = typer.main.get_command(app)
    assert set(group.commands) == set(SURFACE)  # type: ignore[attr-defined]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        longs = {o for p in command.params for o in p.opts if o.startswith("--")}
        assert longs == SURFACE[name], name


def test_each_option_is_defined_once_with_its_fields_description() -> None:
    """An option that several commands take has one flag set and one help text everywhere; an option that sets a
    config field opens its help with the field's own description."""
    import typer.main

    from frenzy_core.cli.options import DESCRIBED_BY

    group = typer.main.get_command(app)
    seen: dict[str, tuple[tuple[str, ...], str | None]] = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            if not param.opts[0].startswith("--") or param.name in ("help", "model", "out", "gpu"):
                continue  # calibrate's --model/--gpu/--out describe a logged run, not MODEL or a config field
            shape = (tuple(param.opts + param.secondary_opts), getattr(param, "help", None))
            assert seen.setdefault(param.opts[0], shape) == shape, f"{param.opts[0]} differs in {name}"
    for flag, (model, field) in DESCRIBED_BY.items():
        assert flag in seen, flag
        assert (seen[flag][1] or "").startswith(model.model_fields[field].description or "?"), (flag, field)


@pytest.mark.parametrize("command", sorted(SURFACE))
def test_help_has_examples(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert "Examples" in result.stdout and f"frenzy {command}" in result.stdout


def test_emit_to_writes_only_the_launcher_text(tmp_path: Path) -> None:
    import yaml

    target = tmp_path / "job.yaml"
    result = invoke("plan", "gpt2", "--emit", "kubernetes", "--emit-to", str(target))
    assert result.exit_code == 0, result.output
    assert "Wrote the kubernetes config" in result.stdout
    (manifest,) = list(yaml.safe_load_all(target.read_text(encoding="utf-8")))
    assert manifest["kind"] == "PyTorchJob"
    assert_user_error(invoke("plan", "gpt2", "--emit-to", str(target)), 2, "--emit-to needs --emit")


def _stage_request(tmp_path: Path) -> tuple[str, ...]:
    """Llama-2-7B at seq 1024, batch 8, micro-batch 1 on 4 A10G + 4 L4 (24 GB each): no type alone and no replica
    mix holds it, a pipeline over both types does."""
    path = tmp_path / "stages.yaml"
    path.write_text("nodes:\n  - {gpu: a10g, gpus_per_node: 4}\n  - {gpu: l4, gpus_per_node: 4}\n", encoding="utf-8")
    return ("plan", "llama-2-7b", "--cluster", str(path), "--seq-len", "1024", "--global-batch", "8",
            "--micro-batch", "1", "--runners-up", "0", "--emit", "torchrun")


def test_plan_without_mixed_stages_keeps_pipelines_on_one_type(tmp_path: Path) -> None:
    refused = invoke(*_stage_request(tmp_path), "--no-mixed-stages")
    assert refused.exit_code == 1 and "Traceback" not in refused.output, refused.output


@pytest.mark.slow  # the pipeline-stage search: about 2.5 s on the shared machine
def test_plan_with_mixed_stages_emits_a_pipeline_over_types(tmp_path: Path) -> None:
    out = ok_json(*_stage_request(tmp_path), "--mixed-stages")
    plan = out["plan"]
    assert plan["launcher"] == "torchrun" and sorted(plan["gpu_types"]) == ["a10g", "l4"]
    assert [s["pipeline_stage"] for s in plan["stages"]] == list(range(len(plan["stages"])))
    assert "stage" in json.dumps(out["launch"])


def test_plan_mixes_gpu_types_unless_told_single_type(tmp_path: Path) -> None:
    # Llama-2-70B at seq 4096, batch 64 fits 16 A100 + 16 H100 together but neither type alone (issue 12)
    path = tmp_path / "mixed.yaml"
    path.write_text("nodes:\n  - {gpu: a100-80gb, gpus_per_node: 8, count: 2}\n"
                    "  - {gpu: h100-sxm, gpus_per_node: 8, count: 2}\n", encoding="utf-8")
    request = ("plan", "llama-2-70b", "--cluster", str(path), "--seq-len", "4096", "--global-batch", "64",
               "--runners-up", "0")
    plan = ok_json(*request)["plan"]
    assert sorted(plan["gpu_types"]) == ["a100-80gb", "h100-sxm"] and len(plan["stages"]) == 2
    single = invoke(*request, "--single-type")
    assert single.exit_code == 1, single.output
    assert "Traceback" not in single.output and "mix" in single.stderr
