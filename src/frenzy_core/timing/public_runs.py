"""Published measured training runs (``throughput_public.json``) as time-model measurements.

One JSON object per run: its source, framework (``torch-fsdp``: Composer/FSDP; ``nemo`` and ``megatron``:
Megatron-Core with Transformer Engine), model (architecture numbers or ``{"preset": name}``), GPU, layout, recipe,
the measured step time and the overlaps the source states (``run_settings``). What the rows' ``notes`` say about
the recipe (fp8 scaling, Megatron-FSDP, compile) is read into the configs; :data:`PUBLIC_ASSUMPTIONS` lists what
the sources leave out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from frenzy_core._base import FrozenModel
from frenzy_core._files import load_json, read_text
from frenzy_core.config.model import ModelConfig
from frenzy_core.config.parallel import ParallelConfig, PipelineSchedule
from frenzy_core.config.training import Attention, Fp8Recipe, Framework, Precision, Recompute, TrainingConfig
from frenzy_core.errors import ConfigError
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.timing.calibrate import Measurement

__all__ = ["PUBLIC_ASSUMPTIONS", "PublicRun", "public_run_measurement", "read_public_runs"]

PUBLIC_ASSUMPTIONS: tuple[str, ...] = (
    "torch-fsdp rows (MosaicML llm-foundry): eager PyTorch (no torch.compile), FSDP with forward and backward "
    "prefetch of one layer, Transformer Engine fp8 (delayed scaling) where precision is amp_fp8, and FlashAttention "
    "in Triton (attention 'triton': scripts/train/benchmarking/submit_benchmarks.py sets MPT's attn_impl from "
    "--attn_impl, default 'triton' at every commit from May 2023 to Jan 2024, b2a43a1 and 5e85bd6 wrote the tables)",
    "nemo and megatron rows: Megatron-Core with Transformer Engine; fp8 'delayed scaling' rows use the delayed "
    "recipe, 'FP8-CS' rows current scaling; overlaps the source does not state are left at the library defaults",
    "Megatron-Bridge rows without stated overlaps: that library's defaults (Megatron-Bridge @ 97ad8cc6, "
    "training/comm_overlap.py and the Llama 3 / 3.1 recipes): TP communication overlap where tp > 1 with sequence "
    "parallelism (the recipes set tp_comm_overlap=True; comm_overlap.py keeps it only then), p2p overlap where "
    "vpp > 1 (overlap_p2p_comm)",
)

_FRAMEWORKS = {"torch-fsdp": Framework.TORCH, "torch": Framework.TORCH, "nemo": Framework.MEGATRON,
               "megatron": Framework.MEGATRON}


class PublicRun(FrozenModel):
    """One published run as the JSON gives it (only the fields the time model reads)."""

    id: str
    source: str
    framework: str
    model: dict[str, Any]
    gpu: str
    num_gpus: int = Field(gt=0)
    dp: int = Field(gt=0)
    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    vpp: int = Field(gt=0)
    cp: int = Field(gt=0)
    ep: int = Field(gt=0)
    zero_stage: int = Field(ge=0, le=3)
    micro_batch: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    precision: Precision
    recompute: Recompute
    attention: Attention
    measured_step_s: float = Field(gt=0)
    run_settings: dict[str, float] | None = None
    distributed_optimizer: bool = False
    sequence_parallel: bool = False
    notes: str = ""
    not_modelled: list[str] = Field(default_factory=list)

    @property
    def fp8_recipe(self) -> Fp8Recipe:
        """The fp8 scaling recipe the notes name (current scaling for 'FP8-CS', else delayed)."""
        return Fp8Recipe.CURRENT if "FP8-CS" in self.notes or "current scaling" in self.notes else Fp8Recipe.DELAYED


def read_public_runs(path: str | Path) -> list[PublicRun]:
    """The runs of a ``throughput_public.json`` file (a JSON list of objects)."""
    data = load_json(read_text(path, "public runs file"), str(path))
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a JSON list of runs, got {type(data).__name__}", field="path")
    keys = set(PublicRun.model_fields)
    return [PublicRun.model_validate({k: v for k, v in row.items() if k in keys}) for row in data]


def _run_settings(run: PublicRun) -> dict[str, float]:
    """The overlaps the run states, or for Megatron-Bridge runs that state none the library's own defaults
    (:data:`PUBLIC_ASSUMPTIONS`), which differ from Megatron-LM's (all off)."""
    if run.run_settings is not None or "Megatron-Bridge" not in run.source:
        return dict(run.run_settings or {})
    settings: dict[str, float] = {}
    if run.tp > 1 and run.sequence_parallel:
        settings["tensor_parallel_overlap"] = 1.0
    if run.pp > 1 and run.vpp > 1:
        settings["pipeline_p2p_overlap"] = 1.0
    return settings


def _attention(run: PublicRun) -> Attention:
    """The kernel the run used: llm-foundry's benchmark runs take MPT's default Triton FlashAttention
    (:data:`PUBLIC_ASSUMPTIONS`); other rows as stated."""
    if "llm-foundry" in run.source and run.attention is Attention.FLASH:
        return Attention.TRITON
    return run.attention


def _model(run: PublicRun) -> ModelConfig:
    if "preset" in run.model:
        return ModelConfig.preset(str(run.model["preset"]))
    return ModelConfig.model_validate(run.model)


def public_run_measurement(run: PublicRun) -> Measurement:
    """The run as a :class:`Measurement` (measured seconds per step and the run's stated overlaps)."""
    framework = _FRAMEWORKS.get(run.framework)
    if framework is None:
        raise ConfigError(f"run {run.id}: unknown framework {run.framework!r}", field="framework",
                          value=run.framework, hint="use one of " + ", ".join(sorted(_FRAMEWORKS)))
    if run.dp * run.tp * run.pp * run.cp != run.num_gpus:
        raise ConfigError(f"run {run.id}: dp x tp x pp x cp = {run.dp * run.tp * run.pp * run.cp} is not "
                          f"num_gpus={run.num_gpus}", field="num_gpus", value=run.num_gpus)
    training = TrainingConfig(
        seq_len=run.seq_len, micro_batch_size=run.micro_batch, global_batch_size=run.global_batch,
        precision=run.precision, recompute=run.recompute, attention=_attention(run),
        zero_stage=0 if run.distributed_optimizer else run.zero_stage,
        distributed_optimizer=run.distributed_optimizer, sequence_parallel=run.sequence_parallel and run.tp > 1,
        framework=framework, fp8_recipe=run.fp8_recipe)
    parallel = ParallelConfig(dp=run.dp, tp=run.tp, pp=run.pp, vpp=run.vpp, cp=run.cp, ep=run.ep,
                              schedule=PipelineSchedule.INTERLEAVED if run.vpp > 1 else PipelineSchedule.ONE_F_ONE_B)
    return Measurement(model=_model(run), training=training, parallel=parallel, gpu=get_gpu_spec(run.gpu),
                       iteration_s=run.measured_step_s, run_settings=_run_settings(run), label=run.id)
