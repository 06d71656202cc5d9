"""The reproducers of issue 15 (hostile input), one per case: what it does and the ConfigError it must give.

Shared by ``tests/test_hostile_input.py`` (each gives its ConfigError) and ``benchmarks/hostile_inputs.py`` (each
is timed; the issue's acceptance is under a second). A case takes a scratch folder and calls the library.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import frenzy_core as f

HF_CONFIGS = Path(__file__).parent / "fixtures" / "hf_configs"
LLAMA_CONFIG = ("torch", "transformers.models.llama.configuration_llama")
"""What a probe of a Llama config imports (Transformers' first config import takes seconds)."""


class Case(NamedTuple):
    name: str
    run: Callable[[Path], object]
    match: str
    """A regular expression the ConfigError's message must match."""
    needs: tuple[str, ...] = ()
    """Optional modules the case needs (skipped without them)."""


def alias_bomb(levels: int = 8) -> str:
    """A YAML document of about 440 bytes whose aliases expand ninefold per level (9^8 = 43 million strings)."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        prev, name = chr(96 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + f"\nnodes: *{chr(96 + levels)}\n"


def _llama(**changes: object) -> dict[str, object]:
    return {**json.loads((HF_CONFIGS / "llama.json").read_text()), **changes}


def _config_file(tmp: Path, text: str | bytes) -> Path:
    path = tmp / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _llama_text(value: str) -> str:
    """llama.json with hidden_size's value replaced by raw JSON text."""
    text = json.dumps(_llama())
    assert '"hidden_size": 4096' in text
    return text.replace('"hidden_size": 4096', f'"hidden_size": {value}')


def _trace(tmp: Path, body: bytes, name: str = "trace.csv", **kw: object) -> f.scheduling.TraceLoad:
    path = tmp / name
    header = b"timestamp,duration,num_gpus,gpu_time,cluster\n"
    path.write_bytes(gzip.compress(header + body) if name.endswith(".gz") else header + body)
    return f.read_trace(path, **kw)  # type: ignore[arg-type]


def _truncated_gz(tmp: Path) -> object:
    path = tmp / "trace.csv.gz"
    data = gzip.compress(b"timestamp,duration,num_gpus,gpu_time,cluster\n" + b"1,2,1,3,vc\n" * 5000)
    path.write_bytes(data[: len(data) // 2])
    return f.read_trace(path)


def _skipped_and_counted(tmp: Path, body: bytes, reason: str) -> object:
    """Under on_error='skip' the bad row is left out and listed, the good one kept; then fail names the row."""
    load = _trace(tmp, body + b"10,5,1,5,vc\n", on_error="skip")
    assert len(load.jobs) == 1 and len(load.skipped) == 1 and reason in load.skipped[0].reason, load
    return _trace(tmp, body, on_error="fail")


def _job(**changes: object) -> f.TrainingJob:
    fields: dict[str, object] = {"id": "a", "submit_time_s": 0.0, "model": f.ModelConfig.preset("gpt2"),
                                 "training": f.TrainingConfig(seq_len=512), "work_tokens": 10**6}
    return f.TrainingJob(**{**fields, **changes})


def _simulate(**kw: object) -> object:
    return f.simulate([_job()], f.Cluster.preset("frenzy-paper"), "frenzy-core", progress=False, **kw)  # type: ignore[arg-type]


GPT2 = f.ModelConfig.preset("gpt2")
LLAMA = f.ModelConfig.preset("llama-2-7b")
SHORT = f.TrainingConfig(seq_len=512)

CASES: tuple[Case, ...] = (
    # ---- silent wrong numbers
    Case("vocabulary 2^62 in the batch estimator", lambda t: f.estimate_memory_batch(
        GPT2.replace(vocab_size=2**62), {"tp": [1]}, SHORT), r"vocab_size: .* exceeds 2\^22"),
    Case("vocabulary 2^62 in the scalar estimator", lambda t: f.estimate_memory(GPT2.replace(vocab_size=2**62), SHORT),
         r"vocab_size: .* exceeds 2\^22"),
    Case("tp=[2.9] truncated to 2", lambda t: f.estimate_memory_batch(LLAMA, {"tp": [1, 2.9]}, SHORT),
         r"configs\['tp'\]\[1\] = 2.9 is not a whole number"),
    Case("tp=[nan]", lambda t: f.estimate_memory_batch(LLAMA, {"tp": [float("nan")]}, SHORT),
         r"configs\['tp'\]\[0\] = nan is not finite"),
    Case("ragged columns", lambda t: f.estimate_memory_batch(LLAMA, {"tp": [[1, 2], [1]]}, SHORT),
         r"configs\['tp'\] is not a rectangular array"),
    Case("num_microbatches of 3 rows beside dp of 2 (numpy's ValueError at the product)",
         lambda t: f.estimate_memory_batch(LLAMA, {"num_microbatches": [1, 1, 1], "dp": [1, 2]}, SHORT),
         r"configs arrays do not broadcast together"),
    Case("time batch: pp = 2^20 on a 32-layer model (minutes of work)", lambda t: f.estimate_iteration_time_batch(
        LLAMA, SHORT, "h100", {"pp": [2**20], "num_microbatches": [43]}),
        r"num_layers=32 is fewer than pp x vpp = 1048576 pipeline chunks"),
    Case("an empty column", lambda t: f.estimate_memory_batch(LLAMA, {"tp": []}, SHORT), r"configs\['tp'\] is empty"),
    Case("tp beyond int64 (uint64)", lambda t: f.estimate_memory_batch(LLAMA, {"tp": [2**63]}, SHORT),
         r"configs\['tp'\]\[0\] = 9223372036854775808 is beyond int64"),
    Case("time batch: tp=[2.9]", lambda t: f.estimate_iteration_time_batch(LLAMA, SHORT, "h100", {"tp": [2.9]}),
         r"configs\['tp'\]\[0\] = 2.9 is not a whole number"),
    Case("time batch: arguments in the wrong order", lambda t: f.estimate_iteration_time_batch(
        LLAMA, {"tp": [1]}, "h100", SHORT), r"training must be a TrainingConfig"),  # type: ignore[arg-type]
    Case("num_microbatches wrapping int64", lambda t: f.estimate_memory_batch(
        LLAMA, {"num_microbatches": [2**62 + 1], "micro_batch_size": [4]}, SHORT),
        r"num_microbatches x micro_batch_size x dp=.* exceeds 2\^30"),
    Case("TrainingJob(submit_time_s=inf)", lambda t: _job(submit_time_s=float("inf")),
         r"submit_time_s: Input should be a finite number"),
    Case("a GPU override stealing another GPU's alias", lambda t: f.load_gpu_specs(
        overrides={"h100": {"aliases": ["a100"]}}), r"GPU name 'a100' is claimed by both"),
    Case("a GPU override stored under another id", lambda t: f.load_gpu_specs(
        overrides={"h100": {"id": "a100-80gb"}}), r"an override cannot change the id"),
    # ---- unbounded work
    Case("a 440-byte YAML alias bomb", lambda t: f.Cluster.from_yaml(alias_bomb()),
         r"expands to more than 1,048,576 nodes through its aliases"),
    Case("a recursive YAML alias", lambda t: f.Cluster.from_yaml("nodes: &n [*n]\n"), r"a recursive alias"),
    Case("count: 1000000000 nodes", lambda t: f.Cluster.from_yaml(
        "nodes: [{gpu: h100, gpus_per_node: 8, count: 1000000000}]\n"), r"count: 1000000000 exceeds 2\^17"),
    Case("num_layers=10**30", lambda t: f.estimate_memory(
        f.ModelConfig(num_layers=10**30, hidden_size=64, num_attention_heads=1, vocab_size=100), SHORT),
        r"num_layers: .* exceeds 2\^14"),
    Case("a 10^16-parameter model", lambda t: f.ModelConfig(
        num_layers=2**14, hidden_size=2**18, num_attention_heads=2**10, vocab_size=100),
        r"parameter count=.* exceeds 2\^46"),
    Case("trace rows with num_gpus=1e9, skipped and counted", lambda t: _skipped_and_counted(
        t, b"1,2,1e9,3,vc\n", "exceeds 2^20"), r"line 2 \(data row 1\): GPUs=1000000000 exceeds"),
    Case("a cluster scaled to 2^40 GPUs", lambda t: f.Cluster.preset("frenzy-paper", scale=2**40),
         r"scale must be an integer in \[1, 1,048,576\]"),
    Case("eager attention at 32M tokens: more than 2^60 bytes", lambda t: f.estimate_memory(
        LLAMA, f.TrainingConfig(seq_len=2**25, attention="eager", precision="fp32")),
        r"would hold more than 2\^60 bytes"),
    # ---- file readers
    Case("NaN in config.json", lambda t: f.ModelConfig.from_hf_config(_config_file(t, _llama_text("NaN"))),
         r"NaN is not a number JSON allows"),
    Case("Infinity in config.json", lambda t: f.ModelConfig.from_hf_config(_config_file(t, _llama_text("Infinity"))),
         r"Infinity is not a number JSON allows"),
    Case("1e999 in config.json", lambda t: f.ModelConfig.from_hf_config(_config_file(t, _llama_text("1e999"))),
         r"'1e999' is beyond the range of a float"),
    Case("a 5,000-digit number in config.json", lambda t: f.ModelConfig.from_hf_config(
        _config_file(t, _llama_text("9" * 5000))), r"an integer of 5,000 digits"),
    # found by the 10,000-example campaign (a 20 GB process): the Qwen readers built a per-layer sliding-window
    # list, and the MoE readers a sparse-layer list, from num_hidden_layers before ModelConfig bounded it
    *(Case(f"num_hidden_layers 2^40 in a {family} config", lambda t, family=family: f.ModelConfig.from_hf_config(
        {**json.loads((HF_CONFIGS / f"{family}.json").read_text()), "num_hidden_layers": 2**40}),
        r"num_hidden_layers=1099511627776 exceeds 2\^14") for family in ("qwen2", "qwen2_moe", "mistral", "phi3")),
    Case("inf in a config dict", lambda t: f.ModelConfig.from_hf_config(_llama(hidden_size=float("inf"))),
         r"hidden_size=inf is not a whole number"),
    Case("2^60 as a float in a config dict", lambda t: f.ModelConfig.from_hf_config(_llama(hidden_size=2.0**60)),
         r"hidden_size=1.15.* is not a whole number"),
    Case("a string dropout", lambda t: f.ModelConfig.from_hf_config(_llama(attention_dropout="x")),
         r"attention_dropout='x' is not a number"),
    Case("an infinite dropout", lambda t: f.ModelConfig.from_hf_config(_llama(attention_dropout=float("inf"))),
         r"attention_dropout=inf is not a finite number"),
    Case("mlp_only_layers holding null", lambda t: f.ModelConfig.from_hf_config(
        {"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
         "intermediate_size": 128, "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2,
         "moe_intermediate_size": 32, "mlp_only_layers": [None]}), r"mlp_only_layers\[0\]=None is not a whole"),
    Case("a model_type that is a list", lambda t: f.ModelConfig.from_hf_config(_llama(model_type=["llama"])),
         r"model_type=\['llama'\] is not a string"),
    Case("JSON nested 100,000 deep", lambda t: f.ModelConfig.from_hf_config(
        _config_file(t, '{"a":' + "[" * 100_000 + "]" * 100_000 + "}")), r"nested too deeply"),
    Case("a config.json that is not UTF-8", lambda t: f.ModelConfig.from_hf_config(_config_file(t, b'{"a": "\xff"}')),
         r"line 1: byte 0xff is not UTF-8"),
    Case("a cluster file that is not UTF-8", lambda t: f.Cluster.from_yaml(_write(t / "c.yaml", b"nodes: [\xff]\n")),
         r"c.yaml' line 1: byte 0xff is not UTF-8"),
    Case("a GPU spec file that is not UTF-8", lambda t: f.load_gpu_specs(_write(t / "g.yaml", b"name: \xff\n")),
         r"g.yaml' line 1: byte 0xff is not UTF-8"),
    Case("a trace row that is not UTF-8, skipped and counted", lambda t: _skipped_and_counted(
        t, b"1,2,\xff,3,vc\n", "not UTF-8"), r"line 2 \(data row 1\): holds bytes that are not UTF-8"),
    Case("a 131k-character CSV field, skipped and counted", lambda t: _skipped_and_counted(
        t, b"1,2,1,3," + b"x" * 131_073 + b"\n", "field larger than field limit"), r"field larger than field limit"),
    Case("a truncated .gz trace", _truncated_gz, r"reading stopped after line \d+: Compressed file ended"),
    Case("a non-string YAML key", lambda t: f.Cluster.from_yaml("nodes: [{gpu: h100, gpus_per_node: 8, 3: 4}]\n"),
         r"line 1: key 3 is not a string"),
    Case("a duplicate YAML key", lambda t: f.Cluster.from_yaml(
        "nodes: [{gpu: h100, gpus_per_node: 8}]\nnodes: [{gpu: a100, gpus_per_node: 8}]\n"),
        r"line 2: key 'nodes' is given twice"),
    Case("a Python tag in YAML", lambda t: f.Cluster.from_yaml("nodes: !!python/object/apply:os.system [ls]\n"),
         r"could not determine a constructor"),
    # ---- wrong argument types and seeds
    Case("plan_job(model='gpt2')", lambda t: f.plan_job("gpt2", "default"), r"model must be a ModelConfig"),  # type: ignore[arg-type]
    Case("plan_job(time_limit_s='x')", lambda t: f.plan_job(GPT2, f.Cluster.preset("frenzy-paper"),
                                                              time_limit_s="x"), r"time_limit_s must be a number"),  # type: ignore[arg-type]
    Case("plan_job(top_k=2.5)", lambda t: f.plan_job(GPT2, f.Cluster.preset("frenzy-paper"), top_k=2.5),  # type: ignore[arg-type]
         r"top_k must be an integer"),
    Case("simulate('abc', ...)", lambda t: f.simulate("abc", f.Cluster.preset("frenzy-paper"), "fifo-requested"),  # type: ignore[arg-type]
         r"jobs must be a list of TrainingJob"),
    Case("simulate(jobs, 'default', ...)", lambda t: f.simulate([_job()], "default", "fifo-requested"),  # type: ignore[arg-type]
         r"cluster must be a Cluster"),
    Case("simulate(seed=-1)", lambda t: _simulate(seed=-1), r"seed must be an integer in \[0, 9,223"),
    Case("simulate(seed=2**200)", lambda t: _simulate(seed=2**200), r"seed must be an integer in .* got <an integer"),
    Case("simulate(seed='x')", lambda t: _simulate(seed="x"), r"seed must be an integer, got str"),
    Case("read_trace(seed=-1)", lambda t: _trace(t, b"1,2,1,3,vc\n", sample=1, seed=-1), r"seed must be an integer"),
    Case("synthetic_jobs(seed='x')", lambda t: f.synthetic_jobs(
        2, arrival_rate_per_s=1.0, model_mix={"gpt2": 1.0}, seed="x",  # type: ignore[arg-type]
        work_distribution=f.scheduling.LogNormalWork(median_tokens=1e9, sigma=1.0)), r"seed must be an integer"),
    Case("Cluster.from_yaml(5)", lambda t: f.Cluster.from_yaml(5), r"takes YAML text or a path, got int"),  # type: ignore[arg-type]
    Case("load_gpu_specs(5)", lambda t: f.load_gpu_specs(5), r"extra_dirs must be a folder"),  # type: ignore[arg-type]
    Case("load_gpu_specs(overrides=[1])", lambda t: f.load_gpu_specs(overrides=[1]),  # type: ignore[arg-type]
         r"overrides must map GPU names"),
    Case("a GPU name of a megabyte", lambda t: f.get_gpu_spec("x" * 2**20), r"unknown GPU type 'xxx.*\.\.\."),
    # ---- entry points added since the issue was filed, found by tests/test_fuzz.py
    Case("calibrate: a run table's step_s 'abc'", lambda t: f.calibrate(_write(
        t / "runs.csv", b"model,gpu,seq_len,global_batch_size,step_s\ngpt2,h100,1024,8,abc\n")),
        r"step_s='abc' is not a finite number"),
    Case("calibrate: a 140k-character run-table cell", lambda t: f.calibrate(_write(
        t / "runs.csv", b"model,gpu,step_s\ngpt2,h100,\"" + b"x" * 140_000 + b"\"\n")), r"line 2: not CSV"),
    # found by the 10,000-example campaign: a name longer than the OS allows made Path.exists() raise OSError
    Case("calibrate: a run table naming a 5,000-character model", lambda t: f.calibrate(_write(
        t / "runs.csv", b"model,gpu,seq_len,global_batch_size,step_s\n" + b"9" * 5000 + b",h100,1024,8,0.5\n")),
        r"unknown model"),
    Case("calibrate(fit=[[]])", lambda t: f.calibrate(_write(
        t / "runs.csv", b"model,gpu,seq_len,global_batch_size,step_s\ngpt2,h100,1024,8,0.5\n"), fit=[[]]),  # type: ignore[list-item]
        r"cannot fit \[\[\]\]"),
    Case("calibrate(3)", lambda t: f.calibrate(3), r"measurements must be a list"),  # type: ignore[arg-type]
    Case("calibrate(prior_weight='x')", lambda t: f.calibrate([], prior_weight="x"),  # type: ignore[arg-type]
         r"prior_weight must be a number"),
    Case("a time-model file with NaN", lambda t: f.plan_job(GPT2, f.Cluster.preset("frenzy-paper"), time_model=_write(
        t / "tm.yaml", b"format: frenzy-time-model/1\ngpus:\n  a100-40gb:\n    params: {matmul_efficiency: .nan}\n")),
        r"matmul_efficiency=nan: Input should be a finite number"),
    Case("plan_job(time_model=3)", lambda t: f.plan_job(GPT2, f.Cluster.preset("frenzy-paper"), time_model=3),  # type: ignore[arg-type]
         r"time_model must be the path"),
    Case("OnlineScheduler.from_json('[]')", lambda t: f.OnlineScheduler.from_json("[]"),
         r"scheduler state version None"),
    Case("OnlineScheduler.from_json of an edited state", lambda t: f.OnlineScheduler.from_json(
        json.dumps({**json.loads(f.OnlineScheduler(f.Cluster.preset("frenzy-paper")).to_json()), "jobs": 3})),
        r"not what to_json writes"),
    Case("OnlineScheduler(policy=3)", lambda t: f.OnlineScheduler(f.Cluster.preset("frenzy-paper"), 3),  # type: ignore[arg-type]
         r"scheduling policy name must be a string"),
    Case("OnlineScheduler.advance(nan)", lambda t: f.OnlineScheduler(f.Cluster.preset("frenzy-paper")).advance(
        float("nan")), r"now_s must be a number in"),
    Case("probe_memory of JSON nested 100,000 deep", lambda t: f.probe_memory(
        _config_file(t, "[" * 100_000), f.TrainingConfig(precision="fp32")), r"nested too deeply",
         ("torch", "transformers")),
    # (LLAMA_CONFIG: its first import takes seconds; imported before the case is timed, as torch is)
    Case("probe_memory of a valid 16,384-layer model", lambda t: f.probe_memory(
        LLAMA.replace(num_layers=2**14), f.TrainingConfig(seq_len=16, precision="fp32")),
        r"\(16,384 layers \+ 1\) x 1 micro-batches x 2 steps=32770 exceeds 512", LLAMA_CONFIG),
    Case("probe_memory of a one-layer model for 1,000 steps (about 5 CPU minutes)", lambda t: f.probe_memory(
        LLAMA.replace(num_layers=1), f.TrainingConfig(seq_len=16, precision="fp32"), steps=1000),
        r"\(1 layers \+ 1\) x 1 micro-batches x 1,000 steps=2000 exceeds 512", LLAMA_CONFIG),
    Case("probe_memory of 2^20 micro-batches", lambda t: f.probe_memory(LLAMA.replace(num_layers=1), f.TrainingConfig(
        seq_len=16, micro_batch_size=1, global_batch_size=2**20, precision="fp32")),
        r"\(1 layers \+ 1\) x 1,048,576 micro-batches x 2 steps=.* exceeds 512", LLAMA_CONFIG),
    Case("probe_memory of a config.json with 10^6 layers", lambda t: f.probe_memory(
        _config_file(t, json.dumps(_llama(num_hidden_layers=10**6))), f.TrainingConfig(seq_len=16, precision="fp32")),
        r"\(1,000,000 layers \+ 1\) x .* exceeds 512", LLAMA_CONFIG),
    Case("measure_training_step of a config with 10^6 layers", lambda t: f.measure_training_step(
        _llama(num_hidden_layers=10**6), dict), r"\(1,000,000 layers \+ 1\) x 1 micro-batches x 2 steps", LLAMA_CONFIG),
    Case("probe_memory of a config with num_hidden_layers 2.5", lambda t: f.probe_memory(
        _llama(num_hidden_layers=2.5), f.TrainingConfig(seq_len=16, precision="fp32")),
        r"num_hidden_layers", LLAMA_CONFIG),
    Case("plot_memory into a missing folder", lambda t: _plot(t / "missing" / "m.png"), r"missing. does not exist",
         ("matplotlib",)),
    Case("plot_memory(path=3)", lambda t: _plot(3), r"path must be a file path, got int"),
    Case("plot_memory of a 100,000-character title (56 CPU s to draw)", lambda t: _plot(t / "m.png", title="a" * 10**5),
         r"title has 100,000 characters, more than 1,000"),
    Case("plot_memory of a title with a lone surrogate", lambda t: _plot(t / "m.png", title="\ud800"),
         r"title .* lone surrogate at 0"),
    Case("plot_memory to a file name with a lone surrogate (UnicodeEncodeError at open)",
         lambda t: _plot(t / "\ud800.png"), r"path .* holds a character no file name can \(at"),
    Case("plot_memory(title=3)", lambda t: _plot(t / "m.png", title=3), r"title must be a string, got int"),
    Case("a time-model file to a name with a lone surrogate (UnicodeEncodeError at open)",
         lambda t: _write_time_model(t / "\ud800.yaml"), r"out .* holds a character no file name can \(at"),
    Case("a time-model file to a name with a NUL byte (ValueError at open)",
         lambda t: _write_time_model(str(t / "a\0.yaml")), r"out .* holds a NUL byte"),
    Case("a time-model file to path 3 (TypeError)", lambda t: _write_time_model(3), r"out must be a file path"),
    Case("a simulation's figure to a name with a lone surrogate (UnicodeEncodeError at open)",
         lambda t: f.simulate([], f.Cluster.preset("frenzy-paper"), "fifo-requested", progress=False).plot(
             t / "\ud800.png"), r"path .* holds a character no file name can \(at"),
    Case("a simulation's figure to a name without a figure suffix (written as x.png before)",
         lambda t: f.simulate([], f.Cluster.preset("frenzy-paper"), "fifo-requested", progress=False).plot(t / "x"),
         r"path .* must end in \.png, \.svg or \.pdf"),
    Case("plot_memory to a PathLike whose __fspath__ gives bytes (TypeError in Path())",
         lambda t: _plot(_BytesPath()), r"path must be a file path, got _BytesPath .*a PathLike that gives one"),
)


class _BytesPath(os.PathLike):  # type: ignore[type-arg]
    def __fspath__(self) -> bytes:
        return b"m.png"


def _write_time_model(path: object) -> None:
    from frenzy_core.timing.calibration_file import write_calibration_file

    write_calibration_file(path, {})  # type: ignore[arg-type]


def _plot(path: object, title: object = None) -> object:
    from frenzy_core.plotting import plot_memory

    estimate = f.estimate_memory(GPT2, f.TrainingConfig(seq_len=512), f.ParallelConfig())
    return plot_memory(estimate, path, title=title)  # type: ignore[arg-type]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
