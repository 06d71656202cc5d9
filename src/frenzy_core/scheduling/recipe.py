"""The default training recipe given to jobs that a trace or a generator creates."""

from __future__ import annotations

from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import Framework, Precision, TrainingConfig
from frenzy_core.hardware.gpu import GPUSpec

__all__ = ["DEFAULT_GLOBAL_BATCH_SIZE", "DEFAULT_SEQ_LEN", "default_training", "global_batch_for"]

DEFAULT_SEQ_LEN = 2048
"""Tokens per sample: GPT-3's and Llama 1's training context (Brown et al. 2020; Touvron et al. 2023)."""

DEFAULT_GLOBAL_BATCH_SIZE = 1536
"""Samples per step: 2^9 x 3, so that the data-parallel degrees of the usual requests (1, 2, 3, 4, 6, 8, 12,
16, 24, 32, 48, 64, ... GPUs) divide it together with micro-batches of 1-8; 1536 x 2048 = 3.1M tokens, the
order of GPT-3's 3.2M-token and Llama 2's 4M-token batches (Brown et al. 2020, Table 2.1; Touvron et al.
2023)."""


def global_batch_for(num_gpus: int | None) -> int:
    """:data:`DEFAULT_GLOBAL_BATCH_SIZE` rounded up to a multiple of ``num_gpus``, so that every data-parallel
    degree of the request divides it (1536 itself for 12, 24 or a power of two up to 512; 94 GPUs: 1598)."""
    if num_gpus is None:
        return DEFAULT_GLOBAL_BATCH_SIZE
    return -(-DEFAULT_GLOBAL_BATCH_SIZE // num_gpus) * num_gpus


def default_training(model: ModelConfig, gpu: GPUSpec | None = None, num_gpus: int | None = None
                     ) -> TrainingConfig:
    """Megatron-style mixed precision with the distributed optimizer and flash attention: bf16 where ``gpu``
    has it (fp16 on pre-Ampere GPUs such as the V100, which lack bf16), the context capped by a learned
    position table (GPT-2: 1024), the global batch from :func:`global_batch_for` ``num_gpus``."""
    seq_len = model.default_seq_len(DEFAULT_SEQ_LEN)
    bf16 = gpu is None or "bf16" in gpu.peak_tflops
    return TrainingConfig(
        seq_len=seq_len,
        global_batch_size=global_batch_for(num_gpus),
        precision=Precision.BF16_MIXED if bf16 else Precision.FP16_MIXED,
        distributed_optimizer=True,
        framework=Framework.MEGATRON,
    )
