"""``ParallelConfig``: how a job is split over GPUs (data, tensor, pipeline, context, expert)."""

from __future__ import annotations

from pydantic import Field, model_validator

from frenzy_core._base import CodedEnum, FrozenModel

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
    """Degrees of parallelism; ``world_size`` = dp x tp x pp x cp (experts are split inside dp x cp)."""

    dp: int = Field(default=1, gt=0, description="Data-parallel replicas.")
    tp: int = Field(default=1, gt=0, description="Tensor-parallel ranks (one NVLink domain).")
    pp: int = Field(default=1, gt=0, description="Pipeline stages.")
    vpp: int = Field(default=1, gt=0, description="Virtual pipeline chunks per pipeline rank (interleaved).")
    cp: int = Field(default=1, gt=0, description="Context-parallel ranks (sequence split for attention).")
    ep: int = Field(default=1, gt=0, description="Expert-parallel ranks (taken from dp x cp).")
    schedule: PipelineSchedule = Field(default=PipelineSchedule.ONE_F_ONE_B, description="Pipeline schedule.")

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
        if (self.dp * self.cp) % self.ep != 0:
            raise ValueError(
                f"ep={self.ep} must divide dp x cp = {self.dp * self.cp}; expert-parallel ranks are taken "
                "from the data- and context-parallel ranks"
            )
        return self

    @property
    def world_size(self) -> int:
        """GPUs the job uses."""
        return self.dp * self.tp * self.pp * self.cp

    def describe(self) -> str:
        """The degrees in words: ``dp=8 tp=2 pp=1``, plus vpp, cp and ep where above 1."""
        extra = "".join(f" {k}={v}" for k, v in (("vpp", self.vpp), ("cp", self.cp), ("ep", self.ep)) if v > 1)
        return f"dp={self.dp} tp={self.tp} pp={self.pp}{extra}"
