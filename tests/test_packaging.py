"""The wheel carries its data: presets, GPU specs and clusters load from a non-editable install."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_CHECK = """
import sys
sys.path = [p for p in sys.path if not p.rstrip('/').endswith('src')]
sys.path.insert(0, {unpacked!r})
import frenzy_core as f
assert f.__file__.startswith({unpacked!r}), f.__file__
assert len(f.ModelConfig.presets()) >= 25
assert len(f.load_gpu_specs()) >= 19
assert f.Cluster.preset('frenzy-paper').total_gpus == 96
plan = f.plan_job(f.ModelConfig.preset('gpt2'), f.Cluster.preset('frenzy-paper'),
                  f.TrainingConfig(seq_len=1024, global_batch_size=64), time_limit_s=5)
print('ok', plan.gpu_type)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    if done.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{done.stdout}\n{done.stderr}")
    (path,) = out.glob("frenzy_core-*.whl")
    return path


def test_wheel_contains_every_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    data_dir = ROOT / "src" / "frenzy_core" / "data"
    expected = {"frenzy_core/" + str(p.relative_to(ROOT / "src" / "frenzy_core")) for p in data_dir.rglob("*.yaml")}
    assert expected, "no data files found in the source tree"
    assert expected <= names, sorted(expected - names)
    assert "frenzy_core/py.typed" in names


def test_installed_wheel_loads_its_data_and_plans(wheel: Path, tmp_path: Path) -> None:
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    done = subprocess.run([sys.executable, "-c", _CHECK.format(unpacked=str(unpacked))], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok a100-80gb")
