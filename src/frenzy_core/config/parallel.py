"""``ParallelConfig``: how a job is split over GPUs (data, tensor, pipeline, context, expert)."""

from __future__ import annotations

from pydantic import Field, model_validator

from frenzy_core._base import CodedEnum, FrozenModel
from frenzy_core.errors import ConfigError

__all__ = ["ParallelConfig", "PipelineSchedule"]


class PipelineSchedule(CodedEnum):
    """Pipeline schedule: decides how many micro-batches a stage holds at once; ``code`` 0, 1, 2 in this order."""

    ONE_F_ONE_B = "1f1b"
    """PipeDream-flush 1F1B: stage i holds pp - i micro-batches."""
    INTERLEAVED = "interleaved"
    """Megatron's interleaved 1F1B over ``vpp`` virtual stages per rank."""
    GPIPE = "gpipe"
    """All forwards, then all backwards: every stage holds all micro-batches."""


class ParallelConfig(FrozenModel):
    """Degrees of parallelism; ``world_size`` = dp x tp x pp x cp (experts are split inside dp x cp x tp)."""

    dp: int = Field(default=1, gt=0, description="Data-parallel replicas.")
    tp: int = Field(default=1, gt=0, description="Tensor-parallel ranks (one NVLink domain).")
    pp: int = Field(default=1, gt=0, description="Pipeline stages.")
    vpp: int = Field(default=1, gt=0, description="Virtual pipeline chunks per pipeline rank (interleaved).")
    cp: int = Field(default=1, gt=0, description="Context-parallel ranks (sequence split for attention).")
    ep: int = Field(default=1, gt=0, description="Expert-parallel ranks (taken from dp x cp x tp / etp).")
    schedule: PipelineSchedule = Field(default=PipelineSchedule.ONE_F_ONE_B, description="Pipeline schedule.")
    etp: int | None = Field(default=None, gt=0, description=(
        "Expert tensor-parallel ranks (Megatron --expert-tensor-parallel-size): routed experts are split over etp x "
        "ep GPUs and replicated over the remaining dp x cp x tp / (etp x ep). None: = tp."))
    shard_group_size: int | None = Field(default=None, gt=0, description=(
        "GPUs of the dp x cp replicas that one ZeRO/FSDP shard group spans (HSDP: shard within a group, replicate "
        "across groups; Megatron: dp x cp / --num-distributed-optimizer-instances). None: all of them."))
    stage_layers: tuple[int, ...] | None = Field(default=None, description=(
        "Transformer layers of each pipeline chunk in model order (pp x vpp entries: chunk c runs on stage c mod "
        "pp), the embedding on the first chunk and the head on the last; a chunk may hold none. None: as even as "
        "possible, the first chunks one layer longer."))
    microbatch_group_size: int | None = Field(default=None, gt=0, description=(
        "Interleaved schedule: micro-batches run per virtual stage before moving to the next (Megatron "
        "--microbatch-group-size-per-virtual-pipeline-stage). None: pp."))

    @model_validator(mode="before")
    @classmethod
    def _interleave_when_vpp(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("vpp", 1) not in (1, None) and "schedule" not in data:
            data = {**data, "schedule": PipelineSchedule.INTERLEAVED}
        return data

    @model_validator(mode="after")
    def _check(self) -> ParallelConfig:
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp={self.vpp} needs pp > 1; set pp >= 2 or vpp=1")
        if self.vpp > 1 and self.schedule is not PipelineSchedule.INTERLEAVED:
            raise ValueError(f"vpp={self.vpp} needs schedule='interleaved' (got {self.schedule.value!r})")
        if self.etp is None and (self.dp * self.cp) % self.ep != 0:
            raise ValueError(
                f"ep={self.ep} must divide dp x cp = {self.dp * self.cp}; expert-parallel ranks are taken "
                "from the data- and context-parallel ranks"
            )
        if (self.dp * self.cp * self.tp) % (self.expert_tp * self.ep) != 0:
            raise ValueError(
                f"etp x ep = {self.expert_tp} x {self.ep} must divide dp x cp x tp = {self.dp * self.cp * self.tp}; "
                "expert-parallel ranks are taken from the data-, context- and tensor-parallel ranks"
            )
        if self.shard_group_size is not None and (self.dp * self.cp) % self.shard_group_size != 0:
            raise ConfigError(f"shard_group_size={self.shard_group_size} must divide dp x cp = {self.dp * self.cp}",
                              field="shard_group_size", value=self.shard_group_size,
                              hint="use a divisor of dp x cp (the GPUs of a node, say), or None for all of them")
        if self.stage_layers is not None:
            if len(self.stage_layers) != self.pp * self.vpp or min(self.stage_layers) < 0:
                raise ConfigError(f"stage_layers={list(self.stage_layers)} must list pp x vpp = {self.pp * self.vpp} "
                                  "non-negative layer counts, one per pipeline chunk", field="stage_layers",
                                  value=list(self.stage_layers),
                                  hint="give one layer count per pipeline chunk, in model order, or None")
        if self.microbatch_group_size is not None and (self.vpp == 1 or self.microbatch_group_size < self.pp):
            raise ValueError(f"microbatch_group_size={self.microbatch_group_size} needs the interleaved schedule "
                             f"(vpp > 1) and at least pp={self.pp} micro-batches")
        return self

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel ranks (``etp``, or tp when unset)."""
        return self.tp if self.etp is None else self.etp

    @property
    def world_size(self) -> int:
        """GPUs the job uses."""
        return self.dp * self.tp * self.pp * self.cp

    def describe(self) -> str:
        """The degrees in words: ``dp=8 tp=2 pp=1``, plus vpp, cp and ep where above 1, etp where not tp, the
        shard group and the stage split where set."""
        extra = "".join(f" {k}={v}" for k, v in (("vpp", self.vpp), ("cp", self.cp), ("ep", self.ep)) if v > 1)
        extra += f" etp={self.etp}" if self.etp is not None and self.etp != self.tp else ""
        extra += f" shard_group={self.shard_group_size}" if self.shard_group_size is not None else ""
        extra += f" stage_layers={list(self.stage_layers)}" if self.stage_layers is not None else ""
        return f"dp={self.dp} tp={self.tp} pp={self.pp}{extra}"
