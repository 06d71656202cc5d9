"""Launcher adapters: a :class:`~frenzy_core.planning.Plan` written for torchrun, Megatron-LM, DeepSpeed,
Accelerate, Slurm, Kubernetes (Kubeflow PyTorchJob; a JobSet for plans spanning GPU types), Kubeflow Trainer v2,
Ray Train or SkyPilot.

Each adapter is a pure function of the plan and its options; ``emit(plan, launcher, **options)`` returns the
text the launcher reads. The core never imports this package. See docs/adapters.md.
"""

from frenzy_core.adapters.base import GROUP_ENV, RECIPE_ENV, STAGE_ENV, Adapter, AdapterOptions, OutputFormat
from frenzy_core.adapters.registry import ADAPTERS, LAUNCHERS, emit, get_adapter

__all__ = ["ADAPTERS", "GROUP_ENV", "LAUNCHERS", "RECIPE_ENV", "STAGE_ENV", "Adapter", "AdapterOptions", "OutputFormat",
           "emit", "get_adapter"]
