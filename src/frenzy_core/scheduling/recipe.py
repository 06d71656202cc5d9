"""The default training recipe given to jobs that a trace or a generator creates."""

from __future__ import annotations

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import Framework, Precision, TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec

__all__ = ["DEFAULT_SEQ_LEN", "default_training"]

DEFAULT_SEQ_LEN = 2048
"""Tokens per sample: GPT-3's and Llama 1's training context (Brown et al. 2020; Touvron et al. 2023)."""


def default_training(model: ModelConfig, gpu: GPUSpec | None = None) -> TrainingConfig:
    """Megatron-style mixed precision with the distributed optimizer and flash attention: bf16 where ``gpu``
    has it (fp16 on pre-Ampere GPUs such as the V100, which lack bf16), the context capped by a learned
    position table (GPT-2: 1024). The global batch is left to the planner's default
    (:func:`frenzy_core.config.default_global_batch`: the model's published batch, else 2^20 tokens), the one
    rule for a request without one; every allocation of the job then trains that batch (moved by at most 5 %
    to split into whole micro-batches per data-parallel rank), so rates compare equal work."""
    seq_len = model.default_seq_len(DEFAULT_SEQ_LEN)
    bf16 = gpu is None or "bf16" in gpu.peak_tflops
    return TrainingConfig(
        seq_len=seq_len,
        precision=Precision.BF16_MIXED if bf16 else Precision.FP16_MIXED,
        distributed_optimizer=True,
        framework=Framework.MEGATRON,
    )
