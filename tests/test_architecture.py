"""The shape of the package: layers, no import circles, short functions, and a stable public API.

What each test guards and how to change it deliberately is in docs/architecture.md.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import frenzy_core

PACKAGE = Path(frenzy_core.__file__).parent

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors"}),
    frozenset({"_limits", "_distinct"}),
    frozenset({"_files"}),
    frozenset({"_base"}),
    frozenset({"_data"}),
    frozenset({"config", "hardware"}),
    frozenset({"memory", "timing"}),
    frozenset({"planning"}),
    frozenset({"scheduling", "adapters", "plotting"}),
    frozenset({"cli"}),
)
"""Subpackages (and top-level modules) by layer: a module imports only from its own subpackage and from lower
layers (``frenzy_core/__init__.py`` re-exports from all of them)."""

MAX_LINES = 80
MAX_CLI_LINES = 120
LONG_FUNCTIONS: dict[str, str] = {}
"""Functions over the limit today, each with who is splitting it; the list only shrinks."""

LAZY_IMPORTS: dict[str, str] = {
    "cli/": "the CLI imports a command's machinery when the command runs (start-up time of `frenzy --help`)",
    "scheduling/throughput.py": "scheduler engineer (frenzy_core.planning imported on first use)",
    "scheduling/workload.py": "scheduler engineer",
    "timing/calibrate.py": "timing engineer, issue 11: calibrate() reads run files through timing/runs.py, which "
                           "imports Measurement from calibrate.py",
    "memory/hf_models.py": "probe engineer (transformers is an optional extra)",
    "memory/probe.py": "probe engineer (torch is an optional extra)",
}
"""Files whose function-level imports of frenzy_core modules do not break a circle, with why or who owns them."""


@dataclass(frozen=True)
class Module:
    name: str
    """Dotted name, e.g. ``frenzy_core.planning.plan``."""
    path: Path
    tree: ast.Module

    @property
    def rel(self) -> str:
        return self.path.relative_to(PACKAGE).as_posix()

    @property
    def part(self) -> str:
        """Its subpackage or top-level module (``planning``, ``errors``); ``frenzy_core`` for the root."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else "frenzy_core"


@cache
def _modules() -> dict[str, Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        out[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8")))
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: Module) -> list[str]:
    """The package's modules an import statement loads (``from a import b`` is ``a.b`` when that is a module)."""
    known = _modules()
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.name.split(".")[: None if module.path.name == "__init__.py" else -1]
            here = here[: len(here) - node.level + 1]
            base = ".".join(here + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    # Importing a.b.c first runs the __init__ of each package on the way (a.b here) that is not already being
    # imported as a parent of the importing module itself.
    own = {".".join(module.name.split(".")[:i]) for i in range(1, module.name.count(".") + 2)}
    parents = {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 1)}
    return [n for n in [*names, *sorted(parents - own)] if n in known]


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _top_level_imports(module: Module) -> set[str]:
    """Modules imported when ``module`` is (statements outside functions and classes; ``if TYPE_CHECKING``
    blocks excluded)."""
    out: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update(_targets(node, module))
            elif _type_checking(node):
                walk(node.orelse)  # type: ignore[attr-defined]
            elif isinstance(node, (ast.If, ast.Try)):
                walk(node.body)
                walk(node.orelse)
                for handler in getattr(node, "handlers", []):
                    walk(handler.body)
                walk(getattr(node, "finalbody", []))

    walk(module.tree.body)
    out.discard(module.name)
    return out


def _function_imports(module: Module) -> list[tuple[str, str]]:
    """(function, module) for each import of a package module inside a function."""
    out = []
    for fn in ast.walk(module.tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    out += [(fn.name, t) for t in _targets(node, module) if t != module.name]
    return out


@cache
def _graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(_top_level_imports(m)) for name, m in _modules().items()}


def _path(start: str, goal: str) -> list[str] | None:
    """Modules from ``start`` to ``goal`` along module-level imports (None: unreachable)."""
    graph, seen, stack = _graph(), {start}, [[start]]
    while stack:
        route = stack.pop()
        if route[-1] == goal:
            return route
        for nxt in sorted(graph[route[-1]] - seen):
            seen.add(nxt)
            stack.append([*route, nxt])
    return None


def test_no_module_level_import_cycles() -> None:
    cycles = []
    for name, targets in _graph().items():
        for target in sorted(targets):
            back = _path(target, name)
            if back is not None:
                cycles.append(" -> ".join([name, *back]))
    assert not cycles, "modules that import each other at module level:\n  " + "\n  ".join(cycles)


def test_lazy_imports_only_break_circles() -> None:
    """A function-level import of a package module is there because importing it at the top would close a
    circle; otherwise it belongs at the top of the file (or its file is in LAZY_IMPORTS, with the reason)."""
    hoistable = []
    for module in _modules().values():
        if any(module.rel.startswith(prefix) for prefix in LAZY_IMPORTS):
            continue
        for function, target in _function_imports(module):
            if _path(target, module.name) is None:
                hoistable.append(f"{module.rel}:{function} imports {target}")
    assert not hoistable, "imports that could be at module level:\n  " + "\n  ".join(hoistable)
    stale = [p for p in LAZY_IMPORTS if not any(m.rel.startswith(p) and _function_imports(m)
                                                for m in _modules().values())]
    assert not stale, f"LAZY_IMPORTS entries with no lazy import left (remove them): {stale}"


def test_layers() -> None:
    layer = {part: i for i, parts in enumerate(LAYERS) for part in parts}
    wrong = []
    for module in _modules().values():
        if module.part == "frenzy_core":
            continue
        assert module.part in layer, f"{module.part} is in no layer of LAYERS"
        imported = _graph()[module.name] | {t for _, t in _function_imports(module)}
        for target in sorted(imported):
            other = _modules()[target].part
            if other == "frenzy_core" or (other != module.part and layer[other] >= layer[module.part]):
                wrong.append(f"{module.rel} ({module.part}) imports {target} ({other})")
    assert not wrong, "imports from the same or a higher layer:\n  " + "\n  ".join(wrong)


def _functions() -> dict[str, int]:
    out = {}
    for module in _modules().values():
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{module.rel}:{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
    return out


def test_functions_are_short() -> None:
    lengths = _functions()
    too_long = [f"{key} ({n} lines)" for key, n in sorted(lengths.items())
                if n > (MAX_CLI_LINES if key.startswith("cli/") else MAX_LINES) and key not in LONG_FUNCTIONS]
    assert not too_long, (f"functions over {MAX_LINES} lines ({MAX_CLI_LINES} in cli/); split them:\n  "
                          + "\n  ".join(too_long))
    fixed = [key for key in LONG_FUNCTIONS
             if lengths.get(key, 0) <= (MAX_CLI_LINES if key.startswith("cli/") else MAX_LINES)]
    assert not fixed, f"no longer too long (remove them from LONG_FUNCTIONS): {fixed}"


def _public_api() -> dict[str, list[str]]:
    out = {"frenzy_core": sorted(frenzy_core.__all__)}
    for info in pkgutil.walk_packages(frenzy_core.__path__, "frenzy_core."):
        if info.ispkg:
            out[info.name] = sorted(getattr(importlib.import_module(info.name), "__all__", []))
    return out


def test_public_api_is_the_snapshot() -> None:
    """``__all__`` of the package and of each subpackage; a change here is an API change: update PUBLIC_API in
    the same commit and say so in its message (and in docs where a name is documented)."""
    got = _public_api()
    diffs = [f"{pkg}: added {sorted(set(got.get(pkg, [])) - set(PUBLIC_API.get(pkg, [])))}, "
             f"removed {sorted(set(PUBLIC_API.get(pkg, [])) - set(got.get(pkg, [])))}"
             for pkg in sorted(set(got) | set(PUBLIC_API)) if got.get(pkg) != PUBLIC_API.get(pkg)]
    assert not diffs, "the public API changed:\n  " + "\n  ".join(diffs)
    for pkg, names in got.items():
        module = importlib.import_module(pkg)
        assert all(hasattr(module, n) for n in names), f"{pkg}.__all__ names something it does not define"


PUBLIC_API: dict[str, list[str]] = {
    'frenzy_core': [
        'ArchKind', 'Attention', 'BatchEstimate', 'CalibrationResult', 'Cluster', 'ClusterSummary', 'ConfigError',
        'Fp8Recipe', 'Framework', 'FrenzyError', 'GPURequest', 'GPUSpec', 'InfeasiblePlanError', 'LayoutArrays',
        'LinkKind', 'Links', 'MLAConfig', 'MLPKind', 'Measurement', 'MegatronJob', 'MemoryEstimate', 'MoEConfig',
        'ModelConfig', 'Node', 'NormKind', 'NormPlacement', 'Objective', 'OnlineScheduler', 'Optimizer',
        'OptimizerImpl', 'OptionalDependencyError', 'POLICIES', 'ParallelConfig', 'PhasePeak', 'PipelineSchedule',
        'Plan', 'PlanConstraints', 'PositionEmbedding', 'Precision', 'ProbeResult', 'QKNormScope', 'Recompute',
        'RecomputeMethod', 'RecomputeModule', 'SimulationResult', 'StageMemory', 'TimeEstimate', 'TimeModelParams',
        'TraceFormat',
        'TraceJob', 'TrainingConfig', 'TrainingJob', 'UnknownNameError', 'calibrate', 'compare', 'count_parameters',
        'default_global_batch', 'estimate_iteration_time', 'estimate_iteration_time_batch', 'estimate_memory',
        'estimate_memory_batch', 'from_megatron_args', 'get_gpu_spec', 'jobs_from_trace', 'load_gpu_specs',
        'load_trace', 'measure_training_step', 'parse_megatron_args', 'plan_job', 'probe_memory', 'read_trace',
        'simulate', 'synthetic_jobs', 'to_megatron_args', 'validate_layout',
    ],
    'frenzy_core.adapters': [
        'ADAPTERS', 'Adapter', 'AdapterOptions', 'GROUP_ENV', 'LAUNCHERS', 'OutputFormat', 'RECIPE_ENV', 'STAGE_ENV',
        'emit', 'get_adapter',
    ],
    'frenzy_core.cli': [
        'app', 'main',
    ],
    'frenzy_core.config': [
        'ArchKind', 'Attention', 'DEFAULT_BATCH_TOKENS', 'DefaultBatch', 'Fp8Recipe', 'Framework', 'LAYOUT_COLUMNS',
        'LAYOUT_RULES', 'LayoutArrays', 'LayoutRule', 'MLAConfig', 'MLPKind', 'MoEConfig', 'ModelConfig', 'NormKind',
        'NormPlacement', 'Optimizer', 'OptimizerImpl', 'ParallelConfig', 'ParamCounts', 'PipelineSchedule',
        'PositionEmbedding', 'Precision', 'QKNormScope', 'Recompute', 'RecomputeMethod', 'RecomputeModule',
        'RopeScaling',
        'TrainingConfig', 'count_parameters', 'default_batch', 'default_global_batch', 'global_batch_size',
        'layout_mask', 'num_microbatches', 'validate_layout',
    ],
    'frenzy_core.config.megatron': [
        'BERT_WORDPIECE_VOCAB_SIZE', 'GPT2_BPE_VOCAB_SIZE', 'MegatronArgs', 'MegatronJob', 'MegatronLaunch',
        'from_megatron_args', 'megatron_launch', 'megatron_padded_vocab_size', 'parse_megatron_args',
        'to_megatron_args',
    ],
    'frenzy_core.config.hf': [
        'FAMILIES', 'HFFamily', 'ModuleLayout', 'SUPPORTED_HF_FAMILIES', 'family', 'hf_family_of',
        'model_from_hf_config', 'module_layout', 'to_hf_config',
    ],
    'frenzy_core.hardware': [
        'Cluster', 'ClusterPreset', 'ClusterSummary', 'DEFAULT_PRESET', 'DTYPES', 'GPUSpec', 'LinkKind', 'Links',
        'Node', 'build_topology', 'cluster_preset_info', 'free_gpus_per_node', 'get_gpu_spec', 'gpu_ids',
        'link_domains', 'load_gpu_specs', 'normalize_gpu_name', 'scale_counts',
    ],
    'frenzy_core.memory': [
        'BatchEstimate', 'MEMORY_CATEGORIES', 'MemoryEstimate', 'OVERHEAD_CATEGORIES', 'StageMemory',
        'estimate_memory', 'estimate_memory_batch',
    ],
    'frenzy_core.planning': [
        'Alternative', 'AnalyticEstimator', 'BaselinePlan', 'LAUNCH_SCOPES', 'LaunchScope', 'LayoutEstimator',
        'Objective', 'PlacementMode', 'Plan', 'PlanConstraints', 'RejectReason', 'Rejection', 'SEARCHED_TRAINING_FIELDS',
        'SOLVERS', 'assess_baseline', 'marp_configs', 'marp_plan', 'plan_job', 'user_request_plan',
    ],
    'frenzy_core.plotting': [
        'PLOT_SUFFIXES', 'check_plot_path', 'memory_figure', 'plan_figure', 'plot_memory', 'plot_plan',
    ],
    'frenzy_core.scheduling': [
        'Action', 'CheckpointModel', 'ClusterState', 'DEFAULT_SIZE_BUCKETS', 'Event', 'FailureModel', 'GPUGroup',
        'GPURequest', 'JobRecord', 'JobStatus', 'LogNormalWork', 'MixEntry', 'OnError', 'OnlineScheduler', 'POLICIES',
        'Placement', 'PlannedThroughput', 'Policy', 'Preempt', 'Resize', 'RunLayout', 'RunningJob', 'SchedulerError',
        'SimulationResult', 'SizeBucket', 'SkippedRow', 'Start', 'ThroughputFn', 'TraceFormat', 'TraceJob',
        'TraceLoad', 'TraceWarning', 'TrainingJob', 'Utilisation', 'compare', 'get_policy', 'jobs_from_trace',
        'load_trace', 'plot_results', 'read_trace', 'replay', 'simulate', 'synthetic_jobs',
    ],
    'frenzy_core.scheduling.policies': [
        'FifoRequested', 'FrenzyCore', 'FrenzyHAS', 'GavelLike', 'POLICIES', 'SiaLike', 'get_policy',
    ],
    'frenzy_core.scheduling.traces': [
        'OnError', 'READERS', 'SkippedRow', 'TraceFormat', 'TraceJob', 'TraceLoad', 'TraceWarning', 'load_trace',
        'read_trace',
    ],
    'frenzy_core.timing': [
        'CalibrationResult', 'Measurement', 'TIME_CATEGORIES', 'TimeEstimate', 'TimeEstimateBatch', 'TimeModelParams',
        'calibrate', 'calibrate_by_gpu', 'default_time_model_params', 'estimate_iteration_time',
        'estimate_iteration_time_batch', 'load_time_model_params', 'training_flops',
    ],
}
