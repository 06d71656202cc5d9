"""benchmarks/gpu_memory_check.py: its arguments, and what it does where no CUDA device exists."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from project_scripts import BENCHMARKS, load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _script() -> ModuleType:
    return load_script(BENCHMARKS / "gpu_memory_check.py")


def test_every_gpu_case_is_a_grid_case_and_there_are_at_least_ten() -> None:
    check = _script()
    assert len(check.GPU_CASES) >= 10
    assert [c.key for c in check.selected_cases(check.parse_args([]))] == list(check.GPU_CASES)


def test_cases_and_only_select_in_order() -> None:
    check = _script()
    assert [c.key for c in check.selected_cases(check.parse_args(["--cases", "3"]))] == list(check.GPU_CASES[:3])
    llama = check.selected_cases(check.parse_args(["--only", "llama-3.1-8b"]))
    assert llama and all(c.model == "llama-3.1-8b" for c in llama)


@pytest.mark.parametrize("argv", [["--cases", "0"], ["--cases", "x"], ["--unknown"]])
def test_bad_arguments_stop_with_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _script().parse_args(argv)
    assert info.value.code == 2


def test_without_cuda_it_says_so_and_stops(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _script().main([]) == 2
    out = capsys.readouterr().out
    assert "No CUDA device found" in out and "--cpu-probe-only" in out


def test_cpu_probe_only_writes_the_table_without_a_gpu_column(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    output = tmp_path / "table.md"
    case = "gpt2 L2 fp32 eager s1024 b8 framework"
    assert _script().main(["--cpu-probe-only", "--only", case, "--output", str(output)]) == 0
    assert "No CUDA device found" in capsys.readouterr().out
    text = output.read_text(encoding="utf-8")
    assert text.startswith("GPU: none (CPU probe only)")
    (line,) = [line for line in text.splitlines() if line.startswith(f"| {case} |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "-" and cells[3] == "-" and cells[5] == "-"  # no GPU measurement, no error against it
    assert float(cells[2]) > 0 and float(cells[4]) > 0  # the estimate and the probe ran
