"""Run Megatron-LM's own ``parse_args`` + ``validate_args`` on what the megatron adapter writes for plans.

Megatron-LM's training arguments are not on PyPI: point ``--megatron`` at a checkout (``git clone
https://github.com/NVIDIA/Megatron-LM``; nothing of it is copied here). It runs on a CPU machine with torch and
``pip install triton`` (Megatron-LM imports it at module level): the device query ``get_device_arch_version``
answers the plan's GPU (its compute capability's major, from data/megatron_flags.yaml), and WORLD_SIZE is the
plan's GPU count.
It adds the flags a launch needs that a plan does not decide (tokenizer, mock data, iterations); everything else
is the adapter's. Each plan prints ``ok`` or Megatron's assertion; the exit code is the number of failures.

    python benchmarks/check_megatron_args.py --megatron /path/to/Megatron-LM
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

CALLER_FLAGS = ["--tokenizer-type", "NullTokenizer", "--mock-data", "--train-iters", "10", "--lr", "1e-4"]
"""What a Megatron launch needs besides the plan (the adapter leaves tokenizer, data and schedule to the caller).
NullTokenizer adds one EOD token, so --vocab-size is lowered by one to keep the adapter's vocabulary."""


def _shim_python_311() -> None:
    """Megatron-LM (2026) imports typing.override, new in Python 3.12; on 3.11 a no-op decorator does."""
    import typing

    if not hasattr(typing, "override"):
        typing.override = lambda f: f  # type: ignore[attr-defined]


def check(plan_name: str, launch: dict[str, Any], arch: int) -> str:
    """Megatron's verdict on one command line: ``ok`` or the message of its failed assertion."""
    import megatron.training.arguments as arguments

    args = list(launch["args"])
    vocab = args.index("--vocab-size") + 1
    args[vocab] = str(int(args[vocab]) - 1)  # NullTokenizer's vocabulary is --vocab-size + 1 (its EOD token)
    saved_env = dict(os.environ)
    os.environ.update({"WORLD_SIZE": str(launch["world_size"]), "RANK": "0", "LOCAL_RANK": "0", **launch["env"]})
    if "CUDA_DEVICE_MAX_CONNECTIONS" not in launch["env"]:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    arguments.get_device_arch_version = lambda: arch
    sys.argv = [launch["script"], *args, *CALLER_FLAGS]
    try:
        arguments.validate_args(arguments.parse_args())
        return "ok"
    except (AssertionError, ValueError) as exc:
        return f"FAILED: {type(exc).__name__}: {exc}"
    except SystemExit as exc:
        return f"FAILED: argparse exit {exc.code}"
    finally:
        os.environ.clear()
        os.environ.update(saved_env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron", required=True, type=Path, help="a Megatron-LM checkout")
    options = parser.parse_args()
    sys.path.insert(0, str(options.megatron.resolve()))
    _shim_python_311()
    from adapter_plans import FIVE_PLANS
    from frenzy_core.adapters import ADAPTERS
    from frenzy_core.config.megatron.args import flag_table
    from frenzy_core.errors import ConfigError

    failures = 0
    for name, make in FIVE_PLANS.items():
        plan = make()
        try:
            launch = ADAPTERS["megatron"](plan)
        except ConfigError as exc:
            print(f"{name:14} refused by the adapter: {exc}")
            continue
        arch = int(flag_table().gpus[plan.gpu_type].compute_capability)
        verdict = check(name, launch, arch)
        failures += verdict != "ok"
        print(f"{name:14} {plan.num_gpus:3d} x {plan.gpu_type:10} {verdict}")
    return failures


if __name__ == "__main__":
    raise SystemExit(main())
