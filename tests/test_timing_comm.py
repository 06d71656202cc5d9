"""Collective costs and link selection of the time model."""

from __future__ import annotations

import numpy as np
import pytest

from frenzy_core import Cluster, ConfigError, get_gpu_spec
from frenzy_core.hardware.gpu import Links
from frenzy_core.timing.comm import (
    group_bandwidth,
    links_for,
    ring_all_reduce_s,
    ring_one_way_s,
    send_s,
)

LINKS = Links(gpus_per_node=8, intra_node_bytes_per_s=300e9, inter_node_bytes_per_s=25e9)


def test_ring_costs() -> None:
    n = np.array([1.0, 2.0, 4.0])
    nbytes = np.full(3, 1e9)
    bw = np.full(3, 1e11)
    # 2 (n-1)/n x 1 GB / 100 GB/s + 1 ms: 0, 10 ms + 1 ms, 15 ms + 1 ms.
    assert ring_all_reduce_s(nbytes, n, bw, 1e-3) == pytest.approx([0.0, 0.011, 0.016])
    assert ring_one_way_s(nbytes, n, bw, 1e-3) == pytest.approx([0.0, 0.006, 0.0085])
    assert send_s(nbytes, bw, 0.0) == pytest.approx(0.01)


def test_group_bandwidth_intra_multi_nic_and_cap() -> None:
    span = np.array([8.0, 16.0, 64.0, 64.0, 64.0])
    stride = np.array([1.0, 1.0, 8.0, 2.0, 1.0])
    got = group_bandwidth(span, stride, LINKS, 1.0)
    # In one node: NVLink. Across nodes: one NIC per member per node (8 members: 200 GB/s; 1: 25; 4: 100).
    assert got == pytest.approx([300e9, 200e9, 25e9, 100e9, 200e9])
    fast_nic = LINKS._replace(inter_node_bytes_per_s=100e9)
    assert group_bandwidth(np.array([16.0]), np.array([1.0]), fast_nic, 0.5) == pytest.approx([150e9])  # capped


def test_links_from_gpu_node_and_cluster() -> None:
    gpu = get_gpu_spec("a100-80gb")
    assert links_for(gpu) == Links(gpu.gpus_per_node, gpu.intra_node_bytes_per_s, gpu.inter_node_bytes_per_s)
    cluster = Cluster.from_dict({"nodes": [
        {"gpu": "a100-80gb", "gpus_per_node": 8, "count": 2, "inter_node_bytes_per_s": 12.5e9},
        {"gpu": "a100-80gb", "gpus_per_node": 4, "count": 1},
        {"gpu": "t4", "gpus_per_node": 2, "count": 1},
    ]})
    links = links_for(gpu, cluster)
    # the largest node of the type (TP groups are placed inside one node), the slowest links (issue 16)
    assert links == cluster.links("a100-80gb")
    assert links.gpus_per_node == 8 and links.inter_node_bytes_per_s == 12.5e9
    with pytest.raises(ConfigError, match="no h100-sxm nodes"):
        links_for(get_gpu_spec("h100-sxm"), cluster)
