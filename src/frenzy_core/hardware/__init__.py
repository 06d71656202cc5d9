"""Hardware: GPU types (catalogue and lookup), clusters of nodes, and their topology."""

from frenzy_core.hardware.cluster import (
    DEFAULT_PRESET,
    Cluster,
    ClusterPreset,
    Node,
    cluster_preset_info,
    scale_counts,
)
from frenzy_core.hardware.gpu import DTYPES, GPUSpec, LinkKind, Links
from frenzy_core.hardware.gpus import get_gpu_spec, gpu_ids, load_gpu_specs, normalize_gpu_name
from frenzy_core.hardware.topology import ClusterSummary, build_topology, free_gpus_per_node, link_domains

__all__ = [
    "DEFAULT_PRESET", "DTYPES", "Cluster", "ClusterPreset", "ClusterSummary", "GPUSpec", "LinkKind", "Links", "Node",
    "build_topology", "cluster_preset_info", "free_gpus_per_node", "get_gpu_spec", "gpu_ids", "link_domains",
    "load_gpu_specs", "normalize_gpu_name", "scale_counts",
]
