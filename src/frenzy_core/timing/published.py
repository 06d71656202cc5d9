"""Published GPT training throughputs (CSV) as time-model measurements, with each source's run settings.

Reads the format of ``throughput_megatron.csv`` (columns ``source,gpu,params_b,hidden,layers,heads,seq_len,vocab,
tp,pp,num_gpus,global_batch,tflops_per_gpu,notes``): Narayanan et al. SC21 Table 1 on A100 and the Megatron-LM
README model table (2025) on H100. Settings the sources state are applied; settings they leave out are the
assumptions listed in :data:`ASSUMPTIONS` (stated again in docs/benchmarks.md).
"""

from __future__ import annotations

import csv
from pathlib import Path

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Attention, Framework, Precision, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpu import GPUSpec
from frenzy_core.timing.calibrate import Measurement
from frenzy_core.timing.flops import training_flops

__all__ = ["ASSUMPTIONS", "ThroughputRow", "read_throughput_csv", "row_measurement"]

ASSUMPTIONS: tuple[str, ...] = (
    "micro-batch size 1 (neither source lists it)",
    ("interleaved schedule where pp > 1 with vpp = the smallest divisor > 1 of layers / pp (SC21 notes say "
     "interleaved; vpp is not listed); 1F1B when layers / pp is 1"),
    "embeddings tied or untied, whichever parameter count is closer to the published params_b",
    "hidden and attention dropout 0.1 (Megatron-LM's --hidden-dropout / --attention-dropout defaults)",
    ("SC21 rows: fp16 mixed precision, full recompute, unfused (eager) attention, no sequence parallelism, "
     "Megatron DDP (no ZeRO), TFLOPS counted with recompute (96 B s l h^2 (1 + s/6h + V/16lh)), as its notes say"),
    ("Megatron README rows: bf16 mixed precision, no recompute, flash attention, sequence parallelism, "
     "distributed optimizer, TP and PP communication fully overlapped and DP overlapped within the default window "
     "(the README lists --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather and p2p overlap), "
     "TFLOPS = model FLOPs (72 B s l h^2 (1 + s/6h + V/12lh), Megatron's num_floating_point_operations)"),
)


_MEGATRON_DROPOUT = 0.1  # megatron/training/arguments.py: --hidden-dropout and --attention-dropout defaults


class ThroughputRow(FrozenModel):
    """One row of a published-throughput CSV."""

    source: str
    gpu: str
    params_b: float = Field(gt=0)
    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    vocab: int = Field(gt=0)
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    num_gpus: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    tflops_per_gpu: float = Field(gt=0)
    notes: str = ""

    @property
    def is_sc21(self) -> bool:
        """Whether the row is from Narayanan et al. SC21 (A100, full recompute, TFLOPS with recompute)."""
        return self.source.startswith("Narayanan")


def read_throughput_csv(path: str | Path) -> list[ThroughputRow]:
    """The rows of a throughput CSV in the ``throughput_megatron.csv`` format."""
    with Path(path).open(newline="", encoding="utf-8") as fh:
        return [ThroughputRow.model_validate({k: v for k, v in rec.items() if k is not None})
                for rec in csv.DictReader(fh)]


def _model(row: ThroughputRow) -> ModelConfig:
    base = ModelConfig(name=f"gpt-{row.params_b}b", num_layers=row.layers, hidden_size=row.hidden,
                       num_attention_heads=row.heads, vocab_size=row.vocab, max_position_embeddings=row.seq_len,
                       hidden_dropout=_MEGATRON_DROPOUT, attention_dropout=_MEGATRON_DROPOUT)
    untied = base.replace(tied_embeddings=False)
    target = row.params_b * 1e9
    return min((base, untied), key=lambda m: abs(m.num_params() - target))


def _vpp(row: ThroughputRow) -> int:
    per_stage = row.layers // row.pp
    return next((d for d in range(2, per_stage + 1) if per_stage % d == 0), 1) if row.pp > 1 else 1


def row_measurement(row: ThroughputRow, gpu: GPUSpec) -> Measurement:
    """The row as a :class:`Measurement` (measured seconds per iteration) under :data:`ASSUMPTIONS`."""
    if row.num_gpus % (row.tp * row.pp) != 0:
        raise ConfigError(f"num_gpus={row.num_gpus} is not a multiple of tp x pp = {row.tp * row.pp}",
                          field="num_gpus", value=row.num_gpus)
    model = _model(row)
    vpp = _vpp(row)
    parallel = ParallelConfig(dp=row.num_gpus // (row.tp * row.pp), tp=row.tp, pp=row.pp, vpp=vpp,
                              schedule=PipelineSchedule.INTERLEAVED if vpp > 1 else PipelineSchedule.ONE_F_ONE_B)
    if row.is_sc21:
        training = TrainingConfig(seq_len=row.seq_len, global_batch_size=row.global_batch,
                                  precision=Precision.FP16_MIXED, recompute=Recompute.FULL,
                                  attention=Attention.EAGER, framework=Framework.MEGATRON)
    else:
        training = TrainingConfig(seq_len=row.seq_len, global_batch_size=row.global_batch,
                                  precision=Precision.BF16_MIXED, recompute=Recompute.NONE,
                                  attention=Attention.FLASH, sequence_parallel=row.tp > 1,
                                  distributed_optimizer=True, framework=Framework.MEGATRON)
    counted = training_flops(model, row.seq_len, row.global_batch,
                             Recompute.FULL if row.is_sc21 else Recompute.NONE)
    iteration_s = counted / (row.tflops_per_gpu * 1e12 * row.num_gpus)
    overlap = {} if row.is_sc21 else {"tensor_parallel_overlap": 1.0, "pipeline_p2p_overlap": 1.0}
    return Measurement(model=model, training=training, parallel=parallel, gpu=gpu, iteration_s=iteration_s,
                       run_settings=overlap, label=f"{row.gpu} {row.params_b:g}B")

