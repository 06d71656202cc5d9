"""``Cluster``: the nodes a job may be placed on, each with its GPU type, size, free GPUs and links.

A cluster is a list of node shapes, each repeated ``count`` times. Built-in presets live as YAML files under
``frenzy_core/data/clusters/``; ``default`` is ``frenzy-paper``.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from frenzy_core import _limits as limits
from frenzy_core._base import FrozenModel
from frenzy_core._data import data_yaml_files
from frenzy_core._files import is_file, load_yaml_mapping, read_text
from frenzy_core._limits import at_most, beyond_message
from frenzy_core.errors import ConfigError, UnknownNameError, require_name, require_number, short_repr
from frenzy_core.hardware.gpu import GPUSpec, LinkKind, Links
from frenzy_core.hardware.gpus import get_gpu_spec
from frenzy_core.hardware.topology import ClusterSummary, build_topology

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["DEFAULT_PRESET", "Cluster", "ClusterPreset", "Node", "cluster_preset_info", "scale_counts"]

_SPECS: contextvars.ContextVar[Mapping[str, GPUSpec] | None] = contextvars.ContextVar("gpu_specs", default=None)
"""The GPU catalogue names resolve against while a cluster is validated (None: the built-in one). A context
variable rather than pydantic's validation context, which models with a custom ``__init__`` do not pass on."""

DEFAULT_PRESET = "frenzy-paper"
"""The preset the CLI uses when none is named: the Frenzy paper's 96-GPU heterogeneous testbed."""


class Node(FrozenModel):
    """One node shape, repeated ``count`` times; link fields left out take the GPU type's typical values."""

    gpu: str = Field(description="GPU type id or alias; stored as the canonical id.")
    gpus_per_node: Annotated[int, at_most(limits.GPUS_PER_NODE)] = Field(
        gt=0, description="GPUs in each node of this shape.")
    count: Annotated[int, at_most(limits.NODES)] = Field(
        default=1, gt=0, description="How many identical nodes of this shape.")
    free_gpus: int | None = Field(default=None, ge=0, description="Free GPUs per node; default all.")
    intra_node_link: LinkKind | None = Field(default=None, description="Default: the GPU type's link.")
    intra_node_bytes_per_s: Annotated[float | None, at_most(limits.BYTES_PER_S)] = Field(
        default=None, ge=limits.MIN_BYTES_PER_S, description="Per GPU, per direction.")
    link_domain_gpus: int | None = Field(default=None, gt=0, description=(
        "GPUs per fast-link (NVLink/Infinity Fabric) domain in a node; default min(type's, gpus_per_node)."))
    inter_node_bytes_per_s: Annotated[float | None, at_most(limits.BYTES_PER_S)] = Field(
        default=None, ge=limits.MIN_BYTES_PER_S, description="NIC bandwidth per GPU, per direction.")
    host_memory_bytes: Annotated[int | None, at_most(limits.HOST_MEMORY_BYTES)] = Field(
        default=None, gt=0, description=(
            "Host (CPU) memory of each node, which offloaded states share; default: the GPU type's typical node's "
            "where the node has its GPU count and a source gives it, else unknown (not checked)."))
    rack: str | None = Field(default=None, description="Optional rack label (placement locality).")
    zone: str | None = Field(default=None, description="Optional zone label (placement locality).")
    nvlink_domain: str | None = Field(default=None, description=(
        "Label of a multi-node NVLink domain (GB200 NVL72: the 18 trays of a rack share one): nodes with the "
        "same label reach each other at intra_node_bytes_per_s."))

    @field_validator("gpu")
    @classmethod
    def _canonical_gpu(cls, value: str) -> str:
        try:
            return get_gpu_spec(value, _SPECS.get()).id
        except UnknownNameError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _check_bounds(self) -> Node:
        if self.free_gpus is not None and self.free_gpus > self.gpus_per_node:
            raise ValueError(f"free_gpus ({self.free_gpus}) exceeds gpus_per_node ({self.gpus_per_node})")
        if self.link_domain_gpus is not None and self.link_domain_gpus > self.gpus_per_node:
            raise ValueError(f"link_domain_gpus ({self.link_domain_gpus}) exceeds gpus_per_node "
                             f"({self.gpus_per_node})")
        return self

    def resolved(self, spec: GPUSpec) -> Node:
        """This node with every defaulted field filled from ``spec``."""
        link = self.intra_node_link or spec.intra_node_link
        domain = self.link_domain_gpus
        if domain is None:
            domain = 1 if link.is_pcie else min(spec.link_domain_gpus, self.gpus_per_node)
        return self.model_copy(update={  # values come from a validated spec: no revalidation needed
            "free_gpus": self.gpus_per_node if self.free_gpus is None else self.free_gpus,
            "intra_node_link": link,
            "intra_node_bytes_per_s": self.intra_node_bytes_per_s or spec.intra_node_bytes_per_s,
            "link_domain_gpus": domain,
            "inter_node_bytes_per_s": self.inter_node_bytes_per_s or spec.inter_node_bytes_per_s,
            "host_memory_bytes": self.host_memory_bytes or (spec.node_host_memory_bytes
                                                            if self.gpus_per_node == spec.gpus_per_node else None),
        })


class Cluster(FrozenModel):
    """A heterogeneous GPU cluster: node shapes with counts, every default resolved against the GPU catalogue."""

    nodes: tuple[Node, ...] = Field(description="Node shapes; each repeated ``count`` times.")
    name: str = Field(default="", description="Label, e.g. the preset name.")
    inter_rack_bytes_per_s: float | None = Field(default=None, gt=0, description=(
        "Per GPU, per direction, for a group that crosses racks (default: the nodes' own NIC bandwidth, a "
        "non-blocking fabric)."))
    inter_zone_bytes_per_s: float | None = Field(default=None, gt=0, description=(
        "Per GPU, per direction, for a group that crosses zones (default: as across racks)."))
    _gpu_specs: dict[str, GPUSpec] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _keep_specs(self) -> Cluster:
        self._gpu_specs = {gpu: get_gpu_spec(gpu, _SPECS.get()) for gpu in self.gpu_types}
        domains: dict[str, set[str]] = {}
        for node in self.nodes:
            if node.nvlink_domain is not None:
                domains.setdefault(node.nvlink_domain, set()).add(node.gpu)
        mixed = sorted(d for d, gpus in domains.items() if len(gpus) > 1)
        if mixed:
            raise ValueError(f"NVLink domain {mixed[0]!r} mixes GPU types {sorted(domains[mixed[0]])}; a domain "
                             "holds one type")
        return self

    @model_validator(mode="before")
    @classmethod
    def _nodes_present(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and not data.get("nodes"):
            raise ValueError("a cluster needs at least one node; give nodes: [{gpu: ..., gpus_per_node: ...}]")
        return data

    @model_validator(mode="after")
    def _size(self) -> Cluster:
        for what, total, limit in (("nodes (counts summed)", self.num_nodes, limits.NODES),
                                   ("GPUs", self.total_gpus, limits.GPUS)):
            if total > limit.high:
                raise ValueError(beyond_message(total, limit, f"the cluster's {what}"))
        return self

    @field_validator("nodes", mode="after")
    @classmethod
    def _resolve(cls, nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        return tuple(node.resolved(get_gpu_spec(node.gpu, _SPECS.get())) for node in nodes)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], specs: Mapping[str, GPUSpec] | None = None) -> Cluster:
        """A cluster from ``{"nodes": [{"gpu": ..., "gpus_per_node": ..., "count": ..., "free_gpus": ...}]}``;
        GPU names resolve against ``specs`` (default: the built-in catalogue)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"Cluster: expected a mapping with 'nodes', got {type(data).__name__}")
        token = _SPECS.set(specs)
        try:
            return cls.model_validate(dict(data))  # type: ignore[no-any-return]
        finally:
            _SPECS.reset(token)

    @classmethod
    def from_yaml(cls, text: str | Path, specs: Mapping[str, GPUSpec] | None = None) -> Cluster:  # type: ignore[override]
        """A cluster from YAML text or a path to a YAML file (same schema as :meth:`from_dict`)."""
        if not isinstance(text, (str, Path)):
            raise ConfigError(f"Cluster.from_yaml takes YAML text or a path, got {type(text).__name__}",
                              field="text", value=text, hint="use Cluster.from_dict for a mapping")
        # a path, else YAML text (so is a name no file can have: is_file says False rather than raising)
        if isinstance(text, Path) or ("\n" not in text and (text.endswith((".yaml", ".yml")) or is_file(Path(text)))):
            path = Path(text)
            if not is_file(path):
                raise ConfigError(f"Cluster: no such file {short_repr(str(path))}", field="path", value=str(path))
            text = read_text(path, "cluster file")
        data = load_yaml_mapping(text, "Cluster")
        data = {k: v for k, v in data.items() if k not in ClusterPreset.META_KEYS}
        return cls.from_dict(data, specs)

    def to_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` reads back to an equal cluster."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def preset(cls, name: str, scale: int | None = None) -> Cluster:
        """A built-in cluster (``default`` is ``frenzy-paper``); ``scale`` = target total GPUs."""
        cluster = cluster_preset_info(name).cluster
        return cluster if scale is None else cluster.scaled(scale)

    @staticmethod
    def presets() -> list[str]:
        """Names of the built-in cluster presets, sorted, plus ``default``."""
        return sorted([*_load_presets(), "default"])

    # ------------------------------------------------------------------ derived views
    @property
    def total_gpus(self) -> int:
        """All GPUs in the cluster."""
        return sum(n.gpus_per_node * n.count for n in self.nodes)

    @property
    def free_gpus(self) -> int:
        """Free GPUs in the cluster."""
        return sum((n.free_gpus or 0) * n.count for n in self.nodes)

    @property
    def num_nodes(self) -> int:
        """Nodes in the cluster (shapes times counts)."""
        return sum(n.count for n in self.nodes)

    @property
    def gpu_types(self) -> list[str]:
        """GPU type ids present, in order of first appearance."""
        return list(dict.fromkeys(n.gpu for n in self.nodes))

    def gpu_spec(self, gpu: str) -> GPUSpec:
        """The spec of a GPU type in this cluster (from the catalogue the cluster was built against)."""
        spec = self._gpu_specs.get(gpu)
        return spec if spec is not None else get_gpu_spec(gpu, self._gpu_specs)

    def links(self, gpu: str) -> Links:
        """Node size and link speeds a job on ``gpu`` is timed with: its largest fast-link domain of the type
        (a node, or the nodes of a multi-node NVLink domain together), and the slowest intra- and inter-node
        links of the type's nodes.

        The largest domain, because a group of up to that many GPUs can talk over the intra-node (NVLink) link;
        the slowest links, because a job may land on any node of the type and a data-parallel ring runs at its
        slowest member. The planner times each candidate with the domain size its placement actually gets
        (:mod:`frenzy_core.planning.shapes`).
        """
        try:
            spec = self.gpu_spec(gpu)
        except UnknownNameError:  # a type of the catalogue that this cluster lacks
            spec = get_gpu_spec(gpu)
        shapes = [n for n in self.nodes if n.gpu == spec.id]
        if not shapes:
            raise ConfigError(f"the cluster has no {spec.id} nodes (it has {self.gpu_types})", field="cluster",
                              value=spec.id, hint="estimate with one of its GPU types")
        domains: dict[str, int] = {}
        for n in shapes:
            if n.nvlink_domain is not None:
                domains[n.nvlink_domain] = domains.get(n.nvlink_domain, 0) + n.gpus_per_node * n.count
        return Links(max([n.gpus_per_node for n in shapes] + list(domains.values())),
                     min(n.intra_node_bytes_per_s or spec.intra_node_bytes_per_s for n in shapes),
                     min(n.inter_node_bytes_per_s or spec.inter_node_bytes_per_s for n in shapes))

    def scaled(self, total_gpus: int) -> Cluster:
        """Node counts scaled so the cluster has about ``total_gpus`` GPUs (see :func:`scale_counts`)."""
        counts = scale_counts([n.count for n in self.nodes], [n.gpus_per_node for n in self.nodes],
                              [n.gpu for n in self.nodes], total_gpus)
        kept = tuple(n.model_copy(update={"count": c}) for n, c in zip(self.nodes, counts) if c > 0)
        out = Cluster.model_construct(nodes=kept, name=self.name, inter_rack_bytes_per_s=self.inter_rack_bytes_per_s,
                                      inter_zone_bytes_per_s=self.inter_zone_bytes_per_s)  # already validated
        out._gpu_specs = {gpu: spec for gpu, spec in self._gpu_specs.items() if gpu in out.gpu_types}
        return out

    @functools.cached_property
    def summary(self) -> ClusterSummary:
        """Per-type and per-node free-GPU counts for the planner; built once (O(nodes)), queries O(1)."""
        return ClusterSummary.build(self)

    def topology(self) -> nx.Graph:
        """The GPU - node - switch graph (see :func:`frenzy_core.hardware.topology.build_topology`)."""
        return build_topology(self)



def scale_counts(counts: list[int], gpus_per_node: list[int], types: list[str], total_gpus: int) -> list[int]:
    """Node counts scaled to at most ``total_gpus`` GPUs in proportion to ``counts``: floors of the exact
    shares, then one more node to the shapes with the largest remainders (ties: first shape) while it fits;
    every GPU type keeps at least one node, which may push the total above ``total_gpus``."""
    require_number("scale", total_gpus, low=1, high=limits.GPUS.high, integer=True)
    current = sum(c * g for c, g in zip(counts, gpus_per_node))
    shares = [c * total_gpus / current for c in counts]
    new = [int(s) for s in shares]
    order = sorted(range(len(counts)), key=lambda i: (-(shares[i] - new[i]), i))
    left = total_gpus - sum(c * g for c, g in zip(new, gpus_per_node))
    for i in order:
        if gpus_per_node[i] <= left:
            new[i] += 1
            left -= gpus_per_node[i]
    for gpu in dict.fromkeys(types):
        members = [i for i, t in enumerate(types) if t == gpu]
        if sum(new[i] for i in members) == 0:
            new[min(members, key=lambda i: (-shares[i], i))] = 1
    return new


class ClusterPreset(FrozenModel):
    """A built-in cluster with where its shape comes from."""

    META_KEYS: ClassVar[tuple[str, ...]] = ("description", "source", "notes")

    name: str
    description: str
    source: str
    notes: str = ""
    cluster: Cluster


@functools.lru_cache(maxsize=1)
def _load_presets() -> dict[str, ClusterPreset]:
    out: dict[str, ClusterPreset] = {}
    for name, file_name, data in data_yaml_files("clusters"):
        meta = {k: data.pop(k, "") for k in ClusterPreset.META_KEYS}
        if not meta["source"] or not meta["description"]:
            raise ConfigError(f"cluster preset file {file_name} lacks description or source")
        try:
            cluster = Cluster.from_dict({**data, "name": name})
        except ConfigError as exc:
            raise ConfigError(f"cluster preset file {file_name}: {exc}") from None
        out[name] = ClusterPreset(name=name, cluster=cluster, **meta)
    return out


def cluster_preset_info(name: str) -> ClusterPreset:
    """The preset with its description and source; ``default`` is :data:`DEFAULT_PRESET`."""
    presets = _load_presets()
    key = require_name("cluster preset", name).strip().lower()
    key = DEFAULT_PRESET if key == "default" else key
    if key not in presets:
        raise UnknownNameError("cluster preset", name, [*presets, "default"])
    return presets[key]
