"""``Cluster``: construction, validation, YAML round trips, presets and scaling."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core.errors import ConfigError, UnknownNameError
from frenzy_core.hardware import Cluster, LinkKind, load_gpu_specs, scale_counts
from frenzy_core.hardware.cluster import cluster_preset_info

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

MIXED = {"nodes": [
    {"gpu": "H100", "gpus_per_node": 8, "count": 16, "free_gpus": 6},
    {"gpu": "A10", "gpus_per_node": 4, "count": 3, "inter_node_bytes_per_s": 3.125e9, "rack": "r1", "zone": "z1"},
    {"gpu": "v100-32gb", "gpus_per_node": 8},
]}


def test_from_dict_resolves_names_counts_and_defaults() -> None:
    cluster = Cluster.from_dict(MIXED)
    h100, a10, v100 = cluster.nodes
    assert (h100.gpu, a10.gpu, v100.gpu) == ("h100-sxm", "a10", "v100-32gb")
    assert cluster.total_gpus == 16 * 8 + 3 * 4 + 8 == 148
    assert cluster.free_gpus == 16 * 6 + 3 * 4 + 8 == 116
    assert cluster.num_nodes == 20
    assert cluster.gpu_types == ["h100-sxm", "a10", "v100-32gb"]
    assert h100.intra_node_link is LinkKind.NVLINK4 and h100.intra_node_bytes_per_s == 450e9
    assert h100.link_domain_gpus == 8 and a10.link_domain_gpus == 1
    assert a10.inter_node_bytes_per_s == 3.125e9, "a per-node value wins over the type's"
    assert v100.count == 1 and v100.free_gpus == 8
    assert cluster.gpu_spec("h100-sxm").memory_bytes == 81559 * 2**20


def test_dict_and_yaml_round_trips(tmp_path: Path) -> None:
    cluster = Cluster.from_dict({**MIXED, "name": "mixed"})
    assert Cluster.from_dict(cluster.to_dict()) == cluster
    text = yaml.safe_dump(cluster.to_dict())
    assert Cluster.from_yaml(text) == cluster
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    assert Cluster.from_yaml(path) == cluster
    assert Cluster.from_yaml(str(path)) == cluster


def test_from_yaml_accepts_preset_style_files_with_metadata() -> None:
    text = "description: two boxes\nsource: me\nnodes:\n  - {gpu: l4, gpus_per_node: 8, count: 2}\n"
    assert Cluster.from_yaml(text).total_gpus == 16


def test_link_domain_is_capped_by_node_size() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "h100", "gpus_per_node": 4}]})
    assert cluster.nodes[0].link_domain_gpus == 4


@pytest.mark.parametrize(("node", "field"), [
    ({"gpu": "a100", "gpus_per_node": 8, "free_gpus": 9}, "free_gpus"),
    ({"gpu": "a100", "gpus_per_node": 8, "free_gpus": -1}, "free_gpus"),
    ({"gpu": "a100", "gpus_per_node": 0}, "gpus_per_node"),
    ({"gpu": "a100", "gpus_per_node": 8, "count": 0}, "count"),
    ({"gpu": "a100", "gpus_per_node": 8, "link_domain_gpus": 16}, "link_domain_gpus"),
    ({"gpu": "a100", "gpus_per_node": 8, "colour": "red"}, "colour"),
])
def test_errors_name_node_index_and_field(node: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        Cluster.from_dict({"nodes": [{"gpu": "t4", "gpus_per_node": 4}, node]})
    assert "nodes.1" in str(info.value) and field in str(info.value)


def test_free_gpus_bounds_are_inclusive() -> None:
    cluster = Cluster.from_dict({"nodes": [{"gpu": "t4", "gpus_per_node": 4, "free_gpus": 0},
                                           {"gpu": "t4", "gpus_per_node": 4, "free_gpus": 4}]})
    assert cluster.free_gpus == 4


def test_unknown_gpu_suggests_names() -> None:
    with pytest.raises(ConfigError) as info:
        Cluster.from_dict({"nodes": [{"gpu": "h100-sxn", "gpus_per_node": 8}]})
    assert "nodes.0" in str(info.value) and "h100-sxm" in str(info.value)


@pytest.mark.parametrize("data", [{"nodes": []}, {}, {"name": "x"}])
def test_empty_cluster_is_a_config_error(data: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="at least one node"):
        Cluster.from_dict(data)


def test_cluster_is_frozen() -> None:
    cluster = Cluster.from_dict(MIXED)
    with pytest.raises(ConfigError, match="Cluster is frozen: name cannot be assigned"):
        cluster.name = "x"  # type: ignore[misc]


def test_custom_gpu_types_from_extra_files(tmp_path: Path) -> None:
    data = load_gpu_specs()["l4"].model_dump(mode="json")
    data.update(id="lab-card", name="Lab card", aliases=["LabCard 9000"])
    (tmp_path / "lab-card.yaml").write_text(yaml.safe_dump(data))
    specs = load_gpu_specs(extra_dirs=[tmp_path])
    cluster = Cluster.from_dict({"nodes": [{"gpu": "LabCard 9000", "gpus_per_node": 2, "count": 3}]}, specs=specs)
    assert cluster.nodes[0].gpu == "lab-card" and cluster.gpu_spec("lab-card").name == "Lab card"
    assert cluster.scaled(2).gpu_spec("lab-card").name == "Lab card"
    with pytest.raises(ConfigError, match="lab"):
        Cluster.from_dict({"nodes": [{"gpu": "lab-card", "gpus_per_node": 2}]})


# ---------------------------------------------------------------------------------------------- presets


def test_preset_names_and_sources() -> None:
    assert Cluster.presets() == ["alibaba-openb-2023", "alibaba-spot-2026", "aws-mixed", "default", "frenzy-paper",
                                 "philly-like"]
    for name in Cluster.presets():
        info = cluster_preset_info(name)
        assert info.source and info.description and info.cluster.total_gpus > 0


def test_default_is_frenzy_paper() -> None:
    default = Cluster.preset("default")
    assert default == Cluster.preset("frenzy-paper")
    assert default.total_gpus == 96 and default.num_nodes == 12
    assert Counter(n.gpu for n in default.nodes for _ in range(n.count)) == {
        "a100-80gb": 4, "rtx-3090": 4, "v100-32gb": 4}
    assert all(n.gpus_per_node == 8 for n in default.nodes)


def test_philly_and_aws_shapes() -> None:
    philly = Cluster.preset("philly-like")
    assert philly.total_gpus == 2490 and philly.num_nodes == 552
    aws = Cluster.preset("aws-mixed")
    p4d = next(n for n in aws.nodes if n.gpu == "a100-40gb")
    assert p4d.inter_node_bytes_per_s == 400e9 / 8 / 8, "p4d: 400 Gb/s EFA per 8 GPUs"


def _csv_shapes(name: str, model_col: str, count_col: str) -> Counter[tuple[str, int]]:
    path = SHARED / "clusters" / name
    if not path.is_file():
        pytest.skip(f"{path} not present (reference data lives beside the project)")
    with path.open() as fh:
        return Counter((row[model_col], int(row[count_col])) for row in csv.DictReader(fh))


@pytest.mark.parametrize(("preset", "csv_name", "model_col", "count_col", "mapping"), [
    ("alibaba-spot-2026", "alibaba_spot_2026_gpu_nodes.csv", "gpu_model", "gpu_capacity_num",
     {"A10": "a10", "A100-SXM4-80GB": "a100-80gb", "H800": "h800", "A800-SXM4-80GB": "a800-80gb"}),
    ("alibaba-openb-2023", "alibaba_openb_2023_gpu_nodes.csv", "model", "gpu",
     {"T4": "t4", "P100": "p100-16gb", "V100M16": "v100-16gb", "V100M32": "v100-32gb", "A10": "a10"}),
])
def test_alibaba_presets_match_the_trace(preset: str, csv_name: str, model_col: str, count_col: str,
                                         mapping: dict[str, str]) -> None:
    expected = Counter({(mapping[m], g): c for (m, g), c in _csv_shapes(csv_name, model_col, count_col).items()
                        if m in mapping})
    got = Counter({(n.gpu, n.gpus_per_node): n.count for n in Cluster.preset(preset).nodes})
    assert got == expected


def test_unknown_preset_suggests() -> None:
    with pytest.raises(UnknownNameError) as info:
        Cluster.preset("frenzy-papr")
    assert "frenzy-paper" in info.value.suggestions


# ---------------------------------------------------------------------------------------------- scaling


@pytest.mark.parametrize(("scale", "per_type_nodes", "total"), [
    (48, 2, 48), (24, 1, 24), (100, 4, 96), (192, 8, 192), (8, 1, 24),  # 8: one node per type is kept
])
def test_scale_frenzy_paper(scale: int, per_type_nodes: int, total: int) -> None:
    cluster = Cluster.preset("frenzy-paper", scale=scale)
    assert [n.count for n in cluster.nodes] == [per_type_nodes] * 3
    assert cluster.total_gpus == total


def test_scale_is_largest_remainder_by_hand() -> None:
    # 7,878 GPUs to 1,000: exact node shares a10 316.58, a100 54.84, h800 27.80, a800 2.79 -> floors use 980
    # GPUs; the 20 left go by largest remainder: a100 (+8), h800 (+8), a800 does not fit (8 > 4), a10 (+1).
    cluster = Cluster.preset("alibaba-spot-2026", scale=1000)
    assert {n.gpu: n.count for n in cluster.nodes} == {"a10": 317, "a100-80gb": 55, "h800": 28, "a800-80gb": 2}
    assert cluster.total_gpus == 997
    assert Cluster.preset("alibaba-spot-2026", scale=1000) == cluster, "deterministic"


def test_scale_rejects_non_positive() -> None:
    with pytest.raises(ConfigError, match="scale"):
        Cluster.preset("default", scale=0)


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(1, 50), min_size=1, max_size=6),
       sizes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=6, max_size=6),
       types=st.lists(st.sampled_from("abc"), min_size=6, max_size=6),
       target=st.integers(1, 2000))
def test_scale_counts_laws(counts: list[int], sizes: list[int], types: list[str], target: int) -> None:
    n = len(counts)
    sizes, types = sizes[:n], types[:n]
    new = scale_counts(counts, sizes, types, target)
    total = sum(c * g for c, g in zip(new, sizes))
    for gpu in set(types):
        assert sum(c for c, t in zip(new, types) if t == gpu) >= 1
    floor_only = [int(c * target / sum(c * g for c, g in zip(counts, sizes))) for c in counts]
    assert all(c >= f for c, f in zip(new, floor_only))
    # Over the target only by the one node per type that had none.
    assert total <= target + sum(max(g for g, t in zip(sizes, types) if t == gpu) for gpu in set(types))
    if all(sum(f for f, t in zip(floor_only, types) if t == gpu) >= 1 for gpu in set(types)):
        assert total <= target
    assert scale_counts(counts, sizes, types, target) == new


def test_from_yaml_reads_a_path_without_yaml_suffix(tmp_path: Path) -> None:
    path = tmp_path / "cluster.txt"
    path.write_text("nodes: [{gpu: t4, gpus_per_node: 4, count: 2}]")
    assert Cluster.from_yaml(str(path)).total_gpus == 8
    assert Cluster.from_yaml("nodes: [{gpu: t4, gpus_per_node: 4}]").total_gpus == 4
