"""One tensor-parallel rank of a Hugging Face Llama-lineage model under torchtitan's TP plan, measured by the probe.

The model is the class the estimator's torch terms follow (``hf_training_setup``), parallelised with torch's
``parallelize_module`` as torchtitan's ``apply_tp`` does (torchtitan/models/llama3/infra/parallelize.py):
``RowwiseParallel`` embedding with a sequence-sharded output, ``SequenceParallel`` norms, ``PrepareModuleInput``
all-gathering each block's input before the colwise q/k/v and gate/up projections, rowwise o/down projections
reduce-scattering over the sequence, a colwise head with vocabulary-sharded logits and the loss under
``loss_parallel``. The process group is torch's fake one (``FakeStore``), world size = tp, so this process is rank 0
and collectives move nothing; the probe's fake tensors hold no storage. Position ids are passed whole, as torchtitan
passes its rotary table whole.
Parameters the plan leaves whole (q/k norms) are replicated DTensors, as torch's optimizer needs one kind of tensor.
"""

from __future__ import annotations

from typing import Any

from frenzy_core import ModelConfig, TrainingConfig
from frenzy_core.memory.hf_models import hf_training_setup
from frenzy_core.memory.probe import ProbeResult, measure_training_step


def _mesh(tp: int) -> Any:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != tp:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    return init_device_mesh("cpu", (tp,))


def _replicated(module: Any, mesh: Any) -> None:
    """A module the plan leaves whole, its parameters as replicated DTensors (run on the local tensors)."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    distribute_module(module, mesh,
                      input_fn=lambda _m, inputs, mesh: tuple(
                          DTensor.from_local(x, mesh, [Replicate()], run_check=False) for x in inputs),
                      output_fn=lambda _m, out, _mesh: out.to_local())


def _apply_tp(model: Any, mesh: Any) -> Any:
    """torchtitan's apply_tp, on Hugging Face module names."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    base = model.model
    # (the residual stream stays a DTensor of the global shape, use_local_output=False, so that the masks the
    # model builds from the embedding output cover the whole sequence as torchtitan's do; a DTensor holds no
    # storage of its own, so the bytes are those of torchtitan's plain local tensors)
    parallelize_module(base, mesh, {"embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                                                    use_local_output=False),
                                    "norm": SequenceParallel()})
    parallelize_module(model, mesh, {"lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                                                use_local_output=False)})
    for layer in base.layers:
        parallelize_module(layer, mesh, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                            desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })
        for name in ("q_norm", "k_norm"):
            if hasattr(layer.self_attn, name):
                _replicated(getattr(layer.self_attn, name), mesh)
    return model


def probe_torchtitan_tp(model: ModelConfig, training: TrainingConfig, tp: int, *, steps: int = 2,
                        attribute_peak: bool = False) -> ProbeResult:
    """Peak memory of rank 0 of ``tp`` tensor-parallel ranks with sequence parallelism, the framework loop."""
    import torch
    from torch.distributed.tensor.parallel import loss_parallel

    mesh = _mesh(tp)
    setup = hf_training_setup(model, training, steps=steps)
    b, s = training.micro_batch_size, training.seq_len

    def batch() -> dict[str, Any]:
        return {"input_ids": torch.zeros(b, s, dtype=torch.long), "position_ids": torch.arange(s).unsqueeze(0)}

    def loss(output: Any) -> Any:
        # torchtitan's cross_entropy_loss: flatten, upcast, cross_entropy against the labels
        logits = output.logits
        labels = torch.zeros(logits.shape[0] * logits.shape[1], dtype=torch.long)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels)

    try:
        with setup.runtime(), loss_parallel():
            return measure_training_step(lambda: _apply_tp(setup.module_factory(), mesh), batch,
                                         optimizer_factory=setup.optimizer_factory, loss_fn=loss, backbone="model",
                                         autocast_dtype=setup.autocast_dtype, steps=steps,
                                         attribute_peak=attribute_peak,
                                         label=f"{setup.label}, torchtitan TP+SP over {tp} ranks")
    finally:  # later tests must not see this process group
        torch.distributed.destroy_process_group()


def tracked_peak(rank: int, world: int, backend: str, port: int, out: Any) -> None:
    """One rank of a small real-tensor run of the same plan (eager attention, bf16, two steps) on ``backend``
    ("gloo": real collectives between processes; "fake": this module's stand-in): MemTracker's peak bytes into
    the queue ``out`` as (backend, rank, bytes). Run in a spawned process per rank."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    if backend == "gloo":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (world,))
    else:
        mesh = _mesh(world)
    model = ModelConfig.preset("llama-3.1-8b").replace(num_layers=2, hidden_size=256, num_attention_heads=4,
                                                       num_kv_heads=2, ffn_hidden_size=512, vocab_size=2048)
    b, s = 2, 256
    training = TrainingConfig(seq_len=s, global_batch_size=b, micro_batch_size=b, precision="bf16", attention="eager")
    setup = hf_training_setup(model, training, steps=2)
    torch.manual_seed(0)
    module = _apply_tp(setup.module_factory(), mesh)
    module.train()
    optimizer = setup.optimizer_factory(module.parameters())
    tracker = MemTracker()
    tracker.track_external(module, optimizer)
    with setup.runtime(), loss_parallel(), tracker:
        for _ in range(2):
            ids = torch.randint(0, model.vocab_size, (b, s))
            output = module(input_ids=ids, position_ids=torch.arange(s).unsqueeze(0))
            loss = torch.nn.functional.cross_entropy(output.logits.flatten(0, 1).float(), ids.flatten())
            del output
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            tracker.reset_mod_stats()
    peak = tracker.get_tracker_snapshot("peak")
    out.put((backend, rank, sum(sum(v.values()) for v in peak.values())))
    dist.destroy_process_group()
