"""``CheckpointModel``: what stopping and restarting a training job costs (save, restore, lost work).

A checkpoint holds the model's working weights, fp32 master weights and optimizer states (bytes per parameter
from :func:`frenzy_core.memory.recipe.state_bytes`; gradients are not saved). Every rank writes and reads its
own shard (Megatron-Core distributed checkpointing, PyTorch DCP), so a job of n GPUs moves its checkpoint at n
times the per-GPU storage bandwidth. Costs:

* a planned stop (preemption, resize) saves first: ``save_s`` + ``restore_s`` on restart, no work lost;
* a failure restarts from the last periodic checkpoint: ``restore_s``, and the work since that checkpoint is
  lost (periodic checkpoints, every ``interval_s`` of training, are asynchronous: they cost no training time,
  as with Megatron-Core's ``--async-save``).
"""

from __future__ import annotations

from pydantic import Field, PrivateAttr

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.training import TrainingConfig
from frenzy_core.memory.recipe import state_bytes

__all__ = ["DEFAULT_CHECKPOINT_INTERVAL_S", "DEFAULT_STORAGE_BYTES_PER_S_PER_GPU", "CheckpointModel"]

DEFAULT_STORAGE_BYTES_PER_S_PER_GPU = 2e12 / 16384
"""About 122 MB/s per GPU: Llama 3's storage (Tectonic) sustains 2 TB/s for its 16,384-H100 training cluster
(Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, section 3.3.1), shared evenly."""

DEFAULT_CHECKPOINT_INTERVAL_S = 3600.0
"""One periodic checkpoint per hour of training (our choice: the order of the intervals large runs use; a failure
then loses half an hour of work on average)."""


class CheckpointModel(FrozenModel):
    """Checkpoint sizes and the time to save and restore them over a shared storage bandwidth."""

    storage_bytes_per_s_per_gpu: float = Field(default=DEFAULT_STORAGE_BYTES_PER_S_PER_GPU, gt=0, description=(
        "Read and write bandwidth each GPU's rank gets from storage."))
    interval_s: float = Field(default=DEFAULT_CHECKPOINT_INTERVAL_S, gt=0, description=(
        "Training time between periodic checkpoints (what a failure can lose)."))
    _bytes: dict[tuple[int, int], tuple[ModelConfig, TrainingConfig, int]] = PrivateAttr(default_factory=dict)
    """(id(model), id(training)) -> the pair and its checkpoint bytes: a policy prices moves of the same few
    (model, recipe) pairs thousands of times per run, and counting parameters is slow; the pair is kept so its
    ids stay its own."""

    def checkpoint_bytes(self, model: ModelConfig, training: TrainingConfig) -> int:
        """Working weights + master weights + optimizer states of the whole model."""
        key = (id(model), id(training))
        hit = self._bytes.get(key)
        if hit is None:
            b = state_bytes(training)
            hit = self._bytes[key] = (model, training, int(model.num_params() * (b.param + b.master + b.states)))
        return hit[2]

    def save_s(self, model: ModelConfig, training: TrainingConfig, num_gpus: int) -> float:
        """Seconds for ``num_gpus`` ranks to write the checkpoint."""
        return self.checkpoint_bytes(model, training) / (self.storage_bytes_per_s_per_gpu * num_gpus)

    def restore_s(self, model: ModelConfig, training: TrainingConfig, num_gpus: int) -> float:
        """Seconds for ``num_gpus`` ranks to read it back (same bandwidth)."""
        return self.save_s(model, training, num_gpus)
