"""Compare the memory estimator with 42 Megatron-LM functional tests measured on 8 x H100.

Reads ``../shared/reference/megatron_measured_memory.json`` (beside the project root; not shipped).
Each test's ``mem_max_allocated_bytes`` is ``torch.cuda.max_memory_allocated`` on the last rank (the last
pipeline stage), the maximum over its logged steps; it is compared with
``estimate_memory(...).stages[-1].peak_bytes``.

Run: ``python benchmarks/megatron_reference.py [path/to/megatron_measured_memory.json]``.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frenzy_core.config.megatron import MegatronJob, parse_megatron_args
from frenzy_core.errors import ConfigError

REFERENCE = (
    Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "megatron_measured_memory.json"
)
WORLD_SIZE = 8  # the reference tests ran on one node of 8 x H100
TOLERANCE = 0.10
"""Acceptance: median absolute relative error over the supported cases at most 10%."""
MISSING_FLAGS = {
    # NVIDIA/Megatron-LM@d98e8a64dd tests/functional_tests/test_cases/<test>/model_config.yaml: the tests ran with
    # flags the reference's model_args leave out; estimating the command line without them is estimating another run.
    "moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading":
        "--fine-grained-activation-offloading --offload-modules [expert_fc1 moe_act attn_norm mlp_norm qkv_linear "
        "core_attn attn_proj]",
    "moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_offloading":
        "--fine-grained-activation-offloading --offload-modules [expert_fc1 moe_act attn_norm mlp_norm qkv_linear "
        "core_attn attn_proj]",
}
"""Reference rows whose command line lacks memory flags the measured run used: never counted as supported."""


@dataclass(frozen=True)
class CaseResult:
    """One reference test: measured and estimated peak bytes on the last pipeline stage."""

    test: str
    measured_bytes: int
    estimated_bytes: int | None
    """None when no estimate could be made (the command line cannot be expressed at all)."""
    supported: bool
    """Parsed with ``strict=True``: every memory-relevant flag is modelled."""
    note: str
    """Why a case is unsupported (the first refused flag), or ''."""
    breakdown: dict[str, int]

    @property
    def error(self) -> float | None:
        """Signed relative error (estimate / measurement - 1)."""
        if self.estimated_bytes is None:
            return None
        return self.estimated_bytes / self.measured_bytes - 1.0


def load_reference(path: Path = REFERENCE) -> list[dict[str, Any]]:
    """The reference tests: dicts with ``test``, ``model_args``, ``mem_max_allocated_bytes``, ..."""
    cases: list[dict[str, Any]] = json.loads(path.read_text())
    return cases


def _model_type(test: str) -> str:
    return "bert" if test.startswith("bert/") else "gpt"


def _job(case: dict[str, Any]) -> tuple[MegatronJob | None, bool, str]:
    """(job, supported, note): a strict parse, else a best-effort one that skips unsupported flags."""
    args, model_type = case["model_args"], _model_type(case["test"])
    missing = MISSING_FLAGS.get(case["test"])
    try:
        job = parse_megatron_args(args, WORLD_SIZE, model_type=model_type)  # type: ignore[arg-type]
    except ConfigError as exc:
        note = str(exc) + (f"; the run also used {missing}, absent from the reference" if missing else "")
    else:
        if missing is None:
            return job, True, ""
        return job, False, f"the reference omits {missing} (the test's model_config.yaml)"
    for world_size in (WORLD_SIZE, _model_parallel_size(args)):
        try:
            job = parse_megatron_args(args, world_size, model_type=model_type, strict=False)  # type: ignore[arg-type]
        except ConfigError:
            continue
        if world_size != WORLD_SIZE:
            note += f" [estimated with world_size={world_size}]"
        return job, False, note
    return None, False, note


def _model_parallel_size(args: dict[str, Any]) -> int:
    size = 1
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size"):
        size *= int(args.get(flag, 1))
    return size


def compare(path: Path = REFERENCE) -> list[CaseResult]:
    """Estimate every reference case; needs ``frenzy_core.memory.estimate_memory``."""
    from frenzy_core.memory import estimate_memory  # type: ignore[attr-defined]

    results = []
    for case in load_reference(path):
        job, supported, note = _job(case)
        estimated: int | None = None
        breakdown: dict[str, int] = {}
        if job is not None:
            try:
                stage = estimate_memory(job.model, job.training, job.parallel).stages[-1]
            except ConfigError as exc:
                supported, note = False, f"estimator refused: {exc}"
            else:
                estimated, breakdown = stage.peak_bytes, dict(stage.breakdown)
        results.append(
            CaseResult(
                test=case["test"],
                measured_bytes=int(case["mem_max_allocated_bytes"]),
                estimated_bytes=estimated,
                supported=supported,
                note=note,
                breakdown=breakdown,
            )
        )
    return results


def median_abs_error(results: list[CaseResult]) -> float:
    """Median absolute relative error over the supported cases."""
    errors = [abs(r.error) for r in results if r.supported and r.error is not None]
    if not errors:
        raise ValueError("no supported case has an estimate")
    return statistics.median(errors)


def format_table(results: list[CaseResult]) -> str:
    """A Markdown table of every case, then the median."""
    gib = 2**30
    lines = [
        "| test | measured GiB | estimated GiB | error | supported | note |",
        "|---|---:|---:|---:|:-:|---|",
    ]
    for r in results:
        est = f"{r.estimated_bytes / gib:.3f}" if r.estimated_bytes is not None else "-"
        err = f"{r.error:+.1%}" if r.error is not None else "-"
        note = r.note.split(";")[0][:110].replace("|", "/")
        lines.append(
            f"| {r.test} | {r.measured_bytes / gib:.3f} | {est} | {err} | {'yes' if r.supported else 'no'} "
            f"| {note} |"
        )
    supported = [r for r in results if r.supported and r.error is not None]
    within = sum(abs(r.error) <= TOLERANCE for r in supported if r.error is not None)
    lines.append("")
    lines.append(
        f"supported cases: {len(supported)} of {len(results)}; within {TOLERANCE:.0%}: {within}; "
        f"median |error| over supported: {median_abs_error(results):.1%}"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else REFERENCE
    if not path.exists():
        print(f"reference data not found at {path}", file=sys.stderr)
        return 2
    results = compare(path)
    print(format_table(results))
    return 0 if median_abs_error(results) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
