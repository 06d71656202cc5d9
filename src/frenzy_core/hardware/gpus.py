"""The GPU catalogue: one YAML file per GPU type under ``frenzy_core/data/gpu_specs/``, plus user files.

Lookups are case-insensitive and accept aliases (driver names such as ``NVIDIA H100 80GB HBM3``, names used in
public cluster traces such as ``A100-SXM4-80GB``). A bare family name means its SXM variant with the most memory:
``a100`` is ``a100-80gb``, ``v100`` is ``v100-32gb``, ``h100`` is ``h100-sxm``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from frenzy_core._files import is_dir, is_file, load_yaml_mapping, read_text
from frenzy_core.errors import ConfigError, UnknownNameError, require_name, short_repr
from frenzy_core.hardware.gpu import GPUSpec

__all__ = ["catalogue_markdown", "get_gpu_spec", "gpu_ids", "load_gpu_specs", "normalize_gpu_name"]

_VENDOR_PREFIXES = ("nvidia-", "tesla-", "amd-", "geforce-")


def normalize_gpu_name(name: str) -> str:
    """Lowercase, with runs of spaces, underscores and dashes as one dash: the key every lookup compares."""
    return re.sub(r"[\s_\-]+", "-", require_name("GPU type", name).strip().lower()).strip("-")


def _read_spec_file(text: str, origin: str, default_id: str) -> GPUSpec:
    data = load_yaml_mapping(text, f"GPU spec file {origin}")
    data.setdefault("id", default_id)
    try:
        return GPUSpec.model_validate(data)
    except ConfigError as exc:
        raise ConfigError(f"GPU spec file {origin}: {exc}", field=exc.field, value=exc.value) from None


@functools.lru_cache(maxsize=1)
def _builtin_specs() -> dict[str, GPUSpec]:
    out: dict[str, GPUSpec] = {}
    folder = resources.files("frenzy_core") / "data" / "gpu_specs"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            stem = entry.name[: -len(".yaml")]
            spec = _read_spec_file(entry.read_text(encoding="utf-8"), entry.name, stem)
            if spec.id != stem:
                raise ConfigError(f"GPU spec file {entry.name}: id {spec.id!r} must equal the file name")
            out[spec.id] = spec
    return out


def _extra_files(extra_dirs: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    if isinstance(extra_dirs, Mapping) or not isinstance(extra_dirs, Iterable):
        raise ConfigError(f"extra_dirs must be a folder, a file or a list of them, got {type(extra_dirs).__name__}",
                          field="extra_dirs", value=extra_dirs)
    for item in extra_dirs:
        if not isinstance(item, (str, Path)):
            raise ConfigError(f"extra_dirs holds {type(item).__name__} {short_repr(item)}, not a path",
                              field="extra_dirs", value=item)
        path = Path(item)
        if is_dir(path):
            files.extend(sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")))
        elif is_file(path):
            files.append(path)
        else:
            raise ConfigError(f"extra_dirs: {str(path)!r} is neither a directory nor a file",
                              field="extra_dirs", value=str(path))
    return files


def _apply_override(spec: GPUSpec, changes: Mapping[str, Any]) -> GPUSpec:
    """``changes`` applied to ``spec``; ``peak_tflops`` merges per dtype; changed fields are sourced
    "user override" unless ``changes`` has its own ``sources``."""
    if not isinstance(changes, Mapping):
        raise ConfigError(f"an override must map field names to values, got {type(changes).__name__}",
                          field="overrides", value=changes, hint="e.g. {'memory_bytes': 85899345920}")
    changes = dict(changes)
    if changes.get("id", spec.id) != spec.id:
        raise ConfigError(f"an override cannot change the id ({spec.id!r} to {short_repr(changes['id'])}): the "
                          "catalogue is keyed by it", field="id", value=changes["id"],
                          hint="add a GPU spec file with the new id instead")
    user_sources = dict(changes.pop("sources", {}))
    sources = dict(spec.sources)
    for key in changes:
        sources[key] = "user override"
    if "peak_tflops" in changes:
        sources.pop("peak_tflops", None)
        for dtype in spec.peak_tflops:
            sources.setdefault(f"peak_tflops.{dtype}", spec.sources.get("peak_tflops", ""))
        for dtype in changes["peak_tflops"]:
            sources[f"peak_tflops.{dtype}"] = "user override"
        changes["peak_tflops"] = {**spec.peak_tflops, **changes["peak_tflops"]}
    sources.update(user_sources)
    return spec.replace(**changes, sources=sources)  # type: ignore[no-any-return]


def load_gpu_specs(extra_dirs: Iterable[str | Path] | str | Path | None = None,
                   overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, GPUSpec]:
    """The built-in catalogue, plus YAML files from ``extra_dirs`` (folders or files; a file with a known id
    replaces it), with ``overrides`` (id or alias -> field values) applied last; keyed by id."""
    if isinstance(extra_dirs, (str, Path)):
        extra_dirs = [extra_dirs]
    specs = dict(_builtin_specs())
    for path in _extra_files(extra_dirs or ()):
        spec = _read_spec_file(read_text(path, "GPU spec file"), str(path), normalize_gpu_name(path.stem))
        specs[spec.id] = spec
    _alias_index(specs)  # fail early on a clash between files
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"overrides must map GPU names to field values, got {type(overrides).__name__}",
                          field="overrides", value=overrides, hint="e.g. {'h100': {'price_per_gpu_hour_usd': 2.5}}")
    for name, changes in (overrides or {}).items():
        spec = get_gpu_spec(name, specs)
        try:
            specs[spec.id] = _apply_override(spec, changes)
            _alias_index(specs)  # an override may not take another type's name
        except ConfigError as exc:
            raise ConfigError(f"overrides[{short_repr(name)}]: {exc}", field=exc.field, value=exc.value) from None
    return specs


def _alias_index(specs: Mapping[str, GPUSpec]) -> dict[str, str]:
    index: dict[str, str] = {}
    for spec in specs.values():
        for name in [spec.id, spec.name, *spec.aliases]:
            key = normalize_gpu_name(name)
            other = index.get(key)
            if other is not None and other != spec.id:
                raise ConfigError(f"GPU name {name!r} is claimed by both {other!r} and {spec.id!r}",
                                  field="aliases", value=name, hint="remove it from one of the two files")
            index[key] = spec.id
    return index


@functools.lru_cache(maxsize=1)
def _builtin_index() -> dict[str, str]:
    return _alias_index(_builtin_specs())


def get_gpu_spec(name: str, specs: Mapping[str, GPUSpec] | None = None) -> GPUSpec:
    """The spec for an id or alias (case-insensitive; vendor prefixes such as ``NVIDIA``/``Tesla`` optional),
    from ``specs`` or the built-in catalogue; UnknownNameError suggests the closest ids."""
    if specs is None:
        table, index = _builtin_specs(), _builtin_index()
    else:
        table, index = dict(specs), _alias_index(specs)
    key = normalize_gpu_name(name)
    while True:
        if key in index:
            return table[index[key]]
        prefix = next((p for p in _VENDOR_PREFIXES if key.startswith(p)), None)
        if prefix is None:
            break
        key = key[len(prefix):]
    raise UnknownNameError("GPU type", name, table)


def gpu_ids() -> list[str]:
    """Ids of the built-in GPU types, sorted."""
    return sorted(_builtin_specs())


def catalogue_markdown(specs: Mapping[str, GPUSpec] | None = None) -> str:
    """The catalogue as a Markdown table (the one in docs/hardware.md), one row per id, sorted."""
    table = _builtin_specs() if specs is None else specs
    lines = [("| id | name | memory (GiB, driver) | BW (TB/s) | BF16 / FP16 TFLOPS | FP8 | intra-node link (GB/s/dir) "
             "| GPUs/node | network (Gb/s/GPU) | USD/GPU-h |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    for gpu in sorted(table):
        s = table[gpu]
        half = s.peak_tflops.get("bf16", "–")
        fp16 = s.peak_tflops.get("fp16", "–")
        price = "" if s.price_per_gpu_hour_usd is None else f"{s.price_per_gpu_hour_usd:g} ({s.price_date})"
        lines.append(
            f"| `{gpu}` | {s.name} | {s.memory_bytes / 2**30:.2f} | {s.memory_bandwidth_bytes_per_s / 1e12:.3g} "
            f"| {half} / {fp16} | {s.peak_tflops.get('fp8', '–')} | {s.intra_node_link.value} "
            f"({s.intra_node_bytes_per_s / 1e9:g}) | {s.gpus_per_node} | {s.inter_node_bytes_per_s * 8 / 1e9:g} "
            f"| {price} |")
    return "\n".join(lines) + "\n"
