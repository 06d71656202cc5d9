"""Topology graph and planner summaries on a hand-built cluster with answers worked out by hand."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from frenzy_core.errors import UnknownNameError
from frenzy_core.hardware import Cluster, ClusterSummary, build_topology, free_gpus_per_node, link_domains

# node 0-1: 8 x H100 (6 free each); node 2-4: 4 x A10 (1 free each, rack r1 in zone z1);
# node 5: 4 x H100 (all free); node 6: 8 x V100 in two NVLink domains of 4, 5 free.
HAND = Cluster.from_dict({"nodes": [
    {"gpu": "h100-sxm", "gpus_per_node": 8, "count": 2, "free_gpus": 6},
    {"gpu": "a10", "gpus_per_node": 4, "count": 3, "free_gpus": 1, "rack": "r1", "zone": "z1"},
    {"gpu": "h100-sxm", "gpus_per_node": 4},
    {"gpu": "v100-32gb", "gpus_per_node": 8, "link_domain_gpus": 4, "free_gpus": 5},
]})


def test_summary_counts() -> None:
    s = HAND.summary
    assert s.gpu_types == ("h100-sxm", "a10", "v100-32gb")
    assert s.num_nodes == 7
    assert s.free_by_type() == {"h100-sxm": 16, "a10": 3, "v100-32gb": 5}
    assert (s.free_gpus(), s.total_gpus()) == (24, 40)
    assert (s.total_gpus("h100-sxm"), s.total_gpus("a10"), s.total_gpus("v100-32gb")) == (20, 12, 8)
    assert s.free_gpus("H100") == 16, "aliases work"


def test_summary_blocks_and_nodes() -> None:
    s = HAND.summary
    assert [s.largest_free_block(g) for g in ("h100-sxm", "a10", "v100-32gb")] == [6, 1, 5]
    assert [s.largest_free_link_block(g) for g in ("h100-sxm", "a10", "v100-32gb")] == [6, 1, 4]
    assert s.nodes_of_type("h100-sxm").tolist() == [0, 1, 5]
    assert s.free_per_node("h100-sxm").tolist() == [6, 6, 4]
    assert s.nodes_of_type("a10").tolist() == [2, 3, 4]
    assert s.free_histogram("a10").tolist() == [0, 3, 0, 0, 0]
    assert s.free_histogram("h100-sxm").tolist() == [0, 0, 0, 0, 1, 0, 2, 0, 0]
    assert s.node_free.tolist() == [6, 6, 1, 1, 1, 4, 5]
    assert s.node_domain.tolist() == [8, 8, 1, 1, 1, 4, 4]


def test_summary_is_cached_per_cluster_and_fresh_after_scaling() -> None:
    assert HAND.summary is HAND.summary
    big = Cluster.from_dict({"nodes": [{"gpu": "a100", "gpus_per_node": 8, "count": 10, "free_gpus": 2}]})
    first = big.summary
    smaller = big.scaled(40)
    assert smaller.summary is not first and smaller.summary.total_gpus() == 40
    assert smaller.summary.free_gpus() == 5 * 2


def test_unknown_type_in_summary() -> None:
    with pytest.raises(UnknownNameError):
        HAND.summary.free_gpus("b200")


def test_summary_on_a_16k_gpu_cluster_is_consistent() -> None:
    cluster = Cluster.preset("alibaba-spot-2026", scale=16384)
    s = cluster.summary
    assert isinstance(s, ClusterSummary)
    assert s.total_gpus() == cluster.total_gpus == int(s.node_gpus.sum())
    for gpu in s.gpu_types:
        assert s.free_gpus(gpu) == int(s.free_per_node(gpu).sum()) == int(
            np.dot(np.arange(len(s.free_histogram(gpu))), s.free_histogram(gpu)))


def test_topology_graph_shape() -> None:
    g = build_topology(HAND)
    kinds: dict[str, int] = {}
    for _, data in g.nodes(data=True):
        kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
    assert kinds == {"switch": 3, "node": 7, "gpu": 40}  # root, zone z1, rack z1/r1
    assert g.nodes["gpu:6:4"] == {"kind": "gpu", "gpu_type": "v100-32gb", "node": 6, "local_index": 4,
                                  "free": True, "domain": 1}
    assert g.nodes["gpu:6:5"]["free"] is False
    assert g.edges["gpu:0:0", "node:0"]["link"] == "nvlink4"
    assert g.edges["gpu:0:0", "node:0"]["bytes_per_s"] == 450e9
    assert g.edges["node:0", "switch"]["bytes_per_s"] == 8 * 50e9
    # A10 nodes hang from rack r1 in zone z1: GPU -> node -> rack -> zone -> root -> node -> GPU.
    assert nx.shortest_path_length(g, "gpu:2:0", "gpu:0:0") == 6
    assert nx.shortest_path_length(g, "gpu:2:0", "gpu:3:0") == 4
    assert HAND.topology().number_of_nodes() == 50


def test_link_domains_and_free_per_node() -> None:
    g = HAND.topology()
    domains = link_domains(g)
    assert len(domains) == 2 + 12 + 1 + 2  # H100 x2 nodes, 12 single A10s, the 4-GPU H100, two V100 halves
    assert domains[-2:] == [[f"gpu:6:{j}" for j in range(4)], [f"gpu:6:{j}" for j in range(4, 8)]]
    free = link_domains(g, only_free=True)
    assert free[0] == [f"gpu:0:{j}" for j in range(6)]
    assert free[-2:] == [[f"gpu:6:{j}" for j in range(4)], ["gpu:6:4"]]
    assert sum(len(d) for d in free) == 24
    assert free_gpus_per_node(g, "a10") == {"node:2": 1, "node:3": 1, "node:4": 1}
    assert free_gpus_per_node(g) == {"node:0": 6, "node:1": 6, "node:2": 1, "node:3": 1, "node:4": 1,
                                     "node:5": 4, "node:6": 5}


def test_cached_summary_does_not_affect_equality_or_copies() -> None:
    import copy

    cluster = Cluster.preset("default")
    assert cluster.summary.total_gpus() == 96
    assert copy.deepcopy(cluster) == cluster == Cluster.from_dict(cluster.to_dict())


def test_summary_arrays_are_read_only() -> None:
    s = HAND.summary
    for array in (s.node_free, s.node_type, s.free_per_node("h100-sxm"), s.free_histogram("a10")):
        with pytest.raises(ValueError):
            array[0] = 99
