"""Megatron-Core's --recompute-modules, latent attention and --pipeline-model-parallel-layout: terms, laws, reading."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_core.config import MLAConfig, ModelConfig, MoEConfig, ParallelConfig, RecomputeModule, TrainingConfig
from frenzy_core.config.megatron import from_megatron_args, parse_megatron_args, to_megatron_args
from frenzy_core.config.megatron.pattern import pipeline_layout
from frenzy_core.errors import ConfigError
from frenzy_core.memory import estimate_memory
from frenzy_core.memory.activations import layer_activations

M = RecomputeModule
S, MBS = 128, 1
TOKENS = S * MBS

# Small models of the three kinds the modules act on; bf16, flash attention, no dropout (no masks).
DENSE = ModelConfig(num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256, vocab_size=512,
                    mlp="gelu", norm="layernorm", hidden_dropout=0.0, attention_dropout=0.0,
                    max_position_embeddings=S)
MOE = DENSE.model_copy(update={"moe": MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=128,
                                                num_shared_experts=1, shared_expert_ffn_hidden_size=64,
                                                first_dense_layers=1)})
ALL_MOE = DENSE.model_copy(update={"moe": MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=128,
                                                    first_dense_layers=0)})
"""Every layer an MoE one: ``mlp`` (dense layers only in Megatron-Core) has nothing to rebuild on any stage."""
MLA = ModelConfig(num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256, vocab_size=512,
                  mlp="swiglu", norm="rmsnorm", hidden_dropout=0.0, attention_dropout=0.0, max_position_embeddings=S,
                  position_embedding="rotary", mla=MLAConfig(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                                                             qk_rope_head_dim=8, v_head_dim=16),
                  moe=MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=64, first_dense_layers=1))


def _training(modules: tuple[RecomputeModule, ...], **kw: Any) -> TrainingConfig:
    return TrainingConfig(**({"framework": "megatron", "precision": "bf16-mixed", "attention": "flash",
                              "seq_len": S, "micro_batch_size": MBS, "recompute": "selective",
                              "recompute_modules": modules} | kw))


def _saved(model: ModelConfig, modules: tuple[RecomputeModule, ...]) -> tuple[float, float]:
    """(dense layer, MoE layer) bytes saved under selective recompute of ``modules``, tp 1."""
    la = layer_activations(model, _training(modules), tp=1, sp=False, cp=1, seq_len=S, micro_batch_size=MBS)
    return float(la.dense - la.core_dense), float(la.moe - la.core_moe)


def test_mlp_recompute_keeps_the_attention_side_and_the_mlp_input() -> None:
    # Per token, h = 64, a = 4, bf16, LayerNorm (input, mean, rsigma: 2h + 8 bytes), fused norms (TE spec):
    # attention: norm 136 + qkv input 128 + q, k, v 384 + projection input 128 = 776; flash core: 4 x 4 = 16.
    # MLP recompute keeps only the checkpoint's input (the residual stream, 2h = 128): 776 + 128 = 904.
    dense, _ = _saved(DENSE, (M.CORE_ATTN, M.MLP))
    assert dense == 904 * TOKENS
    none, _ = _saved(DENSE, ())
    # without recompute the MLP adds its norm (136), fc1 input (128), GeLU input (512) and fc2 input (512)
    assert none == (776 + 16 + 136 + 128 + 512 + 512) * TOKENS


def test_latent_up_projection_recompute_keeps_the_latents_and_the_rotary_key() -> None:
    # Per token, MLA with q rank 32, kv rank 16, nope 16, rope 8, v 16, a = 4, bf16, RMSNorm (rsigma 4 bytes):
    # dropped: the up projections' rsigma (2 x 4) and normalised latents (2 x (32 + 16)), q and k (2 x 4 x 24 x 2)
    # and v (4 x 16 x 2) = 8 + 96 + 512 = 616; the rotary key the checkpoint keeps is a view of the kv down
    # projection's output, which the kv latent pins anyway.
    base_dense, base_moe = _saved(MLA, ())
    dense, moe = _saved(MLA, (M.MLA_UP_PROJ,))
    assert base_dense - dense == 616 * TOKENS
    assert base_moe - moe == 616 * TOKENS
    # tp 2 with sp: the latents' terms halve (8 + 96 -> 52), q, k, v split over tp (512 -> 256), and the rotary key
    # is a gathered copy of the whole sequence the checkpoint keeps (8 x 2): 52 + 256 - 16 = 292
    la = layer_activations(MLA, _training(()), tp=2, sp=True, cp=1, seq_len=S, micro_batch_size=MBS)
    lu = layer_activations(MLA, _training((M.MLA_UP_PROJ,)), tp=2, sp=True, cp=1, seq_len=S, micro_batch_size=MBS)
    assert float((la.dense - la.core_dense) - (lu.dense - lu.core_dense)) == 292 * TOKENS


def test_layernorm_recompute_acts_on_norms_that_are_modules_of_their_own() -> None:
    # TE fuses the input norm into linear_qkv and a dense layer's pre-MLP norm into linear_fc1: nothing to drop
    assert _saved(DENSE, (M.LAYERNORM,)) == _saved(DENSE, ())
    dense, moe = _saved(MOE, (M.LAYERNORM,))
    base_dense, base_moe = _saved(MOE, ())
    assert dense == base_dense
    # an MoE layer's pre_mlp_layernorm: mean and rsigma (8) and its output (2h = 128) per token
    assert base_moe - moe == (8 + 128) * TOKENS
    # latent attention's input norm is a module too: rsigma (4) and its output (128)
    dense, _ = _saved(MLA, (M.LAYERNORM,))
    assert _saved(MLA, ())[0] - dense == (4 + 128) * TOKENS


def test_moe_act_drops_the_routed_experts_second_matmul_input() -> None:
    dense, moe = _saved(MOE, (M.MOE_ACT,))
    base_dense, base_moe = _saved(MOE, ())
    assert dense == base_dense
    # top-2 routed pairs per token (imbalance 1, ep 1), expert width 128, bf16
    assert base_moe - moe == 2 * 128 * 2 * TOKENS


_SUBSETS = st.sets(st.sampled_from(list(RecomputeModule)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from([DENSE, MOE, ALL_MOE, MLA]), small=_SUBSETS, extra=_SUBSETS, tp=st.sampled_from([1, 2]),
       pp=st.sampled_from([1, 2]), sp=st.booleans(), mbs=st.sampled_from([1, 2]))
def test_recomputing_more_modules_never_needs_more_memory(model: ModelConfig, small: set[RecomputeModule],
                                                          extra: set[RecomputeModule], tp: int, pp: int, sp: bool,
                                                          mbs: int) -> None:
    lacks = ({M.MLA_UP_PROJ} if model.mla is None else set()) | ({M.MOE_ACT} if model.moe is None else set())
    small, extra = small - lacks, extra - lacks  # modules of parts the model has not are refused (check_recipe)
    order = list(RecomputeModule)
    fewer = tuple(sorted(small, key=order.index))
    more = tuple(sorted(small | extra, key=order.index))
    parallel = ParallelConfig(tp=tp, pp=pp, dp=1)
    kw = {"micro_batch_size": mbs, "global_batch_size": 4 * mbs, "sequence_parallel": sp and tp > 1}
    a = estimate_memory(model, _training(fewer, **kw), parallel)
    b = estimate_memory(model, _training(more, **kw), parallel)
    for sa, sb in zip(a.stages, b.stages, strict=True):
        assert sb.peak_bytes <= sa.peak_bytes


def test_recompute_modules_need_selective_megatron() -> None:
    with pytest.raises(ConfigError, match="framework 'megatron'"):
        TrainingConfig(recompute="selective", recompute_modules=["mlp"])
    with pytest.raises(ConfigError, match="needs recompute='selective'"):
        TrainingConfig(framework="megatron", recompute="full", recompute_modules=["mlp"])
    with pytest.raises(ConfigError, match="twice"):
        TrainingConfig(framework="megatron", recompute="selective", recompute_modules=["mlp", "mlp"])
    # the default (the attention core) is torch's selective recompute too
    assert TrainingConfig(recompute="selective").recompute_modules == (M.CORE_ATTN,)


# ---- reading and writing the flags -----------------------------------------------------------------------------

MOE_ARGS: dict[str, Any] = {
    "--num-layers": 4, "--hidden-size": 64, "--num-attention-heads": 4, "--max-position-embeddings": 128,
    "--seq-length": 128, "--micro-batch-size": 1, "--bf16": True, "--num-experts": 4, "--moe-grouped-gemm": True,
    "--tensor-model-parallel-size": 2, "--sequence-parallel": True, "--recompute-granularity": "selective",
}


def test_reader_maps_the_modules_and_writes_them_back() -> None:
    args = MOE_ARGS | {"--recompute-modules": "[layernorm mlp moe_act]"}
    model, training, parallel = from_megatron_args(args, world_size=2)
    assert training.recompute_modules == (M.LAYERNORM, M.MLP, M.MOE_ACT)
    assert from_megatron_args(to_megatron_args(model, training, parallel), world_size=2) == (model, training,
                                                                                              parallel)
    assert from_megatron_args(MOE_ARGS, world_size=2)[1].recompute_modules == (M.CORE_ATTN,)


@pytest.mark.parametrize(("changes", "match"), [
    ({"--recompute-modules": "[moe]"}, "not modelled"),
    ({"--recompute-modules": "[moe_act]", "--moe-grouped-gemm": False}, "needs --moe-grouped-gemm"),
    ({"--recompute-modules": "[mla_up_proj]"}, "needs --multi-latent-attention"),
])
def test_reader_refuses_modules_it_cannot_honour(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        parse_megatron_args(MOE_ARGS | changes, world_size=2)
    assert err.value.field == "--recompute-modules"


def test_reader_reads_latent_attention() -> None:
    args = MOE_ARGS | {"--multi-latent-attention": True, "--qk-layernorm": True, "--q-lora-rank": 32,
                       "--kv-lora-rank": 16, "--qk-head-dim": 16, "--qk-pos-emb-head-dim": 8, "--v-head-dim": 16,
                       "--kv-channels": 128, "--position-embedding-type": "rope", "--disable-bias-linear": True}
    model = from_megatron_args(args, world_size=2)[0]
    assert model.mla == MLAConfig(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                  v_head_dim=16)
    assert model.head_dim == 24 and not model.qk_norm  # --kv-channels is not read with MLA
    configs = from_megatron_args(args, world_size=2)
    assert from_megatron_args(to_megatron_args(*configs), world_size=2) == configs
    with pytest.raises(ConfigError, match="--qk-layernorm"):
        parse_megatron_args(args | {"--qk-layernorm": False}, world_size=2)


def test_layout_places_chunks_as_megatron_does() -> None:
    layout = pipeline_layout("Et*3|(tt|)*6L", 2, 15)
    assert layout.vpp == 4 and layout.chunk_layers == (3, 2, 2, 2, 2, 2, 2, 0) and layout.mtp_layers == 0
    assert pipeline_layout("Et|(tt|)*6mL", 2, 13).mtp_layers == 1
    args = MOE_ARGS | {"--num-layers": 5, "--pipeline-model-parallel-size": 2,
                       "--pipeline-model-parallel-layout": "Et|tt|t|tL", "--global-batch-size": 4}
    configs = from_megatron_args(args, world_size=4)
    assert configs[2].vpp == 2 and configs[2].stage_layers == (1, 2, 1, 1)
    written = to_megatron_args(*configs)  # no first/last-stage flags cut it so: written back as a layout
    assert written[written.index("--pipeline-model-parallel-layout") + 1] == "Et|tt|t|tL"
    assert from_megatron_args(written, world_size=4) == configs


@pytest.mark.parametrize(("layout", "match"), [
    ("Ett|ttL", "transformer layers"),
    ("Et|tt|ttL", "multiple"),
    ("Ettt|txL", "unknown layer"),
    ("tEtt|ttL", "start with the embedding"),
    ("Ettm|tttL", "MTP layers must follow"),
])
def test_bad_layouts_are_refused(layout: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        pipeline_layout(layout, 2, 5)
    assert err.value.field == "--pipeline-model-parallel-layout"


def test_layout_excludes_the_other_ways_to_split() -> None:
    args = MOE_ARGS | {"--num-layers": 4, "--pipeline-model-parallel-size": 2,
                       "--pipeline-model-parallel-layout": "Ett|ttL", "--decoder-first-pipeline-num-layers": 2}
    with pytest.raises(ConfigError, match="cannot be combined"):
        parse_megatron_args(args, world_size=4)


# ---- fused cross entropy and tensor-parallel communication overlap ---------------------------------------------

DENSE_ARGS: dict[str, Any] = {
    "--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4, "--max-position-embeddings": 128,
    "--seq-length": 128, "--micro-batch-size": 2, "--bf16": True, "--tensor-model-parallel-size": 2,
}


def test_fused_cross_entropy_adds_one_fp32_logits_buffer_to_the_loss_gradient() -> None:
    model, training, parallel = from_megatron_args(DENSE_ARGS, world_size=2)
    fused = from_megatron_args(DENSE_ARGS | {"--cross-entropy-loss-fusion": True}, world_size=2)[1]
    assert fused.cross_entropy_fusion and not training.cross_entropy_fusion
    from frenzy_core.memory.activations import logit_bytes

    kw: dict[str, Any] = {"tp": 2, "cp": 1, "seq_len": 128, "micro_batch_size": 2}
    plain, comp = logit_bytes(model, training, **kw), logit_bytes(model, fused, **kw)
    rows = model.vocab_size / 2 * 128 * 2  # vocabulary shard x tokens
    assert float(comp.backward_peak - plain.backward_peak) == 4 * rows
    assert float(comp.forward_peak) == float(plain.forward_peak) and float(comp.saved) == float(plain.saved)
    assert from_megatron_args(to_megatron_args(model, fused, parallel), world_size=2)[1] == fused
    with pytest.raises(ConfigError) as err:
        parse_megatron_args(DENSE_ARGS | {"--cross-entropy-loss-fusion": True, "--cross-entropy-fusion-impl": "te"},
                            world_size=2)
    assert err.value.field == "--cross-entropy-fusion-impl"
    with pytest.raises(ConfigError, match="cross_entropy_fusion"):
        TrainingConfig(cross_entropy_fusion=True)  # framework torch


def test_tp_comm_overlap_keeps_three_more_cublas_workspaces() -> None:
    args = DENSE_ARGS | {"--sequence-parallel": True}
    model, training, parallel = from_megatron_args(args, world_size=2)
    overlap = from_megatron_args(args | {"--tp-comm-overlap": True}, world_size=2)[1]
    a = estimate_memory(model, training, parallel).stages[-1].breakdown["workspaces"]
    b = estimate_memory(model, overlap, parallel).stages[-1].breakdown["workspaces"]
    assert b - a == 3 * (32 * 2**20 + 1024)
    assert from_megatron_args(to_megatron_args(model, overlap, parallel), world_size=2)[1] == overlap
    with pytest.raises(ConfigError) as err:
        parse_megatron_args(DENSE_ARGS | {"--tp-comm-overlap": True}, world_size=2)
    assert err.value.field == "--tp-comm-overlap"


def test_latent_down_projections_are_whole_on_every_tensor_parallel_rank() -> None:
    from frenzy_core.memory.shards import layer_constants

    plain = layer_constants(MLA.model_copy(update={"mla": None, "head_dim": 24}))
    c = layer_constants(MLA)
    # q down (64 x 32), kv down (64 x (16 + 8)) and the two latent RMSNorm weights (32 + 16), beside the norms
    whole = 64 * 32 + 64 * 24 + 32 + 16
    assert c.attn_replicated == plain.attn_replicated + whole
