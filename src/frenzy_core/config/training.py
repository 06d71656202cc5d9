"""``TrainingConfig``: the recipe of one training run (batch, precision, optimizer, sharding, recompute)."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from frenzy_core import _limits as limits
from frenzy_core._base import CodedEnum, FrozenModel
from frenzy_core._limits import at_most, beyond_message
from frenzy_core.config.finetune import LoRAConfig

__all__ = [
    "Attention",
    "Fp8Recipe",
    "Framework",
    "OffloadDevice",
    "Optimizer",
    "OptimizerImpl",
    "Precision",
    "Recompute",
    "RecomputeMethod",
    "RecomputeModule",
    "TrainingConfig",
]


class Precision(str, enum.Enum):
    """Which dtypes parameters, gradients, optimizer states and activations are kept in."""

    FP32 = "fp32"
    """Everything in fp32."""
    BF16 = "bf16"
    """Pure bf16: params, grads and optimizer states in bf16 (``model.to(torch.bfloat16)``)."""
    FP16 = "fp16"
    """Pure fp16, as BF16."""
    AMP_BF16 = "amp-bf16"
    """fp32 params, grads and states; activations in bf16 under ``torch.autocast``."""
    AMP_FP16 = "amp-fp16"
    """As AMP_BF16 with fp16 autocast (and a grad scaler)."""
    BF16_MIXED = "bf16-mixed"
    """Megatron/DeepSpeed style: bf16 params and activations, fp32 master params, fp32 main grads, fp32 states."""
    FP16_MIXED = "fp16-mixed"
    """As BF16_MIXED with fp16 params and activations (and loss scaling)."""
    FP8_MIXED = "fp8-mixed"
    """As BF16_MIXED with fp8 matmul inputs (Transformer Engine); weights keep a bf16 copy."""

    @property
    def is_amp(self) -> bool:
        return self in (Precision.AMP_BF16, Precision.AMP_FP16)

    @property
    def is_mixed(self) -> bool:
        """Half model weights plus fp32 master weights."""
        return self in (Precision.BF16_MIXED, Precision.FP16_MIXED, Precision.FP8_MIXED)

    @property
    def is_pure_half(self) -> bool:
        return self in (Precision.BF16, Precision.FP16)

    @property
    def param_bytes(self) -> int:
        """Bytes per element of the model's working weights."""
        return 4 if self in (Precision.FP32, Precision.AMP_BF16, Precision.AMP_FP16) else 2

    @property
    def activation_bytes(self) -> int:
        """Bytes per element of most saved activations (fp8 recipes still save bf16 for most tensors)."""
        return 4 if self is Precision.FP32 else 2


class Optimizer(str, enum.Enum):
    """Optimizer algorithm: decides the per-parameter state."""

    ADAMW = "adamw"
    """Two moments per parameter."""
    ADAM = "adam"
    """Two moments per parameter."""
    SGD = "sgd"
    """No state."""
    SGD_MOMENTUM = "sgd-momentum"
    """One momentum buffer per parameter."""
    ADAM_8BIT = "adam-8bit"
    """bitsandbytes 8-bit Adam: two 1-byte moments plus block-wise quantisation scales."""


class OptimizerImpl(str, enum.Enum):
    """torch's optimizer implementations, which differ in step-time temporaries."""

    FOR_LOOP = "for-loop"
    """One parameter at a time: temporaries of the largest single tensor."""
    FOREACH = "foreach"
    """Multi-tensor ops over a group: temporaries sized like the whole (local) parameter set."""
    FUSED = "fused"
    """One fused kernel: no sizeable temporaries."""


class Recompute(CodedEnum):
    """Activation recomputation (checkpointing); ``code`` 0, 1, 2 in this order."""

    NONE = "none"
    """Save everything the backward pass needs."""
    SELECTIVE = "selective"
    """Recompute the attention core (scores, softmax, dropout) only (Korthikanti et al. 2022)."""
    FULL = "full"
    """Save only each layer's input; recompute the layer in backward."""


class RecomputeMethod(str, enum.Enum):
    """Which layers full recompute covers (Megatron's ``--recompute-method``)."""

    UNIFORM = "uniform"
    """All layers, checkpointed in chunks of ``recompute_num_layers``."""
    BLOCK = "block"
    """Only the first ``recompute_num_layers`` layers of each stage."""


class RecomputeModule(str, enum.Enum):
    """A submodule selective recomputation rebuilds in backward (Megatron-Core ``recompute_modules``,
    ``transformer_config.py``); what each drops is derived in docs/memory-model.md, section 3."""

    CORE_ATTN = "core_attn"
    """The attention core (scores, softmax, dropout; the default)."""
    LAYERNORM = "layernorm"
    """Norms that are modules of their own (not fused into the next linear): their statistics and output."""
    MLP = "mlp"
    """A dense layer's MLP, checkpointed on its input."""
    MOE_ACT = "moe_act"
    """The routed experts' activation function: its output (the second expert matmul's input)."""
    MLA_UP_PROJ = "mla_up_proj"
    """Latent attention's up projections and rotary part: queries, keys and values rebuilt from the latents."""


class Attention(str, enum.Enum):
    """Attention kernel: decides whether the s x s score matrix is materialised."""

    EAGER = "eager"
    """Explicit matmul + softmax: scores and probabilities are saved."""
    SDPA = "sdpa"
    """torch's scaled_dot_product_attention (memory-efficient/flash backends): no s x s tensors."""
    FLASH = "flash"
    """FlashAttention: saves output and log-sum-exp only."""
    TRITON = "triton"
    """FlashAttention in Triton (MPT / llm-foundry ``attn_impl: triton``): saves what FLASH saves, runs slower."""


class Framework(str, enum.Enum):
    """Whose runtime's saved tensors and buffers are modelled."""

    TORCH = "torch"
    """Eager PyTorch / Hugging Face Transformers (torch DDP or FSDP)."""
    MEGATRON = "megatron"
    """Megatron-Core with Transformer Engine (fused kernels, contiguous grad buffers)."""


class Fp8Recipe(str, enum.Enum):
    """How fp8 GEMM inputs are scaled (read only with ``precision="fp8-mixed"``): decides the quantisation kernels."""

    DELAYED = "delayed"
    """Per-tensor scales from the amax history of earlier steps (Transformer Engine ``DelayedScaling``): one fused
    cast (+ transpose) pass per tensor."""
    CURRENT = "current"
    """Per-tensor scales from the tensor itself (TE ``Float8CurrentScaling``, torchao tensorwise): an amax pass,
    then the cast."""
    ROWWISE = "rowwise"
    """Per-row scales (torchao rowwise): an amax and a cast along each axis, no reuse of one cast for the transpose."""


class OffloadDevice(str, enum.Enum):
    """Where offloaded model states live between their uses."""

    NONE = "none"
    """On the GPU."""
    CPU = "cpu"
    """Host memory (ZeRO-Offload, FSDP ``CPUOffload``, Megatron ``--optimizer-cpu-offload``)."""
    NVME = "nvme"
    """NVMe through pinned host staging buffers (ZeRO-Infinity)."""


class TrainingConfig(FrozenModel):
    """One training recipe. ``global_batch_size`` None means one micro-batch per data-parallel rank."""

    seq_len: Annotated[int, at_most(limits.SEQ_LEN)] = Field(default=2048, gt=0, description="Tokens per sample.")
    micro_batch_size: Annotated[int, at_most(limits.MICRO_BATCH)] = Field(
        default=1, gt=0, description="Samples per rank per forward pass.")
    global_batch_size: Annotated[int | None, at_most(limits.GLOBAL_BATCH)] = Field(
        default=None, gt=0, description="Samples per optimizer step, all ranks.")
    precision: Precision = Field(default=Precision.BF16_MIXED, description="Dtype recipe.")
    optimizer: Optimizer = Field(default=Optimizer.ADAMW, description="Optimizer algorithm.")
    optimizer_impl: OptimizerImpl = Field(default=OptimizerImpl.FOREACH, description="torch optimizer implementation.")
    zero_stage: int = Field(default=0, ge=0, le=3, description="ZeRO stage / FSDP: 1 states, 2 +grads, 3 +params.")
    distributed_optimizer: bool = Field(default=False, description="Megatron's distributed optimizer (ZeRO-1).")
    recompute: Recompute = Field(default=Recompute.NONE, description="Activation recomputation mode.")
    recompute_method: RecomputeMethod = Field(default=RecomputeMethod.UNIFORM, description="Full-recompute layers.")
    recompute_num_layers: Annotated[int | None, at_most(limits.LAYERS)] = Field(
        default=None, gt=0, description="Layers per chunk/block; None: 1/all.")
    recompute_modules: tuple[RecomputeModule, ...] = Field(default=(RecomputeModule.CORE_ATTN,), description=(
        "What selective recomputation rebuilds (Megatron --recompute-modules); framework torch: core_attn only."))

    cross_entropy_fusion: bool = Field(default=False, description=(
        "Megatron --cross-entropy-loss-fusion (native, compiled): one more fp32 logits-sized buffer while the loss "
        "gradient is computed; bf16 activations only."))
    tp_comm_overlap: bool = Field(default=False, description=(
        "Megatron --tp-comm-overlap (needs sequence_parallel): Transformer Engine's userbuffer GEMMs keep three "
        "more cuBLAS workspaces."))
    attention: Attention = Field(default=Attention.FLASH, description="Attention kernel.")
    sequence_parallel: bool = Field(default=False, description=(
        "Sequence parallelism (needs tp > 1): Megatron's, or torchtitan's TP plan with framework 'torch'."))
    framework: Framework = Field(default=Framework.TORCH, description="Runtime whose buffers are modelled.")
    keep_outputs: bool = Field(default=False, description=(
        "The training loop keeps the model output alive: ``out = model(**batch); out.loss.backward(); opt.step()`` "
        "holds the logits (and a KV cache the model returns) through backward and the optimizer step, until the "
        "next forward returns. False: only the loss survives the forward (HF Trainer, Accelerate, torchtitan, "
        "Megatron-LM)."))
    compile: bool = Field(default=False, description=(
        "torch.compile on the model (framework torch): elementwise chains fuse into few kernels; the time model "
        "counts their memory traffic as fused."))
    fp8_recipe: Fp8Recipe = Field(default=Fp8Recipe.DELAYED, description=(
        "Scaling of fp8 GEMM inputs (precision fp8-mixed only): decides the cost of the quantisation kernels."))
    fp8_param_gather: bool = Field(default=False, description=(
        "Megatron --fp8-param-gather (fp8-mixed only): the model keeps its weights in fp8 (no bf16 copy) and the "
        "distributed optimizer gathers fp8 parameters."))
    # ---- which weights train (docs/memory-model.md, section 9) ----
    lora: LoRAConfig | None = Field(default=None, description=(
        "LoRA adapters on a frozen base (QLoRA with base_quantization nf4); None: the base weights train."))
    freeze_embeddings: bool = Field(default=False, description=(
        "The input embeddings (and a head tied to them) get no gradient."))
    trainable_layers: int | None = Field(default=None, ge=0, description=(
        "Only the last k transformer layers train (with LoRA: get adapters); the final norm and an untied head "
        "train with them. None: every layer."))
    # ---- offload (docs/memory-model.md, section 10) ----
    offload_optimizer: OffloadDevice = Field(default=OffloadDevice.NONE, description=(
        "Master weights, optimizer states and the step itself on the host (ZeRO-Offload, Megatron "
        "--optimizer-cpu-offload) or NVMe (ZeRO-Infinity)."))
    offload_params: OffloadDevice = Field(default=OffloadDevice.NONE, description=(
        "Parameters and gradients (as ZeRO shards them) on the host or NVMe, copied to the GPU layer by layer "
        "(ZeRO-Infinity offload_param; FSDP cpu_offload is this with offload_optimizer 'cpu'); torch only."))
    activation_offload_layers: int = Field(default=0, ge=0, description=(
        "Layers per pipeline stage whose saved activations wait in host memory between their forward and backward "
        "(torch save_on_cpu: all of them; Megatron --cpu-offloading-num-layers); 0: none."))
    # ---- sharding variants (docs/memory-model.md, section 4) ----
    reshard_after_forward: bool | int = Field(default=True, description=(
        "FSDP2 (zero_stage 3; no effect below): True frees each layer's gathered weights after its forward, False "
        "keeps them until its backward, an integer n keeps a 1/n shard of them (n GPUs, e.g. a node)."))
    zero_hpz_partition_size: int = Field(default=1, ge=1, description=(
        "ZeRO++ hierarchical partitioning (zero_stage 3; no effect below): a secondary copy of the weights sharded "
        "over this many GPUs (a node) is kept beside the primary shard; 1: off."))
    moe_load_imbalance: float | None = Field(default=None, ge=1.0, description=(
        "Tokens the busiest expert-parallel rank receives over its fair share. None: the capacity factor when there "
        "is one (no rank takes more), else 1.0."))

    @field_validator("recompute_modules")
    @classmethod
    def _in_module_order(cls, modules: tuple[RecomputeModule, ...]) -> tuple[RecomputeModule, ...]:
        """One spelling per set of modules (the order Megatron is given them in changes nothing), so that equal
        recipes compare and hash equal."""
        order = list(RecomputeModule)
        return tuple(sorted(modules, key=order.index))

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        for what, tokens, limit in (("micro_batch_size x seq_len", self.micro_batch_size * self.seq_len,
                                     limits.MICRO_BATCH_TOKENS),
                                    ("global_batch_size x seq_len", (self.global_batch_size or 0) * self.seq_len,
                                     limits.STEP_TOKENS)):
            if tokens > limit.high:
                raise ValueError(beyond_message(tokens, limit, what))
        if self.global_batch_size is not None and self.global_batch_size % self.micro_batch_size != 0:
            raise ValueError(
                f"global_batch_size={self.global_batch_size} is not a multiple of micro_batch_size="
                f"{self.micro_batch_size}"
            )
        if self.distributed_optimizer and self.zero_stage not in (0, 1):
            raise ValueError(
                f"distributed_optimizer (ZeRO-1) cannot be combined with zero_stage={self.zero_stage}; "
                "use one of them"
            )
        if self.keep_outputs and self.framework is Framework.MEGATRON:
            raise ValueError(
                "keep_outputs=True with framework='megatron': Megatron-LM's schedules keep only the loss "
                "(the output tensors are freed before backward); set keep_outputs false or framework 'torch'"
            )
        if self.fp8_param_gather and self.precision is not Precision.FP8_MIXED:
            raise ValueError(f"fp8_param_gather needs precision='fp8-mixed' (got {self.precision.value!r})")
        _check_sharding_variants(self)
        _check_offload(self)
        _check_recompute_modules(self)
        if self.tp_comm_overlap and (self.framework is not Framework.MEGATRON or not self.sequence_parallel):
            raise ValueError("tp_comm_overlap needs framework 'megatron' and sequence_parallel (validate_args: the "
                             "overlap happens only with sequence parallelism); set both or tp_comm_overlap false")
        if self.cross_entropy_fusion and (self.framework is not Framework.MEGATRON
                                          or self.precision not in (Precision.BF16_MIXED, Precision.FP8_MIXED)):
            raise ValueError(f"cross_entropy_fusion with framework {self.framework.value!r} and precision "
                             f"{self.precision.value!r}: Megatron's fused cross entropy casts its gradient to bf16; "
                             "it is modelled for framework 'megatron' with bf16-mixed or fp8-mixed only")
        return self

    @property
    def effective_zero_stage(self) -> int:
        """ZeRO stage counting Megatron's distributed optimizer as stage 1."""
        return max(self.zero_stage, 1 if self.distributed_optimizer else 0)

    @property
    def offloads(self) -> bool:
        """Whether anything lives in host memory: offloaded optimizer states or parameters, or activations."""
        return (self.offload_optimizer is not OffloadDevice.NONE or self.offload_params is not OffloadDevice.NONE
                or self.activation_offload_layers > 0)


def _check_sharding_variants(t: TrainingConfig) -> None:
    """FSDP2's integer resharding names a group size (>= 2; False keeps whole weights)."""
    reshard = t.reshard_after_forward
    if not isinstance(reshard, bool) and reshard < 2:
        raise ValueError(f"reshard_after_forward={reshard}: an integer is the group size to reshard to and must be "
                         ">= 2; use False to keep whole weights after forward")


def _check_recompute_modules(t: TrainingConfig) -> None:
    """Modules other than the attention core are Megatron-Core's and apply to selective recompute only."""
    modules = t.recompute_modules
    if len(set(modules)) != len(modules):
        raise ValueError(f"recompute_modules={[m.value for m in modules]} names a module twice; name each once")
    if modules == (RecomputeModule.CORE_ATTN,):
        return
    if t.recompute is not Recompute.SELECTIVE:
        raise ValueError(f"recompute_modules={[m.value for m in modules]} needs recompute='selective' (got "
                         f"{t.recompute.value!r}); leave recompute_modules at its default ['core_attn'] otherwise")
    if t.framework is not Framework.MEGATRON:
        raise ValueError(f"recompute_modules={[m.value for m in modules]} with framework {t.framework.value!r}: "
                         "only Megatron-Core recomputes submodules other than the attention core; use "
                         "recompute_modules=['core_attn'] or framework 'megatron'")


def _check_offload(t: TrainingConfig) -> None:
    """Offload combinations the frameworks run: torch offloads parameters only with the optimizer (DeepSpeed's
    offload_param needs offload_optimizer; FSDP's CPUOffload steps the optimizer on the host shards), at any ZeRO
    stage; Megatron-LM offloads the optimizer alone, to the host."""
    if t.framework is not Framework.MEGATRON:
        if t.offload_params is not OffloadDevice.NONE and t.offload_optimizer is OffloadDevice.NONE:
            raise ValueError(f"offload_params={t.offload_params.value!r} with offload_optimizer='none': no torch "
                             "runtime offloads the parameters alone (DeepSpeed's offload_param needs "
                             "offload_optimizer; FSDP's CPUOffload steps the optimizer on the host); set "
                             f"offload_optimizer={t.offload_params.value!r} too, or offload_params='none'")
        return
    if t.offload_params is not OffloadDevice.NONE:
        raise ValueError(f"offload_params={t.offload_params.value!r} with framework 'megatron': Megatron-LM offloads "
                         "optimizer states only; set offload_params='none'")
    if t.offload_optimizer is OffloadDevice.NVME:
        raise ValueError("offload_optimizer='nvme' with framework 'megatron': Megatron-LM offloads to the host; use "
                         "'cpu'")
