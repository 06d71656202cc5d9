"""Which weights train: LoRA adapters on a frozen (optionally 4-bit) base, frozen embeddings, the last k layers.

A frozen weight has no gradient, no master copy and no optimizer state, and autograd does not save the input of a
linear whose weight is frozen (its input gradient needs the weight only). The terms are derived in
docs/memory-model.md, section 9.
"""

from __future__ import annotations

import enum

from pydantic import Field, model_validator

from frenzy_core._base import FrozenModel

__all__ = ["AdapterDtype", "BaseQuantization", "LoRAConfig", "LoRATarget", "describe_trainable", "nf4_bytes_per_param"]


class LoRATarget(str, enum.Enum):
    """A projection of a transformer layer that LoRA can adapt (PEFT ``target_modules``)."""

    Q = "q"
    K = "k"
    V = "v"
    O = "o"  # noqa: E741 (the attention output projection's usual name)
    GATE = "gate"
    UP = "up"
    DOWN = "down"

    @property
    def row_parallel(self) -> bool:
        """Split over its input under tensor parallelism (attention output, MLP down), else over its output."""
        return self in (LoRATarget.O, LoRATarget.DOWN)

    @property
    def mlp(self) -> bool:
        return self in (LoRATarget.GATE, LoRATarget.UP, LoRATarget.DOWN)


class BaseQuantization(str, enum.Enum):
    """How the frozen base's layer weights are stored (QLoRA)."""

    NONE = "none"
    """In the model's dtype."""
    NF4 = "nf4"
    """bitsandbytes 4-bit NormalFloat (``bnb_4bit_quant_type="nf4"``), dequantized to the compute dtype per call."""
    FP4 = "fp4"
    """bitsandbytes 4-bit float: the same bytes as NF4."""


class AdapterDtype(str, enum.Enum):
    """The dtype of the adapter weights (A, B), their gradients and optimizer states."""

    FP32 = "fp32"
    """fp32 whatever the base (PEFT's default: ``get_peft_model(..., autocast_adapter_dtype=True)`` upcasts bf16 and
    fp16 adapter weights, peft/tuners/tuners_utils.py ``cast_adapter_dtype``); on a half base each adapter casts its
    input to fp32 (``lora.Linear.forward``: ``self._cast_input_dtype(x, lora_A.weight.dtype)``)."""
    MODEL = "model"
    """The model's weight dtype (``autocast_adapter_dtype=False``, or a plain-torch LoRA built in the model dtype)."""


# PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: ["q_proj", "v_proj"] for Llama, Mistral, Qwen2, Gemma.
_DEFAULT_TARGETS = (LoRATarget.Q, LoRATarget.V)


class LoRAConfig(FrozenModel):
    """Low-rank adapters (Hu et al. 2021) on a frozen base: W x + B A x with A: rank x in, B: out x rank.

    Only the adapters train; every base weight (embeddings, norms, head included) is frozen. ``alpha`` scales the
    update and does not change memory, so it is not a field.
    """

    rank: int = Field(default=16, gt=0, description="Adapter rank r (PEFT ``r``).")
    target_modules: tuple[LoRATarget, ...] = Field(default=_DEFAULT_TARGETS, min_length=1, description=(
        "Projections that get adapters: q, k, v, o, gate, up, down (a fused q/k/v or gate/up projection gets one "
        "adapter when any of its parts is named). Dense MLPs and shared experts are adapted; routed experts stay "
        "frozen."))
    module_ranks: dict[LoRATarget, int] = Field(default_factory=dict, description=(
        "Per-projection ranks overriding ``rank`` (PEFT ``rank_pattern``)."))
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description=(
        "LoRA dropout on the adapter input (PEFT ``lora_dropout``); above 0 each adapter saves its dropped input."))
    adapter_dtype: AdapterDtype = Field(default=AdapterDtype.FP32, description=(
        "Adapter weights' dtype: fp32 (PEFT's default, autocast_adapter_dtype=True) or the model's. Matters only for "
        "a half-precision base without master weights (precision bf16/fp16, framework torch); with amp the base is "
        "fp32 already, and bf16-mixed recipes cast the whole module to bf16 beside fp32 masters."))
    base_quantization: BaseQuantization = Field(default=BaseQuantization.NONE, description=(
        "Storage of the frozen layer weights: none, or QLoRA's 4-bit nf4/fp4 (bitsandbytes Linear4bit)."))
    double_quant: bool = Field(default=True, description=(
        "QLoRA double quantisation (``bnb_4bit_use_double_quant``): the per-block absmax stored in 8 bits with one "
        "fp32 scale per second-level block."))
    quant_block_size: int = Field(default=64, gt=0, description=(
        "Weights per 4-bit quantisation block (bitsandbytes' default blocksize for 4-bit: 64)."))
    double_quant_block_size: int = Field(default=256, gt=0, description=(
        "Absmax values per second-level block under double quantisation (bitsandbytes: 256)."))

    @model_validator(mode="after")
    def _check(self) -> LoRAConfig:
        bad = {t.value: r for t, r in self.module_ranks.items() if r <= 0}
        if bad:
            raise ValueError(f"module_ranks {bad} must be positive ranks")
        if len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError(f"target_modules {[t.value for t in self.target_modules]} names a projection twice")
        return self

    def __hash__(self) -> int:
        # module_ranks is a dict: hash its items (the configs are cache keys of the estimator's terms)
        return hash((self.rank, self.target_modules, tuple(sorted((t.value, r) for t, r in self.module_ranks.items())),
                     self.dropout, self.adapter_dtype, self.base_quantization, self.double_quant, self.quant_block_size,
                     self.double_quant_block_size))

    def rank_of(self, target: LoRATarget) -> int:
        """The rank of ``target``'s adapter (0 when it has none)."""
        if target not in self.target_modules:
            return 0
        return self.module_ranks.get(target, self.rank)

    @property
    def quantized(self) -> bool:
        return self.base_quantization is not BaseQuantization.NONE


def nf4_bytes_per_param(lora: LoRAConfig) -> float:
    """Bytes per 4-bit weight: half a byte plus its block's absmax (Dettmers et al. 2023, QLoRA, section 3:
    32/64 bits per parameter without double quantisation, 8/64 + 32/(64 x 256) with it)."""
    block = float(lora.quant_block_size)
    if lora.double_quant:
        return 0.5 + 1.0 / block + 4.0 / (block * lora.double_quant_block_size)
    return 0.5 + 4.0 / block


def describe_trainable(lora: LoRAConfig | None, freeze_embeddings: bool, trainable_layers: int | None) -> str | None:
    """What trains, in words (None: every weight): the adapters and their base, frozen embeddings, the last k layers."""
    parts = []
    if lora is not None:
        ranks = ", ".join(f"{t.value}{'' if lora.rank_of(t) == lora.rank else f' (rank {lora.rank_of(t)})'}"
                          for t in lora.target_modules)
        base = f"a 4-bit {lora.base_quantization.value.upper()} base" if lora.quantized else "a frozen base"
        parts.append(f"LoRA adapters of rank {lora.rank} on {ranks}, on {base} (no gradients or optimizer states "
                     "for the base weights)")
    elif freeze_embeddings:
        parts.append("all but the embeddings")
    if trainable_layers is not None:
        parts.append(f"only the last {trainable_layers} layer(s)")
    return "; ".join(parts) or None
