"""LoRA as PEFT runs it: the estimator against the fake-tensor probe running ``peft.get_peft_model`` on the real
Transformers classes (PEFT's own ``lora.Linear`` forward and backward, its fp32 adapters and input casts).

The model is built on the meta device and wrapped there (:func:`frenzy_core.memory.probe.built_on_meta`), since
PEFT moves its adapters with ``.to()``, which fake parameters refuse. Skips without ``peft`` (not a dependency:
``pip install peft``); every case is slow (seconds each), so none runs in CI; ``tests/test_probe_finetune.py``
keeps a fast case of PEFT's forward written out in plain torch.

Acceptance (issue 10): mean |error| at most 3 %, no estimate more than 3 % under the measured peak.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import pytest

from frenzy_core.config import ParallelConfig, TrainingConfig
from frenzy_core.config.finetune import LoRAConfig, LoRATarget

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft", reason="peft is not installed (pip install peft): the PEFT cases need it")

from test_probe_accuracy import GRID_MODELS  # noqa: E402 (after the skips)
from test_probe_finetune import _HF_NAMES  # noqa: E402

MEAN_ABS_ERROR_MAX = 0.03
UNDER_ESTIMATE_MAX = 0.03

_TARGETS = {"attention": (LoRATarget.Q, LoRATarget.K, LoRATarget.V, LoRATarget.O), "all-linear": tuple(LoRATarget)}
PEFT_CASES: list[tuple[str, str, TrainingConfig]] = [
    (arch, f"{precision}/dropout-{dropout}/{targets}",
     TrainingConfig(seq_len=256, micro_batch_size=2, precision=precision, attention="sdpa",
                    lora=LoRAConfig(rank=16, target_modules=_TARGETS[targets], dropout=dropout)))
    for arch, precision, dropout, targets in itertools.product(
        ("llama", "mistral", "qwen2"), ("bf16", "amp-bf16"), (0.0, 0.05), _TARGETS)
]
"""3 families x bf16 base (fp32 adapters, input casts) or amp-bf16 (fp32 base) x LoRA dropout x targets."""
PEFT_LAYERS = 6
"""Layers of each model: enough that the layers' saved tensors, not the logits, hold most of the peak."""


def _peft_config(lora: LoRAConfig) -> Any:
    """PEFT's LoraConfig for ``lora`` (Llama-lineage module names), PEFT's defaults otherwise."""
    return peft.LoraConfig(r=lora.rank, target_modules=[_HF_NAMES[t] for t in lora.target_modules],
                           rank_pattern={_HF_NAMES[t]: r for t, r in lora.module_ranks.items()},
                           lora_dropout=lora.dropout)


@functools.cache
def relative_error(index: int) -> float:
    """(estimated tensor bytes - measured) / measured for ``PEFT_CASES[index]``."""
    from frenzy_core.memory import estimate_memory
    from frenzy_core.memory.hf_models import hf_training_setup
    from frenzy_core.memory.probe import built_on_meta, measure_training_step

    arch, _, training = PEFT_CASES[index]
    assert training.lora is not None
    model = GRID_MODELS[arch].replace(num_layers=PEFT_LAYERS)
    setup = hf_training_setup(model, training)
    config = _peft_config(training.lora)

    def trainable_params(params: Any) -> Any:
        return setup.optimizer_factory([p for p in params if p.requires_grad])

    with setup.runtime():
        measured = measure_training_step(
            built_on_meta(lambda: peft.get_peft_model(setup.module_factory(), config)), setup.batch_factory,
            optimizer_factory=trainable_params, loss_fn=setup.loss_fn,
            backbone=f"base_model.model.{setup.backbone}", autocast_dtype=setup.autocast_dtype,
            label=setup.label).peak_bytes
    estimate = estimate_memory(model, training, ParallelConfig())
    return (estimate.peak_bytes - estimate.breakdown.get("workspaces", 0) - measured) / measured


def _id(case: tuple[str, str, TrainingConfig]) -> str:
    return f"{case[0]}/{case[1]}"


@pytest.mark.slow
@pytest.mark.parametrize("index", [pytest.param(i, id=_id(c)) for i, c in enumerate(PEFT_CASES)])
def test_peft_estimate_is_not_under_the_probe(index: int) -> None:
    err = relative_error(index)
    assert err >= -UNDER_ESTIMATE_MAX, f"estimate {err:+.2%} below the measured peak"


@pytest.mark.slow
def test_peft_mean_abs_error() -> None:
    errors = {_id(c): relative_error(i) for i, c in enumerate(PEFT_CASES)}
    mean_abs = sum(abs(e) for e in errors.values()) / len(errors)
    assert mean_abs <= MEAN_ABS_ERROR_MAX, {k: f"{v:+.2%}" for k, v in errors.items()}
