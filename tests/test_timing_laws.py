"""Laws of the time model's newer physics, as they truly hold (hypothesis): precision, overlap, fusion, kernels."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError, ModelConfig, ParallelConfig, Recompute, TrainingConfig, get_gpu_spec, validate_layout
from frenzy_core.hardware import load_gpu_specs
from frenzy_core.timing import default_time_model_params, estimate_iteration_time
from frenzy_core.timing.efficiency import attention_rates, gemm_hardware, gemm_s

H100 = get_gpu_spec("h100-sxm")
MODELS = st.builds(
    lambda layers, heads, width, gated, kv: ModelConfig(
        num_layers=layers, hidden_size=heads * width, num_attention_heads=heads, num_kv_heads=heads // kv,
        vocab_size=32000, mlp="swiglu" if gated else "gelu", norm="rmsnorm" if gated else "layernorm",
        position_embedding="rotary" if gated else "learned", max_position_embeddings=8192),
    st.integers(2, 16), st.sampled_from([8, 16, 32]), st.sampled_from([64, 128]), st.booleans(),
    st.sampled_from([1, 4]))
LAYOUTS = st.fixed_dictionaries({
    "dp": st.sampled_from([1, 2, 8, 32]), "tp": st.sampled_from([1, 2, 8]), "pp": st.sampled_from([1, 2]),
    "cp": st.sampled_from([1, 2]), "mb": st.sampled_from([1, 2, 4]), "seq": st.sampled_from([1024, 4096]),
    "zero": st.sampled_from([0, 1, 2, 3]), "rc": st.sampled_from(list(Recompute)), "m": st.sampled_from([1, 4]),
    "framework": st.sampled_from(["torch", "megatron"]),
})
SETTINGS = settings(max_examples=30, deadline=None)


def _valid(model: ModelConfig, layout: dict) -> dict:
    """The layout, if the model can be laid out that way (e.g. kv heads divisible by tp); else the example is
    discarded."""
    try:
        validate_layout(model, *_run(layout))
    except ConfigError:
        assume(False)
    return layout


def _run(layout: dict, **training: object) -> tuple[TrainingConfig, ParallelConfig]:
    parallel = ParallelConfig(dp=layout["dp"], tp=layout["tp"], pp=layout["pp"], cp=layout["cp"])
    fields = dict(seq_len=layout["seq"], micro_batch_size=layout["mb"], recompute=layout["rc"],
                  global_batch_size=layout["mb"] * layout["dp"] * layout["m"], zero_stage=layout["zero"],
                  sequence_parallel=layout["tp"] > 1, framework=layout["framework"])
    fields.update(training)
    return TrainingConfig(**fields), parallel


@SETTINGS
@given(MODELS, LAYOUTS, st.sampled_from(["delayed", "current", "rowwise"]))
def test_fp8_never_slower_than_bf16_on_gemms(model: ModelConfig, layout: dict, recipe: str) -> None:
    # Every catalogue GPU with an fp8 peak sustains more fp8 than bf16 GEMM FLOP/s; the quantisation kernels are
    # memory traffic, counted apart (elementwise).
    layout = _valid(model, layout)
    for gpu in (g for g in load_gpu_specs().values() if "fp8" in g.peak_tflops):
        bf16 = estimate_iteration_time(model, *_run(layout), gpu)
        fp8 = estimate_iteration_time(model, *_run(layout, precision="fp8-mixed", fp8_recipe=recipe), gpu)
        assert fp8.breakdown["compute"] <= bf16.breakdown["compute"] * (1 + 1e-12), gpu.id
        assert fp8.breakdown["elementwise"] >= bf16.breakdown["elementwise"]


@SETTINGS
@given(MODELS, LAYOUTS, st.sampled_from(["data_parallel_overlap", "context_parallel_overlap",
                                        "pipeline_p2p_overlap", "expert_parallel_overlap", "fsdp_prefetch_layers"]),
       st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_more_overlap_never_slower(model: ModelConfig, layout: dict, name: str, low: float, extra: float) -> None:
    layout = _valid(model, layout)
    training, parallel = _run(layout)
    base = default_time_model_params(H100)
    slow = estimate_iteration_time(model, training, parallel, H100, params=base.replace(**{name: low}))
    fast = estimate_iteration_time(model, training, parallel, H100, params=base.replace(**{name: low + extra}))
    assert fast.iteration_s <= slow.iteration_s * (1 + 1e-12)


@SETTINGS
@given(MODELS, LAYOUTS, st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_tensor_parallel_overlap_never_slower_under_transformer_engine(model: ModelConfig, layout: dict, low: float,
                                                                       extra: float) -> None:
    # TE runs the chunk GEMMs concurrently, so chunking costs no GEMM efficiency; torch async TP runs them one
    # after another and can lose more to small GEMMs than it hides (no law there).
    layout = _valid(model, layout)
    training, parallel = _run({**layout, "framework": "megatron"})
    base = default_time_model_params(H100)
    slow = estimate_iteration_time(model, training, parallel, H100, params=base.replace(tensor_parallel_overlap=low))
    fast = estimate_iteration_time(model, training, parallel, H100,
                                   params=base.replace(tensor_parallel_overlap=low + extra))
    assert fast.iteration_s <= slow.iteration_s * (1 + 1e-12)


@SETTINGS
@given(MODELS, LAYOUTS)
def test_compile_never_adds_memory_traffic_or_launches(model: ModelConfig, layout: dict) -> None:
    layout = _valid(model, layout)
    training, parallel = _run({**layout, "framework": "torch"})
    eager = estimate_iteration_time(model, training, parallel, H100)
    compiled = estimate_iteration_time(model, training.replace(compile=True), parallel, H100)
    # each stage gets no slower, so neither does the busiest
    assert compiled.iteration_s <= eager.iteration_s * (1 + 1e-9) + 1e-12
    if model.num_layers % parallel.pp != 0:
        return  # the longer first stage and the last (with the head) may swap as the busiest one
    for key in ("compute", "tensor_parallel", "data_parallel"):
        assert compiled.breakdown[key] == eager.breakdown[key]
    assert compiled.breakdown["kernel_launch"] <= eager.breakdown["kernel_launch"]
    if model.mlp.gated or model.norm.value == "rmsnorm" or model.position_embedding.value == "rotary":
        assert compiled.breakdown["elementwise"] < eager.breakdown["elementwise"]


@SETTINGS
@given(MODELS, LAYOUTS, st.floats(0.0, 40.0), st.floats(0.0, 40.0), st.floats(0.0, 5e-5), st.floats(0.0, 5e-5))
def test_busier_sms_and_dearer_launches_never_faster(model: ModelConfig, layout: dict, sms: float, more_sms: float,
                                                     launch: float, more_launch: float) -> None:
    layout = _valid(model, layout)
    training, parallel = _run(layout)
    base = default_time_model_params(H100).replace(comm_sms=sms, kernel_launch_s=launch)
    ref = estimate_iteration_time(model, training, parallel, H100, params=base)
    worse = estimate_iteration_time(model, training, parallel, H100, params=base.replace(
        comm_sms=sms + more_sms, kernel_launch_s=launch + more_launch))
    assert worse.iteration_s >= ref.iteration_s * (1 - 1e-12)


@SETTINGS
@given(MODELS, LAYOUTS)
def test_more_recompute_never_faster(model: ModelConfig, layout: dict) -> None:
    layout = _valid(model, layout)
    times = [estimate_iteration_time(model, *_run(layout, recompute=rc), H100).iteration_s
             for rc in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)]
    assert times[0] <= times[1] * (1 + 1e-12) and times[1] <= times[2] * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 1 << 15), st.integers(1, 1 << 15), st.integers(1, 1 << 15), st.sampled_from(["m", "n", "k"]),
       st.integers(2, 8))
def test_bigger_gemms_never_run_slower_per_flop(m: int, n: int, k: int, axis: str, factor: int) -> None:
    hw = gemm_hardware(H100)
    dims = {"m": float(m), "n": float(n), "k": float(k)}
    grown = {**dims, axis: dims[axis] * factor}
    rate, bw = 700e12, 2.7e12

    def per_flop(d: dict[str, float]) -> float:
        t = gemm_s(np.array([d["m"]]), np.array([d["n"]]), np.array([d["k"]]), rate, bw, 2.0, hw)[0]
        return float(t / (2 * d["m"] * d["n"] * d["k"]))

    assert per_flop(grown) <= per_flop(dims) * (1 + 1e-12)
    assert per_flop(grown) >= 1 / rate  # never above the sustained rate


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["fa2", "cudnn", "triton"]), st.sampled_from(["a100-80gb", "h100-sxm", "b200", "l40s"]),
       st.integers(128, 1 << 17), st.integers(2, 8), st.booleans())
def test_attention_kernels_speed_up_with_sequence_length(kernel: str, gpu_id: str, s: int, factor: int,
                                                         causal: bool) -> None:
    gpu = get_gpu_spec(gpu_id)
    peak = gpu.peak_tflops["bf16"] * 1e12
    short, long = (attention_rates(kernel, gpu, peak, np.array([float(x)]), causal, 1.0) for x in (s, s * factor))
    assert long.fwd[0] >= short.fwd[0] and long.bwd[0] >= short.bwd[0]
    assert long.fwd[0] < peak and long.bwd[0] < peak
