"""The iteration-time estimator: a hand-computed case, laws (hypothesis), and batch == scalar."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import (
    Cluster,
    ConfigError,
    ModelConfig,
    MoEConfig,
    ParallelConfig,
    PipelineSchedule,
    Recompute,
    TrainingConfig,
    get_gpu_spec,
)
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing import (
    TIME_CATEGORIES,
    TimeModelParams,
    estimate_iteration_time,
    estimate_iteration_time_batch,
)

# A made-up GPU with round numbers, so that expected values can be worked out by hand.
GPU = GPUSpec(
    id="round-gpu", name="Round GPU", vendor="nvidia", memory_bytes=80 * 2**30, nominal_memory_bytes=80_000_000_000,
    memory_bandwidth_bytes_per_s=1e12, peak_tflops={"fp32": 10.0, "bf16": 100.0, "fp16": 100.0},
    intra_node_link="nvlink3", intra_node_bytes_per_s=1e11, link_domain_gpus=8, gpus_per_node=8,
    inter_node_bytes_per_s=1e10, sources={k: "test value" for k in (
        "memory_bytes", "nominal_memory_bytes", "memory_bandwidth_bytes_per_s", "peak_tflops",
        "intra_node_bytes_per_s", "link_domain_gpus", "gpus_per_node", "inter_node_bytes_per_s")},
)
PARAMS = TimeModelParams(matmul_efficiency=0.5, attention_efficiency=0.25, memory_efficiency=0.5,
                         collective_efficiency=0.5, collective_latency_s=0.0, ring_step_latency_s=0.0,
                         network_step_latency_s=0.0, tensor_parallel_overlap=0.0, context_parallel_overlap=0.0,
                         expert_parallel_overlap=0.0, pipeline_p2p_overlap=0.0, data_parallel_overlap=0.0,
                         comm_sms=0.0, kernel_launch_s=0.0, fsdp_prefetch_layers=1.0)
# The GEMM shape law of data/time_model.yaml (section gemm), written out: tiles of 128 x 256 over the SMs (the
# default 108 for a GPU the table does not list) with a quarter-wave tail, and a 128-deep pipeline fill along K.
SMS, TILE, TAIL, K_FILL = 108, 128 * 256, 0.25, 128


def gemm_s(m: float, n: float, k: float, rate: float, mem_bw: float, batch: float = 1.0) -> float:
    """One (batched) GEMM as docs/time-model.md states it: FLOPs at rate x shape factor, or its HBM traffic."""
    mn = m * n * batch
    shape = mn / (mn + TAIL * TILE * SMS) * k / (k + K_FILL)
    return max(2 * mn * k / (rate * shape), batch * (2 * (m * k + k * n) + 2 * m * n) / mem_bw)
GPT = ModelConfig(num_layers=8, hidden_size=1024, num_attention_heads=16, vocab_size=32000,
                  max_position_embeddings=2048)


def test_single_gpu_hand_computed() -> None:
    h, L, V, s, f, heads, d = 1024, 8, 32000, 1024, 4096, 16, 64
    training = TrainingConfig(seq_len=s, global_batch_size=2, micro_batch_size=1, attention="eager")
    est = estimate_iteration_time(GPT, training, ParallelConfig(), GPU, params=PARAMS)
    rate, bw = 100e12 * 0.5, 1e12 * 0.5
    # Per micro-batch of s tokens: QKV, attention-out, MLP up and down, each forward, input-gradient (m x k) and
    # weight-gradient (k x n over the s tokens) GEMMs; the head likewise; eager attention as batched GEMMs over
    # the 16 heads (Q K^T: s x s x d, P V: s x d x s), backward twice the forward.
    layer = sum(gemm_s(s, n, k, rate, bw) + gemm_s(s, k, n, rate, bw) + gemm_s(k, n, s, rate, bw)
                for n, k in [(3 * h, h), (h, h), (f, h), (h, f)])
    head = gemm_s(s, V, h, rate, bw) + gemm_s(s, h, V, rate, bw) + gemm_s(h, V, s, rate, bw)
    attn = 3 * (gemm_s(s, s, d, rate, bw, heads) + gemm_s(s, d, s, rate, bw, heads))
    assert est.breakdown["compute"] == pytest.approx(2 * (L * (layer + attn) + head))
    # Elementwise (eager PyTorch, the default framework), forward bytes per token and layer: 2 x (two LayerNorms
    # 2 h each + two residual adds 3 h each + head split/merge 6 h + 2 h + GeLU 2 f) + 4 bytes x 16 heads x s
    # (softmax read + write); the backward moves twice that; 52 bytes per logit for the loss.
    per_layer = 2 * (10 * h + 6 * h + 2 * h + 2 * f) + 4 * heads * s
    assert est.breakdown["elementwise"] == pytest.approx(2 * (3 * L * per_layer + 52 * V) * s / bw)
    # AdamW, bf16-mixed: read+write fp32 weight (8), two states (16), fp32 grad (4), bf16 copy (2) = 30 B/param.
    assert est.breakdown["optimizer"] == pytest.approx(GPT.num_params() * 30 / bw)
    for key in ("recompute", "kernel_launch", "tensor_parallel", "context_parallel", "expert_parallel",
                "pipeline_p2p", "pipeline_bubble", "data_parallel"):
        assert est.breakdown[key] == 0.0
    assert est.iteration_s == pytest.approx(sum(est.breakdown.values()))
    assert est.tokens_per_s == pytest.approx(2 * s / est.iteration_s)
    model_flops = 72 * 2 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert est.mfu == pytest.approx(model_flops / (est.iteration_s * 100e12))


def test_parallel_terms_hand_computed() -> None:
    # tp=2 dp=8 pp=2 on 8-GPU nodes: TP inside a node, DP group spans 16 GPUs (2 members per node: 2 NICs).
    h, s = 1024, 1024
    training = TrainingConfig(seq_len=s, global_batch_size=64, micro_batch_size=2)
    est = estimate_iteration_time(GPT, training, ParallelConfig(dp=8, tp=2, pp=2), GPU, params=PARAMS)
    m = 64 // (2 * 8)
    act = 2 * s * h * 2  # bytes of one micro-batch's hidden state
    # 4 all-reduces per layer and micro-batch, 4 layers on the stage, ring over 2 ranks at 0.5 x 100 GB/s.
    assert est.breakdown["tensor_parallel"] == pytest.approx(m * 4 * 4 * (2 * 1 / 2 * act / 0.5e11))
    # Two sends per micro-batch across stages 32 GPUs apart (inter-node, one NIC each), tp-sharded activations.
    assert est.breakdown["pipeline_p2p"] == pytest.approx(m * 2 * (act / 2) / 0.5e10)
    per_mb = sum(est.breakdown[k] for k in ("compute", "elementwise", "tensor_parallel", "pipeline_p2p")) / m
    assert est.breakdown["pipeline_bubble"] == pytest.approx((2 - 1) * per_mb)


def test_breakdown_and_overlap_are_explicit() -> None:
    training = TrainingConfig(seq_len=1024, global_batch_size=64)
    overlapped = PARAMS.replace(data_parallel_overlap=1.0, tensor_parallel_overlap=1.0)
    plain = estimate_iteration_time(GPT, training, ParallelConfig(dp=16, tp=2), GPU, params=PARAMS)
    hidden = estimate_iteration_time(GPT, training, ParallelConfig(dp=16, tp=2), GPU, params=overlapped)
    assert set(hidden.breakdown) == set(TIME_CATEGORIES)
    assert plain.overlapped_s == 0.0 and hidden.overlapped_s > 0.0
    assert hidden.breakdown == plain.breakdown
    assert hidden.iteration_s == pytest.approx(plain.iteration_s - hidden.overlapped_s)


def test_cluster_links_replace_the_gpus() -> None:
    training = TrainingConfig(seq_len=1024, global_batch_size=64)
    a100 = get_gpu_spec("a100-80gb")
    slow = Cluster.from_dict({"nodes": [{"gpu": "a100-80gb", "gpus_per_node": 4, "count": 8,
                                         "inter_node_bytes_per_s": a100.inter_node_bytes_per_s / 4}]})
    parallel = ParallelConfig(dp=4, tp=2)  # 8 GPUs: one node of 8, or two nodes of 4
    packed = estimate_iteration_time(GPT, training, parallel, a100, params=PARAMS)
    spread = estimate_iteration_time(GPT, training, parallel, a100, cluster=slow, params=PARAMS)
    assert spread.breakdown["tensor_parallel"] == packed.breakdown["tensor_parallel"]
    # Intra-node link vs 2 members per node x a quarter NIC each.
    ratio = a100.intra_node_bytes_per_s / (2 * a100.inter_node_bytes_per_s / 4)
    assert spread.breakdown["data_parallel"] == pytest.approx(packed.breakdown["data_parallel"] * ratio, rel=0.01)


def test_gpu_by_name_and_errors() -> None:
    training = TrainingConfig(seq_len=1024, global_batch_size=8)
    by_name = estimate_iteration_time(GPT, training, ParallelConfig(dp=8), "a100-80gb")
    assert by_name == estimate_iteration_time(GPT, training, ParallelConfig(dp=8), get_gpu_spec("a100-80gb"))
    with pytest.raises(ConfigError, match="fp8"):
        estimate_iteration_time(GPT, training.replace(precision="fp8-mixed"), ParallelConfig(dp=8), GPU)
    with pytest.raises(ConfigError, match="tp"):
        estimate_iteration_time(GPT, training, ParallelConfig(dp=1, tp=3), GPU)
    with pytest.raises(ConfigError, match="candidate 1"):
        estimate_iteration_time_batch(GPT, training, GPU, {"dp": [8, 3]})


# ---------------------------------------------------------------- laws
MODELS = st.builds(
    lambda layers, heads, width: ModelConfig(num_layers=layers, hidden_size=heads * width, num_attention_heads=heads,
                                             vocab_size=32000, max_position_embeddings=4096),
    st.integers(2, 32), st.sampled_from([8, 16]), st.sampled_from([64, 128]))
LAYOUTS = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2]), "cp": st.sampled_from([1, 2]),
    "recompute": st.sampled_from(list(Recompute)), "seq": st.sampled_from([1024, 2048]),
    "mb": st.sampled_from([1, 2]), "zero": st.sampled_from([0, 1, 2, 3]), "sp": st.booleans(),
})


def _training(layout: dict[str, object], gbs: int) -> TrainingConfig:
    return TrainingConfig(seq_len=layout["seq"], micro_batch_size=layout["mb"], global_batch_size=gbs,
                          recompute=layout["recompute"], zero_stage=layout["zero"],
                          sequence_parallel=bool(layout["sp"]) and layout["tp"] != 1)


@settings(max_examples=40, deadline=None)
@given(MODELS, LAYOUTS, st.sampled_from([1, 2, 4]), st.sampled_from([2, 4]))
def test_more_dp_never_increases_compute(model: ModelConfig, layout: dict, dp: int, factor: int) -> None:
    training = _training(layout, gbs=64)
    kw = {"tp": layout["tp"], "pp": layout["pp"], "cp": layout["cp"]}
    small = estimate_iteration_time(model, training, ParallelConfig(dp=dp, **kw), GPU, params=PARAMS)
    big = estimate_iteration_time(model, training, ParallelConfig(dp=dp * factor, **kw), GPU, params=PARAMS)
    for key in ("compute", "recompute", "elementwise"):
        assert big.breakdown[key] <= small.breakdown[key] * (1 + 1e-12)
    assert all(v >= 0 for v in big.breakdown.values()) and big.overlapped_s >= 0


@settings(max_examples=40, deadline=None)
@given(MODELS, LAYOUTS, st.sampled_from([1, 4, 16]), st.floats(1.0, 8.0), st.floats(1.0, 8.0))
def test_faster_links_never_increase_communication(model: ModelConfig, layout: dict, dp: int, intra_x: float,
                                                   inter_x: float) -> None:
    training = _training(layout, gbs=64)
    parallel = ParallelConfig(dp=dp, tp=layout["tp"], pp=layout["pp"], cp=layout["cp"])
    faster = GPU.replace(intra_node_bytes_per_s=GPU.intra_node_bytes_per_s * intra_x,
                         inter_node_bytes_per_s=GPU.inter_node_bytes_per_s * inter_x)
    base = estimate_iteration_time(model, training, parallel, GPU, params=PARAMS)
    fast = estimate_iteration_time(model, training, parallel, faster, params=PARAMS)
    for key in ("tensor_parallel", "context_parallel", "pipeline_p2p", "data_parallel"):
        assert fast.breakdown[key] <= base.breakdown[key] * (1 + 1e-12)
    assert fast.iteration_s <= base.iteration_s * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(MODELS, LAYOUTS, st.integers(1, 8), st.booleans())
def test_bigger_model_never_faster(model: ModelConfig, layout: dict, more: int, wider: bool) -> None:
    training = _training(layout, gbs=32)
    parallel = ParallelConfig(dp=2, tp=layout["tp"], pp=layout["pp"], cp=layout["cp"])
    if wider:
        bigger = model.replace(hidden_size=model.hidden_size + more * model.num_attention_heads, head_dim=0,
                               ffn_hidden_size=0)
    else:
        bigger = model.replace(num_layers=model.num_layers + more)
    base = estimate_iteration_time(model, training, parallel, GPU, params=PARAMS)
    big = estimate_iteration_time(bigger, training, parallel, GPU, params=PARAMS)
    assert big.iteration_s >= base.iteration_s


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
                          st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from(list(Recompute)),
                          st.booleans(), st.sampled_from([0, 1, 3]), st.sampled_from(list(PipelineSchedule))),
                min_size=1, max_size=12))
def test_batch_equals_scalar(candidates: list[tuple]) -> None:
    moe = MoEConfig(num_experts=8, top_k=2, expert_ffn_hidden_size=1024)
    model = GPT.replace(moe=moe)
    base = TrainingConfig(seq_len=1024, global_batch_size=64, attention="flash")
    rows = []
    for dp, tp, pp, vpp, cp, rc, sp, zero, sched in candidates:
        vpp = vpp if pp > 1 else 1
        sched = PipelineSchedule.INTERLEAVED if vpp > 1 else (sched if sched is not PipelineSchedule.INTERLEAVED
                                                              else PipelineSchedule.ONE_F_ONE_B)
        ep = 2 if (dp * cp) % 2 == 0 else 1
        rows.append((dp, tp, pp, vpp, cp, ep, rc, sp and tp > 1, zero, sched))
    cols = list(zip(*rows))
    batch = estimate_iteration_time_batch(model, base, GPU, {
        "dp": cols[0], "tp": cols[1], "pp": cols[2], "vpp": cols[3], "cp": cols[4], "ep": cols[5],
        "recompute": [r.code for r in cols[6]], "sequence_parallel": cols[7], "zero_stage": cols[8],
        "schedule": [x.code for x in cols[9]]})
    assert len(batch) == len(rows)
    for i, (dp, tp, pp, vpp, cp, ep, rc, sp, zero, sched) in enumerate(rows):
        training = base.replace(recompute=rc, sequence_parallel=sp, zero_stage=zero)
        parallel = ParallelConfig(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, schedule=sched)
        scalar = estimate_iteration_time(model, training, parallel, GPU)
        assert batch.at(i) == scalar
        assert all(v >= 0 for v in scalar.breakdown.values()) and scalar.overlapped_s >= 0


def test_batch_of_two_dimensional_columns_is_its_flat_rows() -> None:
    """Columns of shape (2, 2) (the fuzz suite's ``zero_stage=[[0, 0]]`` raised IndexError, ``[[0]]`` numpy's
    ValueError): one estimate per row in C order, each equal to the scalar estimate of that row."""
    training = TrainingConfig(seq_len=1024, global_batch_size=64)
    dp, tp = np.array([[1, 2], [4, 8]]), np.array([[1, 1], [2, 2]])
    got = estimate_iteration_time_batch(GPT, training, GPU, {"dp": dp, "tp": tp})
    assert len(got) == 4
    for i, (d, t) in enumerate(zip(dp.ravel(), tp.ravel())):
        assert got.at(i) == estimate_iteration_time(GPT, training, ParallelConfig(dp=int(d), tp=int(t)), GPU)
    assert len(estimate_iteration_time_batch(GPT, training, GPU, {"dp": 1, "zero_stage": [[0]]})) == 1


# GPU types whose figures differ in every way a row's time depends on: dtype peaks, HBM, SMs, links, host link (none
# listed for mi300x), attention kernel (cuDNN or FlashAttention-2 by generation, the memory-efficient one on Volta,
# an AMD scale for the kernel table) and, for one, calibrated parameters.
MIXED_TYPES = ("h100-sxm", "a100-80gb", "v100-32gb", "mi300x", "l4")
MIXED_RECIPES = (
    TrainingConfig(seq_len=1024, global_batch_size=64, precision="fp16-mixed", framework="megatron"),
    TrainingConfig(seq_len=1024, global_batch_size=64, precision="fp16-mixed", attention="flash"),
    TrainingConfig(seq_len=1024, global_batch_size=64, precision="fp16-mixed", offload_optimizer="cpu", zero_stage=2),
    TrainingConfig(seq_len=2048, global_batch_size=64, precision="fp32", attention="eager"),
)


@settings(max_examples=4, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                          st.sampled_from([1, 2]), st.sampled_from(list(Recompute)), st.booleans(),
                          st.integers(0, len(MIXED_TYPES) - 1)), min_size=1, max_size=10),
       st.sampled_from(MIXED_RECIPES), st.booleans())
def test_batch_of_several_gpu_types_equals_scalar(candidates: list[tuple], base: TrainingConfig, moe: bool) -> None:
    """One call over rows on several GPU types gives each row exactly its own type's scalar estimate."""
    model = GPT.replace(moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_hidden_size=1024)) if moe else GPT
    gpus = [get_gpu_spec(name) for name in MIXED_TYPES]
    params = [None, PARAMS, None, None, None]
    rows = [(dp, tp, pp, cp, 2 if moe and (dp * cp) % 2 == 0 else 1, rc, sp and tp > 1, g)
            for dp, tp, pp, cp, rc, sp, g in candidates]
    cols = list(zip(*rows))
    batch = estimate_iteration_time_batch(model, base, MIXED_TYPES, {
        "dp": cols[0], "tp": cols[1], "pp": cols[2], "cp": cols[3], "ep": cols[4],
        "recompute": [r.code for r in cols[5]], "sequence_parallel": cols[6]},
        gpu_index=np.array(cols[7]), params=params)
    for i, (dp, tp, pp, cp, ep, rc, sp, g) in enumerate(rows):
        training = base.replace(recompute=rc, sequence_parallel=sp)
        scalar = estimate_iteration_time(model, training, ParallelConfig(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep), gpus[g],
                                         params=params[g])
        assert batch.at(i) == scalar


def test_several_gpu_types_are_checked_once_per_call() -> None:
    training = TrainingConfig(seq_len=1024, global_batch_size=64)
    rows = {"dp": [1, 2, 4]}
    two = ["h100-sxm", "a100-80gb"]
    for kwargs, field in (({}, "gpu_index"), ({"gpu_index": [0, 2, 1]}, "gpu_index"),
                          ({"gpu_index": [0, 1]}, "gpu_index"), ({"gpu_index": [0.0, 1.0, 1.0]}, "gpu_index"),
                          ({"gpu_index": [0, 1, 1], "params": PARAMS}, "params"),
                          ({"gpu_index": [0, 1, 1], "params": [PARAMS]}, "params"),
                          ({"gpu_index": [0, 1, 1], "params": [PARAMS, "fast"]}, "params")):
        with pytest.raises(ConfigError) as err:
            estimate_iteration_time_batch(GPT, training, two, rows, **kwargs)  # type: ignore[arg-type]
        assert err.value.field == field
    with pytest.raises(ConfigError, match="v100-32gb lists no bf16 peak"):  # the type that cannot run it, named
        estimate_iteration_time_batch(GPT, training, [*two, "v100-32gb"], rows, gpu_index=[0, 1, 1])
    with pytest.raises(ConfigError) as err:
        estimate_iteration_time_batch(GPT, training, [], rows)
    assert err.value.field == "gpu"
    with pytest.raises(ConfigError, match="candidate"):  # the rows are checked as for one type
        estimate_iteration_time_batch(GPT, training, two, {"dp": [1, 3, 4]}, gpu_index=[0, 1, 1])


def test_several_gpu_types_take_their_own_links_from_a_cluster() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100-sxm", "count": 2, "gpus_per_node": 4},
                                           {"gpu": "a100-80gb", "count": 2, "gpus_per_node": 8}]})
    training = TrainingConfig(seq_len=1024, global_batch_size=64)
    both = estimate_iteration_time_batch(GPT, training, ["h100-sxm", "a100-80gb"], {"dp": [8, 8]}, gpu_index=[0, 1],
                                         cluster=cluster)
    for i, name in enumerate(["h100-sxm", "a100-80gb"]):
        alone = estimate_iteration_time_batch(GPT, training, name, {"dp": [8]}, cluster=cluster)
        assert both.at(i) == alone.at(0)


def test_batch_broadcasts_scalars_and_enums() -> None:
    training = TrainingConfig(seq_len=1024, global_batch_size=64)
    got = estimate_iteration_time_batch(GPT, training, GPU, {"dp": np.array([1, 2, 4, 8]), "tp": 2,
                                                             "recompute": Recompute.FULL})
    assert got.iteration_s.shape == (4,)
    assert np.all(np.diff(got.breakdown["compute"]) < 0)
    assert np.all(got.breakdown["recompute"] > 0)
