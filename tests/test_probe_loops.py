"""Training loops under the probe: the two named loops, a user's own step, and how failures are reported."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from frenzy_core.errors import ConfigError, MeasurementError

torch = pytest.importorskip("torch")

from frenzy_core.memory.probe import (  # noqa: E402
    CUDA_BLOCK_BYTES,
    Phase,
    ProbeResult,
    StepContext,
    TrainingLoop,
    measure_training_step,
)

_IN, _OUT, _BATCH = 256, 1024, 4
_LOGITS_BYTES = _BATCH * _OUT * 4  # fp32, a multiple of the 512-byte block


class _Head(torch.nn.Module):
    """A linear 'language-model head' returning its logits and a loss, as Hugging Face models do."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(_IN, _OUT, bias=False)

    def forward(self, x: torch.Tensor) -> SimpleNamespace:
        logits = self.proj(x)
        return SimpleNamespace(logits=logits, loss=logits.pow(2).sum())


def _measure(loop: Any, **kwargs: Any) -> ProbeResult:
    return measure_training_step(
        _Head, lambda: (torch.randn(_BATCH, _IN),), optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1),
        loop=loop, **kwargs,
    )


def test_the_plain_loop_keeps_the_output_through_the_optimizer_step() -> None:
    framework, plain = _measure("framework"), _measure("plain")
    last_optimizer = [p for p in plain.phases if p.phase == "optimizer"][-1]
    same_in_framework = [p for p in framework.phases if p.phase == "optimizer"][-1]
    # The plain loop's `out` (its logits and its scalar loss, one 512-byte block) is still bound when the optimizer
    # steps; the framework loop freed it.
    assert last_optimizer.end_bytes - same_in_framework.end_bytes == _LOGITS_BYTES + CUDA_BLOCK_BYTES
    assert plain.peak_bytes >= framework.peak_bytes
    assert (plain.loop, framework.loop) == ("plain", "framework")


def test_the_plain_loop_frees_the_old_output_only_when_the_next_forward_returns() -> None:
    plain, framework = _measure("plain"), _measure("framework")
    second_forward = [p for p in plain.phases if (p.step, p.phase) == (1, "forward")][0]
    same_in_framework = [p for p in framework.phases if (p.step, p.phase) == (1, "forward")][0]
    # During step 1's forward, step 0's output (logits and loss) is still alive beside the new one.
    assert second_forward.peak_bytes - same_in_framework.peak_bytes == _LOGITS_BYTES + CUDA_BLOCK_BYTES


def test_loop_names_map_to_keep_outputs() -> None:
    assert TrainingLoop.from_keep_outputs(True) is TrainingLoop.PLAIN
    assert TrainingLoop.from_keep_outputs(False) is TrainingLoop.FRAMEWORK
    assert [loop.keep_outputs for loop in TrainingLoop] == [False, True]


def test_a_users_step_runs_with_marked_phases_and_persistent_state() -> None:
    seen: list[tuple[int, int, bool]] = []

    def my_step(model: Any, batch: Any, optimizer: Any, ctx: StepContext) -> None:
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1
        seen.append((ctx.step, ctx.microbatch, ctx.last_microbatch))
        with ctx.autocast():
            loss = ctx.loss(model(*batch))
        ctx.mark(Phase.BACKWARD)
        loss.backward()
        if ctx.last_microbatch:
            ctx.mark(Phase.OPTIMIZER)
            optimizer.step()
            optimizer.zero_grad()

    result = _measure(my_step, microbatches=2)
    assert seen == [(0, 0, False), (0, 1, True), (1, 0, False), (1, 1, True)]
    phases = [(p.step, p.microbatch, p.phase.value) for p in result.phases]
    assert phases[:5] == [(0, 0, "forward"), (0, 0, "backward"), (0, 1, "forward"), (0, 1, "backward"),
                          (0, 0, "optimizer")]
    assert result.loop == "my_step"


def test_a_step_that_raises_names_the_case_and_where() -> None:
    def broken(model: Any, batch: Any, optimizer: Any, ctx: StepContext) -> None:
        ctx.mark(Phase.BACKWARD)
        raise ValueError("no loss here")

    with pytest.raises(MeasurementError) as info:
        _measure(broken, label="tiny head, fp32")
    message = str(info.value)
    assert "tiny head, fp32" in message and "step 0, micro-batch 0, backward" in message and "ValueError" in message
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("loop", ["keep", 3])
def test_unknown_loops_are_config_errors(loop: Any) -> None:
    with pytest.raises(ConfigError) as info:
        _measure(loop)
    assert info.value.field == "loop"


def test_attribution_lists_the_tensors_alive_at_the_peak() -> None:
    result = _measure("plain", attribute_peak=True)
    assert sum(g.bytes for g in result.peak_tensors) == result.peak_bytes
    made = {(g.category, g.module, g.op, g.made_in): g for g in result.peak_tensors}
    logits = made[("Activation", "_Head.proj", "aten.mm.default", "forward step 0")]
    assert (logits.shape, logits.dtype, logits.count, logits.bytes) == ((_BATCH, _OUT), "float32", 1, _LOGITS_BYTES)
    weight_grad = made[("Temp", "_Head.proj", "aten.mm.default", "backward step 0")]  # the peak: it is written
    assert weight_grad.shape == (_OUT, _IN)
