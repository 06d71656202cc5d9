"""Bytes per parameter of each model-state category for a precision recipe, optimizer and framework."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from frenzy_core.config.finetune import nf4_bytes_per_param
from frenzy_core.config.trainable import fp32_adapters
from frenzy_core.config.training import Framework, Optimizer, OptimizerImpl, Precision, TrainingConfig

__all__ = ["ADAM_8BIT_BLOCK_SIZE", "StateBytes", "state_bytes"]

ADAM_8BIT_BLOCK_SIZE = 2048
"""bitsandbytes block-wise quantisation: one fp32 absmax per 2,048 elements of each 8-bit state
(Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization", section 2.1)."""


@dataclass(frozen=True)
class StateBytes:
    """Bytes per (local) parameter of each model-state category, and step-time temporaries."""

    param: float
    """Working weights."""
    trainable_param: float
    """A trainable weight: ``param``, or 4 for PEFT's fp32 adapters on a half base."""
    matmul_weight: float
    """A layer's matmul weight: ``param``, plus the fp8 copy fp8 recipes keep beside it, or fp8 alone with
    Megatron's fp8 parameter gather, or 4-bit NF4 with block scales under QLoRA."""
    grad: float
    """Gradients as accumulated over micro-batches (Megatron: fp32 main grads for half recipes)."""
    master: float
    """fp32 master weights of mixed-precision recipes."""
    states: float
    """Optimizer states."""
    step_temp_local: float
    """Step-time temporaries sized like the whole local shard (foreach temporaries, fp32 grad copies)."""
    step_temp_largest: float
    """Step-time temporaries sized like the largest single tensor (for-loop implementations)."""


def _state_dtype_bytes(precision: Precision) -> int:
    # torch creates optimizer states with zeros_like(param): half params get half states (pure bf16/fp16);
    # mixed recipes step on the fp32 master copy.
    return 2 if precision.is_pure_half else 4


def _num_states(optimizer: Optimizer) -> int:
    # torch.optim.Adam/AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum_buffer; plain SGD: none.
    return {Optimizer.ADAM: 2, Optimizer.ADAMW: 2, Optimizer.SGD: 0, Optimizer.SGD_MOMENTUM: 1,
            Optimizer.ADAM_8BIT: 2}[optimizer]


@functools.lru_cache(maxsize=64)
def state_bytes(training: TrainingConfig) -> StateBytes:
    """Bytes per parameter of weights, gradients, master weights, optimizer states and step temporaries."""
    p = training.precision
    megatron = training.framework is Framework.MEGATRON
    param = float(p.param_bytes)
    matmul = param
    if p is Precision.FP8_MIXED:
        # Transformer Engine keeps an fp8 copy of each linear weight for the fp8 GEMMs (1 byte per element);
        # with --fp8-param-gather the weight itself is an fp8 tensor (Float8Tensor) holding its row-wise data and
        # the column-wise (transposed) copy the backward GEMMs read: 1 + 1 bytes, no bf16 weight.
        matmul = 2.0 if training.fp8_param_gather else param + 1.0
    if training.lora is not None and training.lora.quantized:
        matmul = nf4_bytes_per_param(training.lora)  # bitsandbytes Linear4bit: packed 4-bit data + absmax
    # PEFT's fp32 adapters on a half base: what trains is fp32, gradients and states too (zeros_like(param))
    trained = Precision.FP32 if fp32_adapters(training) else p
    trainable_param = float(trained.param_bytes)
    if p.is_mixed:
        # Megatron: fp32 main_grad buffer (accumulate_allreduce_grads_in_fp32); DeepSpeed/torch: half grads
        # (the ZeRO paper's 2 + 2 + K accounting).
        grad = 4.0 if megatron else 2.0
        master = 4.0
    else:
        grad = trainable_param
        master = 0.0
    n_states = _num_states(training.optimizer)
    sdt = _state_dtype_bytes(trained)
    if training.optimizer is Optimizer.ADAM_8BIT:
        states = n_states * (1.0 + 4.0 / ADAM_8BIT_BLOCK_SIZE)
    else:
        states = float(n_states * sdt)
    temp_local = 0.0
    temp_largest = 0.0
    if n_states == 2 and training.optimizer is not Optimizer.ADAM_8BIT and not megatron:
        # torch/optim/adam.py: _multi_tensor_adam allocates exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs), one
        # copy of the local parameter set in the state dtype; _single_tensor_adam allocates
        # (exp_avg_sq.sqrt() / bias_correction2_sqrt) for one tensor at a time (two temporaries).
        # The fused kernel allocates nothing sizeable. Megatron steps with fused Adam (TE/Apex).
        if training.optimizer_impl is OptimizerImpl.FOREACH:
            temp_local += sdt
        elif training.optimizer_impl is OptimizerImpl.FOR_LOOP:
            temp_largest += 2 * sdt
    if p.is_mixed and not megatron:
        # DeepSpeed's mixed-precision optimizers copy the half gradient shard to fp32 before stepping
        # (single_partition_of_fp32_groups[i].grad).
        temp_local += 4.0
    return StateBytes(param=param, trainable_param=trainable_param, matmul_weight=matmul, grad=grad, master=master,
                      states=states, step_temp_local=temp_local, step_temp_largest=temp_largest)
