"""Offload's time terms per framework and recipe (timing/offload.py): whose host optimizer steps, which copies
cross the host link, and what of them hides (a stream of per-layer copies hides as the data-parallel traffic
does, its first or last piece exposed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError, TrainingConfig, get_gpu_spec
from frenzy_core.timing.offload import host_link_bytes_per_s, host_step_rate, offload_rates, offload_terms

GPU = get_gpu_spec("a100-80gb")
LINK = host_link_bytes_per_s(GPU)
RATES = offload_rates()
OPT = {"offload_optimizer": "cpu"}
FULL = {"offload_optimizer": "cpu", "offload_params": "cpu", "zero_stage": 3}


def _terms(training: TrainingConfig, *, stepped: float = 1e9, held: float = 1e9, zero: int = 0, layers: int = 8,
           ranks: int = 1, m: int = 1, fwd: float = 1e3, bwd: float = 1e3) -> tuple[float, float, float]:
    """(host step, copies, hidden) of one layout, in seconds (the windows long enough to hide any copy unless
    given)."""
    a = np.array
    t = offload_terms(training, host_link_bytes_per_s(GPU), stepped=a([stepped]), held=a([held]), zero_stage=a([zero]),
                      layers=a([float(layers)]), ranks_per_node=a([float(ranks)]), m=a([float(m)]),
                      fwd_window=a([fwd]), bwd_window=a([bwd]))
    return float(t.host_step_s[0]), float(t.transfer_s[0]), float(t.hidden_s[0])


def test_each_framework_steps_with_its_own_host_optimizer() -> None:
    """Megatron: torch's fused CPU AdamW (HybridDeviceOptimizer); torch offloading the optimizer alone:
    DeepSpeed's CPU-Adam (ZeRO-Offload); the parameters too: FSDP CPUOffload's torch AdamW, fused only where
    asked (torch's CPU default is the for-loop)."""
    assert host_step_rate(TrainingConfig(framework="megatron", **OPT)) == RATES.torch_fused_cpu_adamw_params_per_s
    assert host_step_rate(TrainingConfig(zero_stage=2, **OPT)) == RATES.deepspeed_cpu_adam_params_per_s
    assert host_step_rate(TrainingConfig(**FULL)) == RATES.torch_cpu_adamw_params_per_s
    fused = TrainingConfig(optimizer_impl="fused", **FULL)
    assert host_step_rate(fused) == RATES.torch_fused_cpu_adamw_params_per_s
    # memory-bound CPU steps: the hand-vectorised CPU-Adam ahead of torch's fused kernel, both ahead of the loop
    assert (RATES.deepspeed_cpu_adam_params_per_s > RATES.torch_fused_cpu_adamw_params_per_s
            > RATES.torch_cpu_adamw_params_per_s)


def test_a_nodes_ranks_share_its_host_step() -> None:
    t = TrainingConfig(zero_stage=1, **OPT)
    assert _terms(t, ranks=8)[0] == pytest.approx(8 * 1e9 / RATES.deepspeed_cpu_adam_params_per_s)


def test_megatron_pipelines_its_copies_with_the_host_step_layer_by_layer() -> None:
    """bf16-mixed: fp32 main gradients out, bf16 weights back, once per step; the step (torch's fused AdamW) is
    the longest stream, each copy hides behind it but its own first or last layer's piece."""
    t = TrainingConfig(framework="megatron", **OPT)
    step, copies, hidden = _terms(t, layers=8)
    d2h, h2d = 4 * 1e9 / LINK, 2 * 1e9 / LINK
    assert step == pytest.approx(1e9 / RATES.torch_fused_cpu_adamw_params_per_s)
    assert step > d2h > h2d  # else this case would not test the step as the longest
    assert copies == pytest.approx(d2h + h2d)
    assert hidden == pytest.approx((d2h + h2d) * 7 / 8)
    # no compute hides them: the windows do not matter
    assert _terms(t, layers=8, fwd=0.0, bwd=0.0)[2] == hidden


def test_megatron_copies_longer_than_the_step_hide_it_instead() -> None:
    """On a PCIe 3 link (V100) the fp32 gradients' stream outlasts the fused host step: the step and the weights
    hide behind it, each but its own first or last layer's piece."""
    gpu = get_gpu_spec("v100-32gb")
    link = host_link_bytes_per_s(gpu)
    a = np.array
    t = offload_terms(TrainingConfig(framework="megatron", **OPT), link, stepped=a([1e9]), held=a([1e9]),
                      zero_stage=a([0]), layers=a([4.0]), ranks_per_node=a([1.0]), m=a([1.0]), fwd_window=a([0.0]),
                      bwd_window=a([0.0]))
    step, d2h, h2d = 1e9 / RATES.torch_fused_cpu_adamw_params_per_s, 4 * 1e9 / link, 2 * 1e9 / link
    assert d2h > step > h2d
    exposed = float(t.host_step_s[0] + t.transfer_s[0] - t.hidden_s[0])
    assert exposed == pytest.approx(d2h + step / 4 + h2d / 4)


def test_deepspeed_zero_2_hides_each_micro_batchs_gradient_shard_but_the_last_layers() -> None:
    """ZeRO-Offload at stage 2: the half gradient shard crosses every micro-batch behind its backward (all but the
    last layer's piece); the updated half weights return once, behind the host step but their last tile."""
    t = TrainingConfig(zero_stage=2, **OPT)
    step, copies, hidden = _terms(t, zero=2, m=4, layers=8)
    grads = back = 2 * 1e9 / LINK
    assert copies == pytest.approx(4 * grads + back)
    assert step > back
    assert hidden == pytest.approx(4 * grads * 7 / 8 + back * 7 / 8)
    # a backward shorter than the stream hides only its length
    short = grads / 2
    assert _terms(t, zero=2, m=4, layers=8, bwd=short)[2] == pytest.approx(4 * short + back * 7 / 8)


def test_deepspeed_below_zero_2_sends_the_accumulated_shard_once_exposed() -> None:
    t = TrainingConfig(zero_stage=1, **OPT)
    _, copies, hidden = _terms(t, zero=1, m=4, layers=8)
    grads = back = 2 * 1e9 / LINK
    assert copies == pytest.approx(grads + back)
    assert hidden == pytest.approx(back * 7 / 8)


def test_offloaded_parameters_cross_twice_per_micro_batch_behind_each_pass() -> None:
    """FSDP CPUOffload / ZeRO-Infinity: the weights in for the forward and again for the backward, prefetched
    layer by layer (the first layer's piece of each pass exposed); no weights return after the step (they live on
    the host)."""
    t = TrainingConfig(**FULL)
    step, copies, hidden = _terms(t, zero=3, m=2, layers=8, held=5e8)
    grads, weights = 2 * 1e9 / LINK, 2 * 5e8 / LINK
    assert step == pytest.approx(1e9 / RATES.torch_cpu_adamw_params_per_s)
    assert copies == pytest.approx(2 * grads + 2 * 2 * weights)
    assert hidden == pytest.approx(2 * grads * 7 / 8 + 2 * 2 * weights * 7 / 8)


def test_activation_offload_alone_costs_no_optimizer_or_copy_time() -> None:
    """Its memory is modelled, its copies are not (docs/time-model.md, "Offload"): no term."""
    assert _terms(TrainingConfig(activation_offload_layers=2)) == (0.0, 0.0, 0.0)
    assert _terms(TrainingConfig(framework="megatron", activation_offload_layers=2)) == (0.0, 0.0, 0.0)


def test_parameters_offloaded_without_the_optimizer_are_refused() -> None:
    """No torch runtime runs it (DeepSpeed's offload_param needs offload_optimizer; FSDP's CPUOffload steps the
    optimizer on the host), so it is neither estimated nor timed."""
    with pytest.raises(ConfigError, match="offload_params='cpu' with offload_optimizer='none'") as err:
        TrainingConfig(offload_params="cpu", zero_stage=3)
    assert "offload_optimizer='cpu'" in str(err.value)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(framework=st.sampled_from(["torch", "megatron"]), params_too=st.booleans(), zero=st.integers(0, 3),
       layers=st.integers(1, 64), m=st.integers(1, 16), ranks=st.integers(1, 8),
       windows=st.tuples(st.floats(0.0, 10.0), st.floats(0.0, 10.0)), stepped=st.floats(1e6, 1e11))
def test_hidden_copies_are_never_negative_nor_more_than_the_copies(framework: str, params_too: bool, zero: int,
                                                                   layers: int, m: int, ranks: int,
                                                                   windows: tuple[float, float],
                                                                   stepped: float) -> None:
    """Law: what hides is between nothing and all of the copies, and a finer stream (more layers) hides no
    less."""
    full = params_too and framework == "torch"
    t = TrainingConfig(framework=framework, zero_stage=3 if full else (0 if framework == "megatron" else zero),
                       offload_optimizer="cpu", offload_params="cpu" if full else "none")
    kw = {"stepped": stepped, "held": stepped, "zero": t.zero_stage, "m": m, "ranks": ranks, "fwd": windows[0],
          "bwd": windows[1]}
    _, copies, hidden = _terms(t, layers=layers, **kw)
    assert 0.0 <= hidden <= copies * (1 + 1e-12)
    assert _terms(t, layers=layers + 1, **kw)[2] >= hidden * (1 - 1e-12)
