"""Reading Megatron-LM command lines: defaults, vocab padding, every reference case, bad input, round trip."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core.config import (
    ArchKind,
    Attention,
    Framework,
    MLPKind,
    ModelConfig,
    MoEConfig,
    NormKind,
    Optimizer,
    OptimizerImpl,
    ParallelConfig,
    PipelineSchedule,
    PositionEmbedding,
    Precision,
    Recompute,
    RecomputeMethod,
    TrainingConfig,
)
from frenzy_core.config.megatron import (
    from_megatron_args,
    megatron_padded_vocab_size,
    parse_megatron_args,
    to_megatron_args,
)
from frenzy_core.errors import ConfigError

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REFERENCE = SHARED / "reference" / "megatron_measured_memory.json"

MINIMAL: dict[str, Any] = {
    "--num-layers": 2,
    "--hidden-size": 64,
    "--num-attention-heads": 4,
    "--max-position-embeddings": 128,
    "--seq-length": 128,
    "--micro-batch-size": 1,
}


def _cases() -> list[dict[str, Any]]:
    if not REFERENCE.exists():
        pytest.skip(f"reference data {REFERENCE} is absent (it lives beside the project, not in it)")
    cases: list[dict[str, Any]] = json.loads(REFERENCE.read_text())
    return cases


def _model_type(test: str) -> Literal["gpt", "bert"]:
    return "bert" if test.startswith("bert/") else "gpt"


def _case(name: str) -> dict[str, Any]:
    for case in _cases():
        if case["test"] == name:
            return case
    raise AssertionError(f"no reference case {name}")


# ---- defaults ----------------------------------------------------------------------------------------------


def test_defaults_follow_megatron_argument_parser() -> None:
    model, training, parallel = from_megatron_args(MINIMAL, world_size=1)
    assert model.arch is ArchKind.DECODER
    assert model.ffn_hidden_size == 256  # 4 x hidden
    assert model.head_dim == 16 and model.num_kv_heads == 4  # kv channels = hidden / heads, MHA
    assert model.mlp is MLPKind.GELU and model.norm is NormKind.LAYERNORM
    assert model.position_embedding is PositionEmbedding.LEARNED and model.max_position_embeddings == 128
    assert model.vocab_size == 50304  # GPT-2 BPE 50,257 padded to a multiple of 128
    assert model.tied_embeddings and model.linear_bias and model.qkv_bias
    assert model.hidden_dropout == 0.1 and model.attention_dropout == 0.1
    assert model.moe is None
    assert training.precision is Precision.FP32  # neither --bf16 nor --fp16
    assert training.optimizer is Optimizer.ADAMW and training.optimizer_impl is OptimizerImpl.FUSED
    assert training.framework is Framework.MEGATRON
    assert training.global_batch_size is None and training.micro_batch_size == 1 and training.seq_len == 128
    assert training.recompute is Recompute.NONE and not training.distributed_optimizer
    assert training.attention is Attention.FLASH  # TE with the "auto" backend
    assert parallel == ParallelConfig()


def test_swiglu_ffn_default_is_two_thirds_of_4h_rounded_down_to_64() -> None:
    model, _, _ = from_megatron_args(
        {**MINIMAL, "--hidden-size": 4096, "--num-attention-heads": 32, "--swiglu": True}, world_size=1
    )
    # 4 * 4096 * 2/3 = 10922.7 -> 170 * 64
    assert model.mlp is MLPKind.SWIGLU and model.ffn_hidden_size == 10880


@pytest.mark.parametrize(
    ("vocab", "tp", "divisible_by", "padded"),
    [
        (50257, 1, 128, 50304),
        (50257, 2, 128, 50432),
        (50257, 4, 128, 50688),
        (50257, 8, 128, 51200),
        (30522, 1, 128, 30592),
        (30522, 2, 128, 30720),
        (50257, 2, 3232, 51712),
        (50304, 1, 128, 50304),
    ],
)
def test_vocab_padding(vocab: int, tp: int, divisible_by: int, padded: int) -> None:
    assert megatron_padded_vocab_size(vocab, tp, divisible_by) == padded
    args = {
        **MINIMAL,
        "--num-attention-heads": 8,
        "--vocab-size": vocab,
        "--make-vocab-size-divisible-by": divisible_by,
        "--tensor-model-parallel-size": tp,
    }
    model, _, _ = from_megatron_args(args, world_size=tp)
    assert model.vocab_size == padded


def test_null_tokenizer_adds_an_eod_token() -> None:
    args = {**MINIMAL, "--vocab-size": 256, "--tokenizer-type": "NullTokenizer"}
    model, _, _ = from_megatron_args(args, world_size=1)
    assert model.vocab_size == 384  # 257 tokens padded to a multiple of 128


def test_list_and_dict_forms_agree() -> None:
    tokens = [
        "--num-layers",
        "2",
        "--hidden-size=64",
        "--num-attention-heads",
        "4",
        "--max-position-embeddings",
        "128",
        "--seq-length",
        "128",
        "--micro-batch-size",
        "1",
        "--bf16",
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "1",
    ]
    as_dict = {
        **MINIMAL,
        "--bf16": True,
        "--recompute-granularity": "full",
        "--recompute-method": "block",
        "--recompute-num-layers": 1,
    }
    assert from_megatron_args(tokens, world_size=2) == from_megatron_args(as_dict, world_size=2)
    _, training, parallel = from_megatron_args(tokens, world_size=2)
    assert training.recompute is Recompute.FULL and training.recompute_method is RecomputeMethod.BLOCK
    assert parallel.dp == 2


def test_gqa_rope_rmsnorm_untied_no_bias() -> None:
    args = {
        **MINIMAL,
        "--group-query-attention": True,
        "--num-query-groups": 2,
        "--position-embedding-type": "rope",
        "--normalization": "RMSNorm",
        "--untie-embeddings-and-output-weights": True,
        "--disable-bias-linear": True,
        "--add-qkv-bias": True,
        "--squared-relu": True,
        "--qk-layernorm": True,
    }
    model, _, _ = from_megatron_args(args, world_size=1)
    assert model.num_kv_heads == 2 and model.position_embedding is PositionEmbedding.ROTARY
    assert model.norm is NormKind.RMSNORM and not model.tied_embeddings
    assert model.qkv_bias and not model.linear_bias and model.mlp is MLPKind.SQUARED_RELU and model.qk_norm


def test_sequence_parallel_is_off_without_tensor_parallelism() -> None:
    _, training, _ = from_megatron_args({**MINIMAL, "--sequence-parallel": True}, world_size=1)
    assert not training.sequence_parallel
    _, training, _ = from_megatron_args(
        {**MINIMAL, "--sequence-parallel": True, "--tensor-model-parallel-size": 2}, world_size=2
    )
    assert training.sequence_parallel


@pytest.mark.parametrize(
    ("freq", "first_dense", "interval"),
    [
        (1, 0, 1),
        (2, 0, 2),
        ("([0]*1+[1]*3)", 1, 1),
        ("[1,0,1,0]", 0, 2),
        ("([0]*1+[1]*1)+[0,1]", 1, 2),
    ],
)
def test_moe_layer_freq(freq: object, first_dense: int, interval: int) -> None:
    args = {**MINIMAL, "--num-layers": 4, "--num-experts": 4, "--moe-layer-freq": freq}
    model, _, _ = from_megatron_args(args, world_size=1)
    assert model.moe is not None
    assert (model.moe.first_dense_layers, model.moe.layer_interval) == (first_dense, interval)
    assert (
        model.moe.top_k == 2 and model.moe.expert_ffn_hidden_size == 256
    )  # defaults: top-2, ffn_hidden_size


def test_moe_layer_freq_rejects_code_and_unmodelled_patterns() -> None:
    args = {**MINIMAL, "--num-layers": 4, "--num-experts": 4}
    with pytest.raises(ConfigError) as err:
        from_megatron_args({**args, "--moe-layer-freq": "__import__('os')"}, world_size=1)
    assert err.value.field == "--moe-layer-freq"
    with pytest.raises(ConfigError, match="longer than"):
        from_megatron_args({**args, "--moe-layer-freq": "[1]*999999999"}, world_size=1)
    with pytest.raises(ConfigError, match="--moe-layer-freq"):
        from_megatron_args({**args, "--moe-layer-freq": "[1,1,0,1]"}, world_size=1)
    with pytest.raises(ConfigError, match="one 0 or 1 per layer"):
        from_megatron_args({**args, "--moe-layer-freq": "[1,0]"}, world_size=1)


# ---- hand-checked reference cases ------------------------------------------------------------------------


def test_bert_tp1_pp2_by_hand() -> None:
    case = _case("bert/bert_mcore_tp1_pp2")
    model, training, parallel = from_megatron_args(case["model_args"], world_size=8, model_type="bert")
    assert model == ModelConfig(
        arch=ArchKind.ENCODER,
        num_layers=24,
        hidden_size=1024,
        num_attention_heads=16,
        ffn_hidden_size=4096,
        vocab_size=30592,
        max_position_embeddings=512,
        type_vocab_size=2,
        pooler=True,
        qkv_bias=True,
        linear_bias=True,
        hidden_dropout=0.1,
        attention_dropout=0.1,
    )
    assert training == TrainingConfig(
        seq_len=512,
        micro_batch_size=4,
        global_batch_size=128,
        precision=Precision.BF16_MIXED,
        optimizer=Optimizer.ADAMW,
        optimizer_impl=OptimizerImpl.FUSED,
        attention=Attention.EAGER,
        framework=Framework.MEGATRON,
    )
    assert parallel == ParallelConfig(dp=4, tp=1, pp=2)


def test_gpt_tp2_pp2_cp2_null_tokenizer_by_hand() -> None:
    case = _case("gpt/gpt3_mcore_te_tp2_pp2_cp2")
    model, training, parallel = from_megatron_args(case["model_args"], world_size=8)
    assert model.vocab_size == 50432  # NullTokenizer: 50,257 + 1, padded to a multiple of 128 x 2
    assert model.hidden_dropout == 0.0 and model.attention_dropout == 0.0
    assert training.sequence_parallel and training.attention is Attention.FLASH
    assert parallel == ParallelConfig(dp=1, tp=2, pp=2, cp=2)


def test_interleaved_case_by_hand() -> None:
    case = _case("gpt/gpt3_mcore_te_tp1_pp4_vp1")
    _, _, parallel = from_megatron_args(case["model_args"], world_size=8)
    # 12 layers / pp 4 = 3 per rank, 1 per virtual stage -> 3 virtual stages
    assert parallel == ParallelConfig(dp=2, tp=1, pp=4, vpp=3, schedule=PipelineSchedule.INTERLEAVED)


def test_moe_swiglu_case_by_hand() -> None:
    case = _case("moe/gpt3_mcore_te_tp1_pp1_te_4experts_groupedGEMM_op_fuser")
    model, _, parallel = from_megatron_args(case["model_args"], world_size=8)
    assert model.mlp is MLPKind.SWIGLU and model.ffn_hidden_size == 1344  # int(4*512*2/3/64)*64
    assert model.moe is not None and model.moe.num_experts == 4 and model.moe.top_k == 1
    assert model.moe.expert_ffn_hidden_size == 1344
    assert not model.linear_bias and not model.qkv_bias
    assert parallel.dp == 8 and parallel.ep == 1


# Reference cases that use what the configs cannot express (read off their flags by hand).
UNSUPPORTED_CASES = {
    "bert/bert_release": "tp 8 x pp 8 needs 64 GPUs, not 8",
    "moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading": "MTP",
    "moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_scoped_cudagraph": "MTP, CUDA graphs",
}


def test_every_reference_case_parses_or_names_an_unsupported_flag() -> None:
    refused = set()
    for case in _cases():
        args = case["model_args"]
        model_type = _model_type(case["test"])
        try:
            model, training, parallel = from_megatron_args(args, world_size=8, model_type=model_type)
        except ConfigError as exc:
            assert exc.field in args, (
                f"{case['test']}: error names {exc.field!r}, not one of its flags: {exc}"
            )
            refused.add(case["test"])
            continue
        assert model.num_layers == args["--num-layers"] and model.hidden_size == args["--hidden-size"]
        assert training.micro_batch_size == args["--micro-batch-size"]
        assert parallel.tp == args.get("--tensor-model-parallel-size", 1)
        assert parallel.world_size == 8
    assert refused == set(UNSUPPORTED_CASES)


# ---- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "world_size", "field"),
    [
        ({"--num-layers": "twelve"}, 1, "--num-layers"),
        ({"--num-layers": 2.5}, 1, "--num-layers"),
        ({"--hidden-size": -64}, 1, "--hidden-size"),
        ({"--tensor-model-parallel-size": 4}, 6, "--tensor-model-parallel-size"),
        ({"--tensor-model-parallel-size": 8}, 8, "--tensor-model-parallel-size"),
        ({"--multi-latent-attention": True}, 1, "--multi-latent-attention"),
        ({"--mtp-num-layers": 1}, 1, "--mtp-num-layers"),
        ({"--frobnicate-activations": True}, 1, "--frobnicate-activations"),
        ({"--global-batch-size": 3}, 2, "--global-batch-size"),
        ({"--bf16": "yes"}, 1, "--bf16"),
        ({"--normalization": "BatchNorm"}, 1, "--normalization"),
        ({"--recompute-granularity": "full"}, 1, "--recompute-method"),
        ({"--seq-length": 256}, 1, "--max-position-embeddings"),
        ({"--num-experts": 3, "--expert-model-parallel-size": 2}, 2, "--expert-model-parallel-size"),
    ],
)
def test_bad_input_is_a_config_error_naming_the_flag(
    changes: dict[str, Any], world_size: int, field: str
) -> None:
    with pytest.raises(ConfigError) as err:
        from_megatron_args({**MINIMAL, **changes}, world_size=world_size)
    assert err.value.field == field, str(err.value)


def test_missing_required_flag_and_bad_world_size() -> None:
    args = dict(MINIMAL)
    del args["--num-layers"]
    with pytest.raises(ConfigError) as err:
        from_megatron_args(args, world_size=1)
    assert err.value.field == "--num-layers"
    with pytest.raises(ConfigError):
        from_megatron_args(MINIMAL, world_size=0)
    with pytest.raises(ConfigError):
        from_megatron_args(["12", "--num-layers"], world_size=1)


def test_memory_irrelevant_flags_are_ignored_silently() -> None:
    args = {
        **MINIMAL,
        "--lr": 1e-4,
        "--split": "949,50,1",
        "--seed": 7,
        "--log-interval": 1,
        "--save": "/x",
        "--tensorboard-dir": "/tb",
        "--weight-decay": 0.1,
        "--no-gradient-accumulation-fusion": True,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert from_megatron_args(args, world_size=1) == from_megatron_args(MINIMAL, world_size=1)


def test_not_strict_lists_and_warns_about_skipped_flags() -> None:
    args = {
        **MINIMAL,
        "--fp32-residual-connection": True,
        "--cuda-graph-impl": "transformer_engine",
        "--mtp-num-layers": 0,
    }
    job = parse_megatron_args(args, world_size=1, strict=False)
    assert [item.split(":")[0] for item in job.ignored] == ["--cuda-graph-impl", "--fp32-residual-connection"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, _, _ = from_megatron_args(args, world_size=1, strict=False)
    assert model == job.model
    assert sorted(str(w.message).split()[2] for w in caught) == [
        "--cuda-graph-impl:",
        "--fp32-residual-connection:",
    ]


# ---- writing a command line --------------------------------------------------------------------------------


def test_round_trip_of_every_supported_reference_case() -> None:
    for case in _cases():
        model_type = _model_type(case["test"])
        try:
            configs = from_megatron_args(case["model_args"], world_size=8, model_type=model_type)
        except ConfigError:
            continue
        again = from_megatron_args(to_megatron_args(*configs), world_size=8, model_type=model_type)
        assert again == configs, case["test"]


def test_round_trip_of_a_rich_config() -> None:
    model = ModelConfig(
        num_layers=8,
        hidden_size=256,
        num_attention_heads=8,
        num_kv_heads=2,
        mlp=MLPKind.SWIGLU,
        norm=NormKind.RMSNORM,
        vocab_size=32000,
        position_embedding=PositionEmbedding.ROTARY,
        tied_embeddings=False,
        max_position_embeddings=4096,
        moe=MoEConfig(
            num_experts=8,
            top_k=2,
            expert_ffn_hidden_size=128,
            num_shared_experts=1,
            shared_expert_ffn_hidden_size=256,
            first_dense_layers=1,
            layer_interval=2,
        ),
    )
    training = TrainingConfig(
        seq_len=4096,
        micro_batch_size=2,
        global_batch_size=64,
        precision=Precision.FP8_MIXED,
        optimizer_impl=OptimizerImpl.FUSED,
        distributed_optimizer=True,
        recompute=Recompute.FULL,
        recompute_method=RecomputeMethod.UNIFORM,
        recompute_num_layers=2,
        sequence_parallel=True,
        framework=Framework.MEGATRON,
    )
    parallel = ParallelConfig(dp=4, tp=2, pp=2, vpp=2, ep=4)
    assert from_megatron_args(to_megatron_args(model, training, parallel), world_size=16) == (
        model,
        training,
        parallel,
    )


def test_to_megatron_args_refuses_what_megatron_cannot_express() -> None:
    model = ModelConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1024, parallel_block=True
    )
    with pytest.raises(ConfigError) as err:
        to_megatron_args(model, TrainingConfig(), ParallelConfig())
    assert err.value.field == "model.parallel_block"


def test_flag_table_is_consistent() -> None:
    from frenzy_core.config.megatron.args import flag_table
    from frenzy_core.hardware.gpus import load_gpu_specs

    table = flag_table()
    assert set(table.gpus) == set(load_gpu_specs()), "every catalogue GPU needs its Megatron device facts"
    assert not set(table.unsupported) & table.ignored
    assert all(reason.strip() for reason in table.unsupported.values())
    flags = [*table.unsupported, *table.ignored, *table.ignored_prefixes]
    assert all(flag.startswith("--") for flag in flags)


@st.composite
def _megatron_configs(draw: st.DrawFn) -> tuple[ModelConfig, TrainingConfig, ParallelConfig]:
    tp, pp, cp, dp = (draw(st.sampled_from(v)) for v in ([1, 2, 4], [1, 2], [1, 2], [1, 2, 4]))
    vpp = draw(st.sampled_from([1, 2])) if pp > 1 else 1
    heads = tp * draw(st.integers(1, 4))
    mlp = draw(st.sampled_from([MLPKind.GELU, MLPKind.SWIGLU, MLPKind.SQUARED_RELU]))
    linear_bias = draw(st.booleans())
    num_layers = pp * vpp * draw(st.integers(1, 3))
    moe = None
    if draw(st.booleans()):
        ep = draw(st.sampled_from([e for e in (1, 2, 4) if (dp * cp) % e == 0]))
        experts = ep * draw(st.integers(1, 2)) if ep > 1 else draw(st.integers(2, 3))
        moe = MoEConfig(
            num_experts=experts,
            top_k=draw(st.integers(1, experts)),
            expert_ffn_hidden_size=32,
            # one layer cannot tell interval 1 from 2: keep the pattern unambiguous
            layer_interval=draw(st.sampled_from([1, 2])) if num_layers > 1 else 1,
        )
    else:
        ep = 1
    model = ModelConfig(
        num_layers=num_layers,
        hidden_size=64 * heads,  # swiglu default ffn = int(4h*2/3/64)*64 is 0 below h = 48
        num_attention_heads=heads,
        mlp=mlp,
        norm=draw(st.sampled_from(list(NormKind))),
        vocab_size=tp * draw(st.integers(100, 1000)),
        position_embedding=draw(st.sampled_from(list(PositionEmbedding))),
        max_position_embeddings=4096,
        tied_embeddings=draw(st.booleans()),
        linear_bias=linear_bias,
        qkv_bias=linear_bias or draw(st.booleans()),
        hidden_dropout=draw(st.sampled_from([0.0, 0.1])),
        attention_dropout=draw(st.sampled_from([0.0, 0.1])),
        moe=moe,
    )
    recompute = draw(st.sampled_from(list(Recompute)))
    mbs = draw(st.integers(1, 2))
    optimizer = draw(st.sampled_from([Optimizer.ADAMW, Optimizer.SGD, Optimizer.SGD_MOMENTUM]))
    dist_opt = draw(st.booleans())
    training = TrainingConfig(
        seq_len=64 * cp,
        micro_batch_size=mbs,
        global_batch_size=mbs * dp * pp * draw(st.integers(1, 2)),
        precision=draw(
            st.sampled_from([Precision.FP32, Precision.BF16_MIXED, Precision.FP16_MIXED, Precision.FP8_MIXED])
        ),
        optimizer=optimizer,
        optimizer_impl=OptimizerImpl.FUSED,
        distributed_optimizer=dist_opt,
        recompute=recompute,
        recompute_method=draw(st.sampled_from(list(RecomputeMethod)))
        if recompute is Recompute.FULL
        else RecomputeMethod.UNIFORM,
        recompute_num_layers=1 if recompute is Recompute.FULL else None,
        attention=draw(st.sampled_from([Attention.EAGER, Attention.FLASH])),
        sequence_parallel=tp > 1 and draw(st.booleans()),
        # Megatron-LM offloads the optimizer with the distributed optimizer and Adam only
        offload_optimizer=draw(st.sampled_from(["none", "cpu"])) if dist_opt and optimizer is Optimizer.ADAMW
        else "none",
        framework=Framework.MEGATRON,
    )
    return model, training, ParallelConfig(dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep)


@settings(max_examples=60, deadline=None)
@given(_megatron_configs())
def test_to_megatron_args_round_trips(configs: tuple[ModelConfig, TrainingConfig, ParallelConfig]) -> None:
    world_size = configs[2].world_size
    assert from_megatron_args(to_megatron_args(*configs), world_size=world_size) == configs


def test_zero_1_is_written_as_the_distributed_optimizer() -> None:
    model = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1024)
    args = to_megatron_args(model, TrainingConfig(zero_stage=1), ParallelConfig(dp=2))
    assert "--use-distributed-optimizer" in args
    _, training, _ = from_megatron_args(args, world_size=2)
    assert training.distributed_optimizer and training.effective_zero_stage == 1
    with pytest.raises(ConfigError) as err:
        to_megatron_args(model, TrainingConfig(zero_stage=2), ParallelConfig(dp=2))
    assert err.value.field == "training.zero_stage"


MINIMAL_TOKENS = [token for flag, value in MINIMAL.items() for token in (flag, str(value))]
OFFLOAD = ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0", "--use-precision-aware-optimizer",
           "--overlap-cpu-optimizer-d2h-h2d"]


def test_optimizer_cpu_offload_is_read_as_the_offloaded_optimizer() -> None:
    """Megatron-Core's HybridDeviceOptimizer with every parameter on the host (fraction 1.0): the recipe's
    offload_optimizer='cpu' (the writer's flags read back); a fraction without the offload does nothing."""
    base = to_megatron_args(ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1024),
                            TrainingConfig(framework="megatron", optimizer_impl="fused", distributed_optimizer=True),
                            ParallelConfig())
    _, training, _ = from_megatron_args([*base, *OFFLOAD], world_size=1)
    assert training.offload_optimizer.value == "cpu"
    _, plain, _ = from_megatron_args([*base, "--optimizer-offload-fraction", "0.5"], world_size=1)
    assert plain.offload_optimizer.value == "none" and plain == training.replace(offload_optimizer="none")


@pytest.mark.parametrize(("flags", "field"), [
    (["--optimizer-cpu-offload", "--optimizer-offload-fraction", "0.5", "--use-precision-aware-optimizer"],
     "--optimizer-offload-fraction"),
    # the default fraction, 0.0: the hybrid optimizer keeps everything on the GPU
    (["--optimizer-cpu-offload", "--use-precision-aware-optimizer"], "--optimizer-offload-fraction"),
    (["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"], "--use-precision-aware-optimizer"),
    (OFFLOAD[:-1], "--use-distributed-optimizer"),  # get_megatron_optimizer refuses it
    ([*OFFLOAD, "--use-distributed-optimizer", "--optimizer", "sgd"], "--optimizer"),  # the config asserts adam
    # the copies one after another: not what the time model times
    ([*OFFLOAD[:-1], "--use-distributed-optimizer"], "--overlap-cpu-optimizer-d2h-h2d"),
])
def test_optimizer_cpu_offload_refuses_what_the_memory_model_cannot_say(flags: list[str], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_megatron_args([*MINIMAL_TOKENS, *flags], world_size=1)
    assert err.value.field == field and "--optimizer" in (err.value.hint or "") + str(err.value)


def test_precision_aware_optimizer_alone_stays_unsupported() -> None:
    with pytest.raises(ConfigError) as err:
        from_megatron_args([*MINIMAL_TOKENS, "--use-precision-aware-optimizer"], world_size=1)
    assert err.value.field == "--use-precision-aware-optimizer"
