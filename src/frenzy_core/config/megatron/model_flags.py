"""The model half of a Megatron-LM command line: sizes, MLP, norm, positions, vocabulary, MoE."""

from __future__ import annotations

from typing import Any

from frenzy_core.config.architecture import ArchKind, MLAConfig, MLPKind, MoEConfig, PositionEmbedding, RopeScaling
from frenzy_core.config.megatron.args import FlagReader
from frenzy_core.config.megatron.pattern import moe_layer_pattern, moe_placement
from frenzy_core.config.megatron.tables import (
    BERT_WORDPIECE_VOCAB_SIZE,
    GPT2_BPE_VOCAB_SIZE,
    MAKE_VOCAB_DIVISIBLE_BY,
    MLP_SWITCHES,
    NORM_NAMES,
    POSITION_NAMES,
    megatron_padded_vocab_size,
)
from frenzy_core.config.model import ModelConfig
from frenzy_core.errors import ConfigError

__all__ = ["read_model"]

Problems = list[tuple[str, str]]

_DROPOUT = 0.1  # arguments.py: --hidden-dropout and --attention-dropout defaults
_MOE_TOPK = 2  # arguments.py: --moe-router-topk default
_ROTARY_BASE = 10000  # arguments.py: --rotary-base default
_NORM_EPSILON = 1e-5  # TransformerConfig.layernorm_epsilon (--norm-epsilon) default
_ROPE_SCALING_FACTOR = 8.0  # arguments.py: --rope-scaling-factor default
# rotary_pos_embedding.py: --use-rope-scaling is Llama 3's scaling with these fixed parameters.
LLAMA3_ROPE: dict[str, Any] = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# arguments.py (_add_mla_args): --kv-lora-rank, --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim defaults
_MLA_DEFAULTS = {"--kv-lora-rank": 32, "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64, "--v-head-dim": 128}
_MOE_DETAILS = ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
                "--moe-layer-freq", "--moe-expert-capacity-factor", "--moe-shared-expert-gate")


def read_model(r: FlagReader, model_type: str, tp: int, problems: Problems) -> ModelConfig:
    """The :class:`ModelConfig` the flags describe (``problems`` collects flags that are not modelled)."""
    num_layers = r.required("--num-layers")
    hidden = r.required("--hidden-size")
    heads = r.required("--num-attention-heads")
    mlp = _mlp(r)
    ffn = r.positive("--ffn-hidden-size")
    if ffn is None:  # validate_args: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if mlp is MLPKind.SWIGLU else 4 * hidden
    add_bias = not r.switch("--disable-bias-linear")
    bert = model_type == "bert"
    binary_head = bert and not r.switch("--bert-no-binary-head")
    mla = _mla(r, add_bias, problems)
    return ModelConfig(
        arch=ArchKind.ENCODER if bert else ArchKind.DECODER,
        num_layers=num_layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=_kv_heads(r, heads),
        head_dim=mla.qk_head_dim if mla else _head_dim(r, hidden, heads), ffn_hidden_size=ffn, mlp=mlp, mla=mla,
        norm=next(k for k, v in NORM_NAMES.items() if v == r.choice("--normalization", "LayerNorm",
                                                                     tuple(NORM_NAMES.values()))),
        vocab_size=_vocab_size(r, model_type, tp),
        max_position_embeddings=r.required("--max-position-embeddings"),
        # pretrain_bert.py: num_tokentypes = 2 if args.bert_binary_head else 0; the binary head brings the pooler.
        type_vocab_size=2 if binary_head else 0, pooler=binary_head,
        tied_embeddings=not r.switch("--untie-embeddings-and-output-weights"),
        qkv_bias=add_bias or r.switch("--add-qkv-bias"),  # validate_args: add_bias_linear implies add_qkv_bias
        linear_bias=add_bias, qk_norm=r.switch("--qk-layernorm") and mla is None,
        hidden_dropout=_dropout(r, "--hidden-dropout"), attention_dropout=_dropout(r, "--attention-dropout"),
        moe=_moe(r, num_layers, ffn, tp, problems),
        norm_eps=r.number("--norm-epsilon", _NORM_EPSILON),
        **_positions(r, problems),
    )


def _mla(r: FlagReader, add_bias: bool, problems: Problems) -> MLAConfig | None:
    """--multi-latent-attention: the latent ranks and head widths (Megatron ignores --kv-channels with it). The
    latent norms exist only with --qk-layernorm (gpt_layer_specs.py: q/kv up projections with fused norms)."""
    if not r.switch("--multi-latent-attention"):
        r.used.update(("--q-lora-rank", *_MLA_DEFAULTS))
        return None
    r.used.add("--kv-channels")
    flag = "--multi-latent-attention"
    if _positions(r, [])["position_embedding"] is not PositionEmbedding.ROTARY:
        raise ConfigError(f"{flag} with learned or no position embeddings is not modelled (latent attention applies "
                          "rotary positions to its rotary head part)", field=flag, value=True,
                          hint="add --position-embedding-type rope")
    if add_bias:
        raise ConfigError(f"{flag} with linear biases is not modelled", field=flag, value=True,
                          hint="add --disable-bias-linear")
    if not r.switch("--qk-layernorm"):
        problems.append(("--multi-latent-attention", "latent attention without --qk-layernorm (no latent norms) is "
                                                     "not modelled"))
    dims: dict[str, int] = {}
    for flag, default in _MLA_DEFAULTS.items():
        value = r.positive(flag, default)
        assert value is not None
        dims[flag] = value
    return MLAConfig(q_lora_rank=r.positive("--q-lora-rank"), kv_lora_rank=dims["--kv-lora-rank"],
                     qk_nope_head_dim=dims["--qk-head-dim"], qk_rope_head_dim=dims["--qk-pos-emb-head-dim"],
                     v_head_dim=dims["--v-head-dim"])


def _mlp(r: FlagReader) -> MLPKind:
    chosen = [kind for kind, flag in MLP_SWITCHES.items() if flag is not None and r.switch(flag)]
    if len(chosen) > 1:
        raise ConfigError("--swiglu, --squared-relu and --quick-geglu exclude each other", field="--swiglu")
    return chosen[0] if chosen else MLPKind.GELU


def _head_dim(r: FlagReader, hidden: int, heads: int) -> int:
    head_dim = r.positive("--kv-channels")
    if head_dim is not None:
        return head_dim
    if hidden % heads != 0:
        raise ConfigError(f"--hidden-size={hidden} is not divisible by --num-attention-heads={heads}",
                          field="--kv-channels", hint="set --kv-channels")
    return hidden // heads


def _kv_heads(r: FlagReader, heads: int) -> int:
    groups = r.positive("--num-query-groups", 1)
    kv_heads = groups if r.switch("--group-query-attention") and groups is not None else heads
    if heads % kv_heads != 0:
        raise ConfigError(f"--num-query-groups={kv_heads} does not divide --num-attention-heads={heads}",
                          field="--num-query-groups", value=kv_heads)
    return kv_heads


def _positions(r: FlagReader, problems: Problems) -> dict[str, Any]:
    """Position scheme, rotary base and rotary scaling."""
    name = r.choice("--position-embedding-type", "learned_absolute", (*POSITION_NAMES, "relative"))
    if r.switch("--use-rotary-position-embeddings"):
        name = "rope"
    if name == "relative":
        problems.append(("--position-embedding-type", "relative position biases are not modelled"))
    position = POSITION_NAMES.get(str(name), PositionEmbedding.ROTARY)
    theta = r.number("--rotary-base", _ROTARY_BASE)
    factor = r.number("--rope-scaling-factor", _ROPE_SCALING_FACTOR)
    interpolation = r.positive("--rotary-seq-len-interpolation-factor")
    scaling = None
    if r.switch("--use-rope-scaling"):
        scaling = RopeScaling(kind="llama3", factor=factor, **LLAMA3_ROPE)
    elif interpolation is not None:
        scaling = RopeScaling(kind="linear", factor=float(interpolation))
    if position is not PositionEmbedding.ROTARY:
        return {"position_embedding": position}
    return {"position_embedding": position, "rope_theta": theta, "rope_scaling": scaling}


def _dropout(r: FlagReader, flag: str) -> float:
    p = r.number(flag, _DROPOUT)
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"{flag} must be in [0, 1), got {p}", field=flag, value=p)
    return p


def _vocab_size(r: FlagReader, model_type: str, tp: int) -> int:
    """Padded vocabulary rows: --vocab-size (NullTokenizer adds an EOD token), else the tokenizer default."""
    tokenizer = r.choice("--tokenizer-type", None)
    given = r.positive("--vocab-size")
    if given is not None:
        vocab = given + 1 if tokenizer == "NullTokenizer" else given  # _NullTokenizer.vocab_size = n + 1
    elif tokenizer == "NullTokenizer":
        raise ConfigError("--tokenizer-type NullTokenizer needs --vocab-size", field="--vocab-size")
    else:
        vocab = BERT_WORDPIECE_VOCAB_SIZE if model_type == "bert" else GPT2_BPE_VOCAB_SIZE
    divisible_by = r.positive("--make-vocab-size-divisible-by", MAKE_VOCAB_DIVISIBLE_BY)
    assert divisible_by is not None
    return megatron_padded_vocab_size(vocab, tp, divisible_by)


def _moe(r: FlagReader, num_layers: int, ffn: int, tp: int, problems: Problems) -> MoEConfig | None:
    experts = r.integer("--num-experts")
    if not experts:  # validate_args: --num-experts 0 means no MoE; MoE details without experts change nothing
        r.used.update(_MOE_DETAILS)
        return None
    if experts < 0:
        raise ConfigError(f"--num-experts must be positive, got {experts}", field="--num-experts", value=experts)
    top_k = r.positive("--moe-router-topk", _MOE_TOPK)
    expert_ffn = r.positive("--moe-ffn-hidden-size", ffn)  # validate_args: defaults to ffn_hidden_size
    shared = r.positive("--moe-shared-expert-intermediate-size")
    first_dense, interval = 0, 1
    if r.has("--moe-layer-freq"):
        r.used.add("--moe-layer-freq")
        placement = moe_placement(moe_layer_pattern(r.raw["--moe-layer-freq"], num_layers))
        if placement is None:
            problems.append(("--moe-layer-freq", "only 'first n dense, then every k-th layer' placements are modelled"))
        else:
            first_dense, interval = placement
    capacity = r.number("--moe-expert-capacity-factor", -1.0)
    assert top_k is not None and expert_ffn is not None
    if top_k > experts:
        raise ConfigError(f"--moe-router-topk={top_k} exceeds --num-experts={experts}", field="--moe-router-topk",
                          value=top_k)
    return MoEConfig(
        num_experts=experts, top_k=top_k, expert_ffn_hidden_size=expert_ffn,
        num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared or 0,
        shared_expert_gate=r.switch("--moe-shared-expert-gate"), layer_interval=interval,
        first_dense_layers=first_dense, capacity_factor=capacity if capacity > 0 else None)
