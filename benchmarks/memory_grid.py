"""The memory validation grid: published Hugging Face configs (real widths and vocabularies, fewer layers) and the
training cases run on them by ``memory_accuracy.py`` (CPU probe vs estimator) and ``gpu_memory_check.py`` (GPU).

Each config is made by the family's own ``transformers.<Family>Config(...)`` from the sizes in the model's
published ``config.json`` (source beside each), so it is a config as Transformers 5 writes it; only the layer
count is shrunk (``Case.layers``), so that each case traces in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frenzy_core.config import TrainingConfig


@dataclass(frozen=True)
class Published:
    """A published model config: its Transformers config class, head class and memory-relevant sizes."""

    config_class: str
    architecture: str
    source: str
    sizes: dict[str, Any]
    layers_key: str = "num_hidden_layers"


_HUB = "https://huggingface.co/{}/blob/main/config.json"

PUBLISHED: dict[str, Published] = {
    "gpt2": Published("GPT2Config", "GPT2LMHeadModel", _HUB.format("openai-community/gpt2"), {
        "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024, "resid_pdrop": 0.1,
        "embd_pdrop": 0.1, "attn_pdrop": 0.1}, layers_key="n_layer"),
    "bert-base": Published("BertConfig", "BertForMaskedLM", _HUB.format("google-bert/bert-base-uncased"), {
        "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
        "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1}),
    "llama-3.1-8b": Published("LlamaConfig", "LlamaForCausalLM", _HUB.format("meta-llama/Llama-3.1-8B"), {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    "mistral-7b": Published("MistralConfig", "MistralForCausalLM", _HUB.format("mistralai/Mistral-7B-v0.1"), {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False}),
    "qwen2.5-1.5b": Published("Qwen2Config", "Qwen2ForCausalLM", _HUB.format("Qwen/Qwen2.5-1.5B"), {
        "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 2, "intermediate_size": 8960,
        "vocab_size": 151936, "max_position_embeddings": 131072, "tie_word_embeddings": True}),
    "qwen3-1.7b": Published("Qwen3Config", "Qwen3ForCausalLM", _HUB.format("Qwen/Qwen3-1.7B"), {
        "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 6144, "vocab_size": 151936, "max_position_embeddings": 40960,
        "tie_word_embeddings": True}),
    "gemma-2b": Published("GemmaConfig", "GemmaForCausalLM", _HUB.format("google/gemma-2b"), {
        "hidden_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
        "intermediate_size": 16384, "vocab_size": 256000, "max_position_embeddings": 8192}),
    "pythia-1.4b": Published("GPTNeoXConfig", "GPTNeoXForCausalLM", _HUB.format("EleutherAI/pythia-1.4b"), {
        "hidden_size": 2048, "num_attention_heads": 16, "intermediate_size": 8192, "vocab_size": 50304,
        "rotary_pct": 0.25, "max_position_embeddings": 2048, "use_parallel_residual": True,
        "tie_word_embeddings": False}),
    "opt-1.3b": Published("OPTConfig", "OPTForCausalLM", _HUB.format("facebook/opt-1.3b"), {
        "hidden_size": 2048, "num_attention_heads": 32, "ffn_dim": 8192, "vocab_size": 50272,
        "word_embed_proj_dim": 2048, "max_position_embeddings": 2048, "dropout": 0.1, "do_layer_norm_before": True}),
    "phi-3-mini-4k": Published("Phi3Config", "Phi3ForCausalLM", _HUB.format("microsoft/Phi-3-mini-4k-instruct"), {
        "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192,
        "vocab_size": 32064, "max_position_embeddings": 4096, "sliding_window": 2047, "pad_token_id": 32000,
        "tie_word_embeddings": False}),
    "mixtral-8x7b": Published("MixtralConfig", "MixtralForCausalLM", _HUB.format("mistralai/Mixtral-8x7B-v0.1"), {
        "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000, "max_position_embeddings": 32768}),
    "qwen1.5-moe-a2.7b": Published("Qwen2MoeConfig", "Qwen2MoeForCausalLM", _HUB.format("Qwen/Qwen1.5-MoE-A2.7B"), {
        "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
        "num_experts_per_tok": 4, "vocab_size": 151936, "max_position_embeddings": 8192}),
    "qwen3-30b-a3b": Published("Qwen3MoeConfig", "Qwen3MoeForCausalLM", _HUB.format("Qwen/Qwen3-30B-A3B"), {
        "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "vocab_size": 151936, "max_position_embeddings": 40960, "norm_topk_prob": True}),
    "gemma-2-2b": Published("Gemma2Config", "Gemma2ForCausalLM", _HUB.format("google/gemma-2-2b"), {
        "hidden_size": 2304, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "intermediate_size": 9216, "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096,
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256}),
    "gemma-3-1b": Published("Gemma3TextConfig", "Gemma3ForCausalLM", _HUB.format("google/gemma-3-1b-pt"), {
        "hidden_size": 1152, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "intermediate_size": 6912, "vocab_size": 262144, "max_position_embeddings": 32768, "sliding_window": 512,
        "query_pre_attn_scalar": 256}),
    "stablelm-2-1.6b": Published("StableLmConfig", "StableLmForCausalLM", _HUB.format("stabilityai/stablelm-2-1_6b"), {
        "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 5632,
        "vocab_size": 100352, "max_position_embeddings": 4096, "partial_rotary_factor": 0.25, "use_qkv_bias": True,
        "tie_word_embeddings": False}),
    "falcon-7b": Published("FalconConfig", "FalconForCausalLM", _HUB.format("tiiuae/falcon-7b"), {
        "hidden_size": 4544, "num_attention_heads": 71, "multi_query": True, "parallel_attn": True, "bias": False,
        "new_decoder_architecture": False, "vocab_size": 65024, "max_position_embeddings": 2048}),
    "olmo-2-1b": Published("Olmo2Config", "Olmo2ForCausalLM", _HUB.format("allenai/OLMo-2-0425-1B"), {
        "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 8192,
        "vocab_size": 100352, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}),
    "phi-2": Published("PhiConfig", "PhiForCausalLM", _HUB.format("microsoft/phi-2"), {
        "hidden_size": 2560, "num_attention_heads": 32, "intermediate_size": 10240, "vocab_size": 51200,
        "partial_rotary_factor": 0.4, "resid_pdrop": 0.1, "embd_pdrop": 0.0, "max_position_embeddings": 2048,
        "tie_word_embeddings": False}),
    "starcoder2-3b": Published("Starcoder2Config", "Starcoder2ForCausalLM", _HUB.format("bigcode/starcoder2-3b"), {
        "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 2, "intermediate_size": 12288,
        "vocab_size": 49152, "max_position_embeddings": 16384, "sliding_window": 4096, "use_bias": True,
        "residual_dropout": 0.1, "embedding_dropout": 0.1, "attention_dropout": 0.1, "tie_word_embeddings": True}),
    "deepseek-v2-lite": Published("DeepseekV2Config", "DeepseekV2ForCausalLM", _HUB.format("deepseek-ai/DeepSeek-V2-Lite"), {
        "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
        "tie_word_embeddings": False}),
    "deepseek-v3": Published("DeepseekV3Config", "DeepseekV3ForCausalLM", _HUB.format("deepseek-ai/DeepSeek-V3"), {
        "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "n_group": 8, "topk_group": 4, "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "max_position_embeddings": 163840, "tie_word_embeddings": False}),
}
"""Published sizes; the deepseek-v3 entry keeps one dense layer before its MoE layers (published: three)."""


@dataclass(frozen=True)
class Case:
    """One published model (shrunk to ``layers``), one training recipe, one loop."""

    model: str
    layers: int
    training: TrainingConfig
    loop: str = "framework"
    overrides: dict[str, Any] = field(default_factory=dict)
    """Config keys set besides the published sizes (e.g. which layers are sliding-window ones)."""

    @property
    def label(self) -> str:
        t = self.training
        parts = [t.precision.value, t.attention.value, f"s{t.seq_len}", f"b{t.micro_batch_size}"]
        if t.recompute.value != "none":
            parts.append(f"rc-{t.recompute.value}")
        return " ".join(parts)

    @property
    def key(self) -> str:
        """Unique name of the case (the probe cache key)."""
        return f"{self.model} L{self.layers} {self.label} {self.loop}"

    def hf_config(self) -> dict[str, Any]:
        """The config dict ``transformers.<Family>Config`` writes for this case (needs transformers)."""
        import transformers

        published = PUBLISHED[self.model]
        config_class = getattr(transformers, published.config_class)
        kwargs = {**published.sizes, published.layers_key: self.layers, **self.overrides}
        config = config_class(**kwargs, architectures=[published.architecture]).to_dict()
        config["_name_or_path"] = self.model
        return config


def _t(seq_len: int, micro_batch_size: int, precision: str, attention: str = "sdpa",
       recompute: str = "none") -> TrainingConfig:
    return TrainingConfig(seq_len=seq_len, micro_batch_size=micro_batch_size, precision=precision,
                          attention=attention, recompute=recompute, optimizer="adamw", optimizer_impl="foreach")


_GEMMA3_LAYERS = {"layer_types": ["sliding_attention", "full_attention"]}  # published: 5 sliding, then 1 full

CASES: tuple[Case, ...] = (
    Case("gpt2", 2, _t(1024, 8, "fp32", "eager")),
    Case("gpt2", 2, _t(1024, 16, "amp-bf16"), "plain"),
    Case("bert-base", 2, _t(512, 16, "amp-bf16")),
    Case("bert-base", 2, _t(512, 8, "fp32", "eager", "full")),
    Case("llama-3.1-8b", 2, _t(4096, 1, "bf16")),
    Case("llama-3.1-8b", 2, _t(4096, 1, "bf16"), "plain"),
    Case("llama-3.1-8b", 2, _t(8192, 2, "amp-bf16", recompute="full")),
    Case("llama-3.1-8b", 2, _t(16384, 1, "bf16", recompute="full"), "plain"),
    Case("mistral-7b", 2, _t(8192, 1, "bf16")),
    Case("mistral-7b", 2, _t(2048, 4, "bf16"), "plain"),
    Case("qwen2.5-1.5b", 2, _t(4096, 4, "bf16")),
    Case("qwen2.5-1.5b", 2, _t(4096, 4, "bf16"), "plain"),
    Case("qwen2.5-1.5b", 2, _t(2048, 2, "amp-bf16", "eager")),
    Case("qwen3-1.7b", 2, _t(4096, 2, "bf16")),
    Case("qwen3-1.7b", 2, _t(8192, 1, "amp-bf16", recompute="full"), "plain"),
    Case("gemma-2b", 2, _t(2048, 2, "bf16")),
    Case("gemma-2b", 2, _t(2048, 2, "bf16"), "plain"),
    Case("gemma-2b", 2, _t(1024, 4, "amp-bf16", "eager", "full")),
    Case("pythia-1.4b", 2, _t(2048, 4, "amp-bf16")),
    Case("pythia-1.4b", 2, _t(2048, 1, "fp32", "eager"), "plain"),
    Case("opt-1.3b", 2, _t(2048, 1, "bf16", "eager")),
    Case("opt-1.3b", 2, _t(2048, 8, "amp-bf16"), "plain"),
    Case("phi-3-mini-4k", 2, _t(4096, 4, "bf16", recompute="full")),
    Case("phi-3-mini-4k", 2, _t(1024, 4, "bf16")),
    Case("phi-3-mini-4k", 2, _t(4096, 1, "amp-bf16"), "plain"),
    Case("mixtral-8x7b", 2, _t(4096, 4, "bf16", recompute="full")),
    Case("mixtral-8x7b", 2, _t(2048, 1, "bf16"), "plain"),
    Case("qwen1.5-moe-a2.7b", 2, _t(4096, 2, "bf16")),
    Case("qwen1.5-moe-a2.7b", 2, _t(2048, 1, "amp-bf16"), "plain"),
    Case("qwen3-30b-a3b", 2, _t(4096, 1, "bf16")),
    Case("qwen3-30b-a3b", 2, _t(4096, 1, "bf16", recompute="full"), "plain"),
    Case("gemma-2-2b", 2, _t(4096, 1, "bf16", "eager")),
    Case("gemma-2-2b", 2, _t(2048, 2, "bf16", "eager"), "plain"),
    Case("gemma-3-1b", 2, _t(4096, 2, "bf16"), overrides=_GEMMA3_LAYERS),
    Case("gemma-3-1b", 2, _t(2048, 1, "bf16", "eager"), "plain", overrides=_GEMMA3_LAYERS),
    Case("stablelm-2-1.6b", 2, _t(4096, 2, "bf16")),
    Case("stablelm-2-1.6b", 2, _t(2048, 4, "amp-bf16"), "plain"),
    Case("falcon-7b", 2, _t(2048, 2, "bf16")),
    Case("falcon-7b", 2, _t(2048, 2, "bf16"), "plain"),
    Case("olmo-2-1b", 2, _t(4096, 2, "bf16")),
    Case("olmo-2-1b", 2, _t(1024, 8, "amp-bf16", "eager", "full"), "plain"),
    Case("phi-2", 2, _t(2048, 2, "bf16")),
    Case("phi-2", 2, _t(2048, 1, "fp32", "eager"), "plain"),
    Case("starcoder2-3b", 2, _t(8192, 1, "bf16")),
    Case("starcoder2-3b", 2, _t(4096, 2, "amp-bf16", recompute="full"), "plain"),
    Case("deepseek-v2-lite", 2, _t(4096, 1, "bf16")),
    Case("deepseek-v2-lite", 2, _t(2048, 2, "bf16"), "plain"),
    Case("deepseek-v3", 2, _t(4096, 1, "bf16", recompute="full")),
)
"""48 cases over 22 families: both loops, fp32 / bf16 / amp-bf16, recompute none / full, eager / sdpa, dropout on
(GPT-2, BERT, OPT, Phi-2, StarCoder2) and off, 512 to 16,384 tokens, micro-batches 1 to 16, dense and MoE."""

QUICK: tuple[str, ...] = (
    "gpt2 L2 fp32 eager s1024 b8 framework",
    "gpt2 L2 amp-bf16 sdpa s1024 b16 plain",
    "bert-base L2 amp-bf16 sdpa s512 b16 framework",
    "llama-3.1-8b L2 bf16 sdpa s4096 b1 framework",
    "llama-3.1-8b L2 bf16 sdpa s4096 b1 plain",
    "qwen2.5-1.5b L2 bf16 sdpa s4096 b4 plain",
    "gemma-2b L2 bf16 sdpa s2048 b2 framework",
    "pythia-1.4b L2 amp-bf16 sdpa s2048 b4 framework",
    "phi-3-mini-4k L2 bf16 sdpa s1024 b4 framework",
    "mixtral-8x7b L2 bf16 sdpa s2048 b1 plain",
)
"""The CI subset (``tests/test_memory_grid.py``): families the estimator reads, both loops."""
