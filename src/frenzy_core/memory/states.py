"""Model states of one pipeline stage as array arithmetic: weights, gradients, master weights, optimizer states,
their ZeRO/HSDP sharding, offload to the host, and the communication buffers sharding needs.

Shared by the scalar and batch estimators through :mod:`frenzy_core.memory.kernel`; docs/memory-model.md,
sections 2, 4 and 10.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.config.model import ModelConfig, PositionEmbedding
from frenzy_core.config.trainable import adapter_counts, trains
from frenzy_core.config.training import Framework, OffloadDevice, TrainingConfig
from frenzy_core.memory.overhead import overhead_model
from frenzy_core.memory.recipe import StateBytes
from frenzy_core.memory.shards import StageParams, StageShape, layer_constants

__all__ = ["Gradients", "LayerParams", "Sharding", "States", "comm_buffers", "gradients", "layer_params",
           "model_states", "plus", "sharding"]

FloatArray = npt.NDArray[np.float64]
FP32 = 4
"""Bytes of the fp32 gradient copy an offloaded optimizer steps on."""


@dataclass(frozen=True)
class Sharding:
    """How one layout splits parameters: tensor degrees, and the ZeRO shard groups of dense and expert states."""

    tp: FloatArray
    expert_split: FloatArray
    """GPUs one routed expert's weights are split over: etp x ep."""
    group: FloatArray
    """GPUs one ZeRO shard of the dense states spans: the HSDP group, or all dp x cp replicas."""
    expert_group: FloatArray
    """The same for routed experts (their data-parallel group is dp x cp x tp / (etp x ep))."""
    zero: npt.NDArray[np.int64]


def sharding(lay: LayoutArrays) -> Sharding:
    """The sharding of every layout in ``lay``."""
    tp = lay.tp.astype(np.float64)
    split = (lay.expert_tp * lay.ep).astype(np.float64)
    group = lay.shard_group.astype(np.float64)
    return Sharding(tp=tp, expert_split=split, group=group, expert_group=np.maximum(group * tp / split, 1.0),
                    zero=lay.effective_zero_stage)


@dataclass(frozen=True)
class States:
    """Model states of one rank (bytes), after tensor, expert and ZeRO sharding, on the device and the host."""

    params: FloatArray
    grads: FloatArray
    master: FloatArray
    optimizer: FloatArray
    temporaries: FloatArray
    """Optimizer-step temporaries."""
    host: FloatArray
    """What offload keeps in host memory (states, weights or gradients, and staging buffers)."""
    num_params: FloatArray
    """Parameters the rank holds before ZeRO sharding."""
    dense: FloatArray
    """Of those, the dense (non-expert) ones."""
    trainable: FloatArray
    """Of ``num_params``, the ones that train."""
    trainable_dense: FloatArray


def _local(held: StageParams, sh: Sharding) -> dict[str, tuple[FloatArray, FloatArray | None]]:
    """(dense, experts) parameters one rank holds before ZeRO: all, trainable, and layer matmul weights (experts
    None where no stage holds any: adding their 0 would change no value)."""
    if not (np.any(held.experts) or np.any(held.trainable_experts) or np.any(held.matmul_experts)):
        return {"all": (held.split / sh.tp + held.replicated, None),
                "train": (held.trainable_split / sh.tp + held.trainable_replicated, None),
                "matmul": (held.matmul_split / sh.tp, None)}
    return {
        "all": (held.split / sh.tp + held.replicated, held.experts / sh.expert_split),
        "train": (held.trainable_split / sh.tp + held.trainable_replicated, held.trainable_experts / sh.expert_split),
        "matmul": (held.matmul_split / sh.tp, held.matmul_experts / sh.expert_split),
    }


def _sum(dense: FloatArray, experts: FloatArray | None) -> FloatArray:
    return dense if experts is None else dense + experts


def embedding_grad_split(training: TrainingConfig, sh: Sharding) -> FloatArray:
    """Over how many ranks the word embedding's gradient rows are split: tp, but 1 (every row) with torch at
    tp > 1 and unsharded gradients (ZeRO < 2): DTensor has no row-wise strategy for embedding_dense_backward
    (torch/distributed/tensor/_ops/_embedding_ops.py), so the vocabulary-parallel embedding's gradient is a Partial
    tensor of all V rows, the weight's .grad until the optimizer step (measured: tests/test_memory_torch_sp.py,
    llama-2-7b tp 2 fp32)."""
    if training.framework is not Framework.TORCH:
        return sh.tp
    return np.asarray(np.where(sh.zero < 2, 1.0, sh.tp))


def model_states(per_param: StateBytes, training: TrainingConfig, held: StageParams, sh: Sharding) -> States:
    """Weights, gradients, master weights, optimizer states and step temporaries, ZeRO-sharded over the shard
    group from the stage each one starts being sharded at; offloaded ones moved to the host."""
    local = _local(held, sh)

    def shard(from_stage: int, part: str) -> FloatArray:
        dense, experts = local[part]
        sharded = dense / sh.group if experts is None else dense / sh.group + experts / sh.expert_group
        return np.asarray(np.where(sh.zero >= from_stage, sharded, _sum(dense, experts)))

    weights = per_param.param * (shard(3, "all") - shard(3, "matmul")) + per_param.matmul_weight * shard(3, "matmul")
    if per_param.trainable_param != per_param.param:  # PEFT's fp32 adapters on a half base
        weights = weights + (per_param.trainable_param - per_param.param) * shard(3, "train")
    hpz = training.zero_hpz_partition_size
    if hpz > 1:
        # ZeRO++ hpZ: a secondary copy of the half weights sharded within the node, kept through the step
        # (Wang et al. 2023, section 4.1: M / node_size per GPU).
        dense, experts = local["all"]
        weights = weights + np.where(sh.zero >= 3, per_param.param * _sum(dense, experts) / np.minimum(hpz, sh.group),
                                     0.0)
    trainable = shard(1, "train")
    has_trainable = _sum(*local["train"]) > 0
    temporaries = per_param.step_temp_local * trainable + per_param.step_temp_largest * np.where(
        has_trainable, held.largest_tensor, 0.0)
    whole = held.trainable_embedding / embedding_grad_split(training, sh) - held.trainable_embedding / sh.tp
    grads = per_param.grad * (shard(2, "train") + whole)
    master, optimizer = per_param.master * trainable, per_param.states * trainable
    megatron = training.framework is Framework.MEGATRON
    host = 0.0 * grads
    staging = overhead_model()
    if training.offload_optimizer is not OffloadDevice.NONE:
        # ZeRO-Offload / Megatron's HybridDeviceOptimizer: master weights and states live on the host and the step
        # runs there on an fp32 copy of the gradient shard; DeepSpeed (ZeRO >= 2) moves the gradient partition to
        # the host as its buckets reduce (Megatron keeps its grad buffer on the GPU).
        host = host + (master + optimizer + FP32 * trainable if training.offload_optimizer is OffloadDevice.CPU
                       else staging.nvme_optimizer_buffers * FP32 * np.minimum(trainable,
                                                                            staging.nvme_optimizer_sub_group))
        master, optimizer, temporaries = 0.0 * master, 0.0 * optimizer, 0.0 * temporaries
        grads = grads if megatron else np.where(sh.zero >= 2, 0.0, grads)
    if training.offload_params is not OffloadDevice.NONE:
        # ZeRO-Infinity offload_param / FSDP CPUOffload: the (sharded) weights and gradients live on the host and
        # each layer is copied in for its forward and backward (the ZeRO-3 gather buffers, comm_buffers).
        host = host + (weights + grads if training.offload_params is OffloadDevice.CPU
                       else 0.0 * weights + staging.nvme_param_buffer_bytes)
        weights, grads = 0.0 * weights, 0.0 * grads
    return States(params=weights, grads=grads, master=master, optimizer=optimizer, temporaries=temporaries,
                  host=np.asarray(host), num_params=_sum(*local["all"]), dense=local["all"][0],
                  trainable=_sum(*local["train"]), trainable_dense=local["train"][0])


@dataclass(frozen=True)
class LayerParams:
    """Parameters one rank holds of one layer, and of them the ones that train."""

    dense: FloatArray
    moe: FloatArray
    """An MoE layer without its routed experts."""
    experts: FloatArray
    """The routed experts of an MoE layer."""
    attention: FloatArray
    """The attention part of a layer (with its norms)."""
    trainable_dense: FloatArray
    trainable_moe: FloatArray
    """A trainable MoE layer's trainable parameters, routed experts included."""
    trainable_attention: FloatArray
    """Of ``attention``, what trains in a layer that trains (LoRA: the attention adapters)."""


def layer_params(model: ModelConfig, training: TrainingConfig, sh: Sharding) -> LayerParams:
    """One layer's local parameters (and its trainable ones, as a layer that trains has them)."""
    lc = layer_constants(model)
    attention = lc.attn_split / sh.tp + lc.attn_replicated
    dense = attention + lc.mlp_split / sh.tp + lc.mlp_replicated
    moe = attention + lc.moe_shared_split / sh.tp + lc.moe_shared_replicated + lc.moe_router
    experts = lc.moe_experts / sh.expert_split
    if training.lora is None:
        return LayerParams(dense=dense, moe=moe, experts=experts, attention=attention, trainable_dense=dense,
                           trainable_moe=moe + experts, trainable_attention=attention)
    shared = model.moe.shared_expert_ffn_hidden_size if model.moe is not None else 0
    ad_dense = adapter_counts(model, training.lora, model.ffn_hidden_size)
    ad_moe = adapter_counts(model, training.lora, shared)
    ad_attn = adapter_counts(model, training.lora, 0)
    return LayerParams(dense=dense, moe=moe, experts=experts, attention=attention,
                       trainable_dense=ad_dense.split / sh.tp + ad_dense.replicated,
                       trainable_moe=ad_moe.split / sh.tp + ad_moe.replicated + 0.0 * experts,
                       trainable_attention=ad_attn.split / sh.tp + ad_attn.replicated + 0.0 * sh.tp)


def _reshard_group(training: TrainingConfig) -> int:
    """GPUs FSDP2 keeps each layer's weights over after its forward: 0 when it frees them (True), 1 when it
    keeps them whole (False), or the integer it was given."""
    r = training.reshard_after_forward
    return 0 if r is True else 1 if r is False else int(r)


def comm_buffers(per_param: StateBytes, training: TrainingConfig, lay: LayoutArrays, shape: StageShape,
                 states: States, layer: LayerParams, sh: Sharding) -> tuple[FloatArray, FloatArray]:
    """Communication buffers during the passes and at the optimizer step."""
    megatron = training.framework is Framework.MEGATRON
    zero = sh.zero
    n, nm = shape.num_layers, shape.num_moe_layers
    moe_layer = layer.moe + layer.experts
    layer_local = np.where(nm > 0, np.maximum(moe_layer, layer.dense), layer.dense)
    layer_train = np.where(shape.num_trainable_layers > 0, np.where(
        shape.num_trainable_moe_layers > 0, np.maximum(layer.trainable_moe, layer.trainable_dense),
        layer.trainable_dense), 0.0)
    edge_local = states.dense - (n - nm) * layer.dense - nm * layer.moe
    replicas = (lay.dp * lay.cp).astype(np.float64)
    ddp = (zero <= 1) & (replicas > 1) & (not megatron)
    # torch DDP keeps bucket buffers as large as all gradients (gradient_as_bucket_view=False, the default);
    # frozen parameters have no gradient and no bucket.
    passes = np.where(ddp, per_param.grad * states.trainable, 0.0)
    step = passes
    # ZeRO-2: one FSDP unit's unsharded gradients before its reduce-scatter; ZeRO-3 (and weights offloaded at
    # any stage, copied in unit by unit): that plus the current and prefetched units' gathered parameters, and
    # the root unit (embeddings, head) gathered for the whole pass; FSDP2 with reshard_after_forward False or n
    # also keeps every layer that ran its forward whole or 1/n until its backward.
    gathered = training.offload_params is not OffloadDevice.NONE
    passes = np.where(zero == 2, per_param.grad * layer_train, passes)
    root = np.where(gathered, 1.0, 1.0 - 1.0 / sh.group)
    kept = _reshard_group(training)
    reshard = per_param.param * n * layer_local / kept if kept else 0.0 * passes
    z3 = 2 * per_param.param * layer_local + per_param.grad * layer_train + per_param.param * edge_local * root
    passes = np.where((zero == 3) | gathered, z3 + np.where(zero == 3, reshard, 0.0), passes)
    return passes, step


@dataclass(frozen=True)
class Gradients:
    """Gradients live at each moment of the passes (bytes per rank)."""

    passes: FloatArray
    """While activations are live."""
    top: FloatArray
    """While the top layer runs its MLP's backward (the head's gradient written)."""
    top_attention: FloatArray
    """While it runs its attention's backward (its MLP's gradients written too)."""
    late: FloatArray
    """While the stage's first layer runs its MLP's backward."""
    late_attention: FloatArray
    """While the stage's first layer runs its attention's backward."""
    tied_buffer: FloatArray | None
    """torch's autograd input buffer of a tied head and embedding on one stage (None: none, untied or Megatron)."""


def plus(a: FloatArray, b: FloatArray | None) -> FloatArray:
    """``a + b``, or ``a`` where ``b`` is None: a term that is 0 throughout (adding it would change no value)."""
    return a if b is None else np.asarray(a + b)


def gradients(model: ModelConfig, training: TrainingConfig, per_param: StateBytes, lay: LayoutArrays,
              shape: StageShape, states: States, layer: LayerParams, sh: Sharding) -> Gradients:
    """When the gradients of the stage exist during the passes (Megatron: its buffer, always)."""
    megatron = training.framework is Framework.MEGATRON
    first = shape.is_first.astype(np.float64)
    last = shape.is_last.astype(np.float64)
    grads = states.grads
    # Megatron's grad buffer always exists; torch's .grad tensors once a backward has run in this step (zero_grad
    # sets them to None): with gradient accumulation (m > 1) the later micro-batches run with them (a stage whose
    # peak precedes its first backward is overestimated by them).
    passes = grads if megatron else np.where(lay.num_microbatches > 1, grads, 0.0)
    embeddings_train, head_trains = trains(model, training)
    # Once the loss gradient is through the head, its weight gradient exists (torch creates it then) while the
    # top layer runs its backward (and, with recomputation, its working set).
    vh = model.vocab_size * model.hidden_size / sh.tp
    head_grad = last * per_param.grad * (vh if head_trains else 0.0)
    if training.offload_params is not OffloadDevice.NONE:
        head_grad = 0.0 * head_grad  # written into the host copy as it is produced
    # torch, tied head and embedding on one stage: the weight's gradient node has two inputs, so autograd holds the
    # head's contribution in its input buffer (torch/csrc/autograd/input_buffer.cpp) and writes .grad only when the
    # embedding's arrives at the very end of backward: one V x h gradient while the layers run their backward, in
    # the buffer, and two at the end (the buffered one and the embedding's).
    tied = not megatron and model.tied_embeddings and head_trains
    tied_buffer = first * head_grad if tied else None
    head_written = head_grad if tied_buffer is None else head_grad - tied_buffer
    top = np.maximum(passes, head_written)
    # Late backward: the stage's first layer is being recomputed; its own gradients and the embeddings' are not
    # written yet.
    emb_grad = model.vocab_size * model.hidden_size / embedding_grad_split(training, sh)
    if model.position_embedding is PositionEmbedding.LEARNED:
        emb_grad = emb_grad + model.max_position_embeddings * model.hidden_size
    emb_grad = (emb_grad + model.type_vocab_size * model.hidden_size) * (1.0 if embeddings_train else 0.0)
    n = shape.num_layers.astype(np.float64)
    n_moe = shape.num_moe_layers
    k_late = np.minimum(np.where(lay.recompute_num_layers > 0, lay.recompute_num_layers, 1), n)
    # (the first layer's kind is known only when the stage's layers are all of one kind; else the smaller; a
    # stage whose first layer is frozen writes no gradient for it)
    moe_layer, dense_layer = layer.trainable_moe, layer.trainable_dense
    first_layer = np.where(shape.num_trainable_layers < n, 0.0, np.where(
        n_moe == shape.num_layers, moe_layer, np.where(n_moe > 0, np.minimum(dense_layer, moe_layer), dense_layer)))
    not_yet = k_late * first_layer + first * emb_grad
    sharded = sh.zero >= 2
    late = plus(np.maximum(top, grads - per_param.grad * np.where(sharded, not_yet / sh.group, not_yet)), tied_buffer)
    # By the time the first layer's attention runs its backward, its MLP's gradients are written too.
    first_trains = shape.num_trainable_layers >= n
    not_yet_attn = np.minimum(not_yet, np.where(first_trains, layer.trainable_attention + (k_late - 1) * dense_layer,
                                                0.0) + first * emb_grad)
    late_attn = plus(np.maximum(top, grads - per_param.grad * np.where(sharded, not_yet_attn / sh.group,
                                                                       not_yet_attn)), tied_buffer)
    # the top layer trains whenever any of the stage's layers does (the trainable ones are the last)
    mlp_layer = np.where(shape.num_trainable_layers > 0, np.where(
        n_moe == shape.num_layers, moe_layer, dense_layer) - layer.trainable_attention, 0.0)
    top_attn = np.maximum(passes, np.minimum(
        head_written + per_param.grad * np.where(sharded, mlp_layer / sh.group, mlp_layer), grads))
    return Gradients(passes=passes, top=top, top_attention=np.where(n > 0, top_attn, top), late=late,
                     late_attention=late_attn, tied_buffer=tied_buffer)
