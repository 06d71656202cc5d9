"""Fuzzing every public entry point and the CLI with hostile input (issue 15): only the library's own errors
(``FrenzyError`` subclasses) escape, no numpy warning is raised, every number that comes out is finite and
non-negative, no accepted input is truncated or wrapped, and every call ends within a bound on CPU seconds (far
above its usual time: unbounded work, not speed, is what the bound catches).

CI runs ``FRENZY_FUZZ_EXAMPLES`` examples per entry point (default 20, derandomized: the same every run; the probe
a fifth of them). The campaigns of docs/benchmarks.md ("Hostile input (issue 15)") run more than 100 (10,000)
fresh random ones per entry point, the probe too, one test at a time:

    FRENZY_FUZZ_EXAMPLES=10000 nice -n 19 pytest -q -x --hypothesis-show-statistics tests/test_fuzz.py::test_traces
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import frenzy_core as f
from frenzy_core import _limits as limits
from frenzy_core.config.arrays import LAYOUT_COLUMNS
from frenzy_core.memory.probe import MAX_PROBE_STEPS
from frenzy_core.timing.calibrate import DEFAULT_FIT

EXAMPLES = int(os.environ.get("FRENZY_FUZZ_EXAMPLES", "20"))
CAMPAIGN = EXAMPLES > 100
"""More examples than CI's: a campaign, fresh random examples."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not CAMPAIGN,
                database=settings.default.database if CAMPAIGN else None, suppress_health_check=list(HealthCheck))
"""CI: a fixed set of examples (derandomized: the same every run); the campaign: fresh random ones, a failing one
kept in hypothesis' example database (``.hypothesis/``) so that the next run replays it first."""
HEAVY_FUZZ = settings(FUZZ, max_examples=EXAMPLES if CAMPAIGN else max(1, EXAMPLES // 4))
"""Entry points whose answers take up to seconds each (a plan, a CLI command, a fit, a figure): in CI a quarter of
the examples (CI's time is short), in a campaign all of them."""

FIXTURES = Path(__file__).parent / "fixtures"
ESTIMATE_BOUND_S = 20.0
"""Time bound of one estimate or file read (each takes milliseconds to a second)."""
PLAN_BOUND_S = 60.0
"""Time bound of one plan, simulation or CLI command (solver time limits of 1 s here; CP-SAT's threads count)."""
clock = time.process_time
"""The bounds are on CPU seconds, the work a call does: on a shared machine (the campaign ran at nice 19) a
process can wait tens of seconds for a core, which a wall clock would count against the call."""


@contextlib.contextmanager
def library_errors_only(bound_s: float = ESTIMATE_BOUND_S, bugs: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """The block may raise only FrenzyError subclasses other than ``bugs`` (library errors that report a bug of
    ours, never a refusal), no RuntimeWarning (numpy overflow, invalid value), and must finish within
    ``bound_s``."""
    began = clock()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            yield
        except bugs:
            raise
        except f.FrenzyError:
            pass
    assert clock() - began < bound_s, "unbounded work"


def call(fn: Callable[..., Any], *args: Any, bound_s: float = ESTIMATE_BOUND_S,
         bugs: tuple[type[Exception], ...] = (), **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` under :func:`library_errors_only`; None when it raised a library error (the
    outcome is a hypothesis event: ``--hypothesis-show-statistics`` shows how often each entry point answered)."""
    out = None
    with library_errors_only(bound_s, bugs):
        out = fn(*args, **kwargs)
    event(f"{getattr(fn, '__qualname__', fn)}: {'answered' if out is not None else 'refused'}")
    return out


def finite_numbers(value: Any, where: str = "result") -> None:
    """Every number inside ``value`` (dumped models, dicts, lists, arrays) is finite."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        for k, v in value.items():
            finite_numbers(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            finite_numbers(v, f"{where}[{i}]")
    elif isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
        assert np.isfinite(value).all(), where
    elif isinstance(value, float):
        assert math.isfinite(value), where


# ---------------------------------------------------------------------------------------------- strategies
EDGE_INTS = [0, 1, 2, 3, 7, 64, 2**14, 2**14 + 1, 2**20, 2**20 + 1, 2**25, 2**30, 2**31, 2**40, 2**46, 2**53,
             2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 10**30, -1, -(2**63), -(2**64)]
hostile_ints = st.one_of(st.integers(-3, 128), st.sampled_from(EDGE_INTS), st.integers(-(2**70), 2**70))
hostile_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
    [0.0, -0.0, 0.5, 1.0, 2.9, 1e-300, 5e-324, 1e300, 2.0**53, 2.0**63, 2.0**64, math.nan, math.inf, -math.inf]))
scalars = st.one_of(hostile_ints, hostile_floats, st.booleans(), st.none(), st.text(max_size=20),
                    st.sampled_from(["", "1", "2.0", "nan", "inf", "1e9", "-1", "gelu", "bf16", "full"]))
hostile = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                       max_leaves=8)
"""Any JSON-ish value: the numbers and strings that break things, nested a little."""


def mostly(valid: st.SearchStrategy[Any], bad: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[Any]:
    """``valid`` three times in four, else ``bad`` (default: any hostile value). A drawn branch index, not
    ``one_of(valid, valid, valid, bad)``: hypothesis drew that one's ``bad`` in two to three of four examples
    (66 % and 73 % of 400, measured)."""
    other = bad if bad is not None else hostile
    return st.integers(0, 3).flatmap(lambda i: other if i == 3 else valid)


def arguments(*pairs: tuple[st.SearchStrategy[Any], st.SearchStrategy[Any] | None]) -> st.SearchStrategy[tuple[Any, ...]]:
    """One value per (valid, bad) pair: all valid three times in four, else each from :func:`mostly`. Drawn with
    ``mostly`` one by one, n arguments would all be valid only (3/4)^n of the time (under 30 % from five on)."""
    return mostly(st.tuples(*(valid for valid, _ in pairs)), st.tuples(*(mostly(v, b) for v, b in pairs)))


def wide_ints(low: int, high: int) -> st.SearchStrategy[int]:
    """Log-uniform-ish integers from ``low`` to ``high`` (both ends and the powers of two between included)."""
    powers = [2**k for k in range(max(low, 1).bit_length() - 1, high.bit_length()) if low <= 2**k <= high]
    return st.one_of(st.integers(low, min(high, 64)), st.sampled_from(powers or [low]), st.integers(low, high))


seeds = mostly(st.integers(0, 2**63 - 1))
"""Any seed the library takes (0 to 2^63 - 1) three times in four, else a hostile value."""


def json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True, default=str)


@contextlib.contextmanager
def scratch_folder(name: str) -> Iterator[Path]:
    """An empty folder of this process named ``name``, removed with what the block wrote into it."""
    folder = Path(f"/tmp/frenzy-fuzz-{os.getpid()}-{name}")
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@contextlib.contextmanager
def scratch_file(name: str, data: bytes | str) -> Iterator[Path]:
    """``data`` written to a file named ``name`` (str as UTF-8, lone surrogates kept) in a scratch folder."""
    with scratch_folder("files") as folder:
        path = folder / name
        path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        yield path


# ---------------------------------------------------------------------------------------------- configs
MODEL_FIELDS = [n for n in f.ModelConfig.model_fields if n != "name"]
TRAINING_FIELDS = list(f.TrainingConfig.model_fields)
PARALLEL_FIELDS = list(f.ParallelConfig.model_fields)
GPT2 = f.ModelConfig.preset("gpt2").model_dump()


MODEL_POOL = [f.ModelConfig.preset(n).model_dump() for n in f.ModelConfig.presets()]
TRAINING_POOL = [f.TrainingConfig(**kw).model_dump() for kw in (
    {}, {"seq_len": 4096, "micro_batch_size": 2, "global_batch_size": 64}, {"precision": "fp32", "attention": "eager"},
    {"precision": "fp16-mixed", "recompute": "selective"}, {"recompute": "full", "recompute_method": "block",
                                                            "recompute_num_layers": 2},
    {"zero_stage": 3, "optimizer": "sgd"}, {"framework": "megatron", "sequence_parallel": True,
                                            "distributed_optimizer": True},
    {"precision": "fp8-mixed", "compile": True}, {"lora": {"rank": 16}, "seq_len": 512},
    {"offload_optimizer": "cpu", "zero_stage": 2})]
PARALLEL_POOL = [f.ParallelConfig(**kw).model_dump() for kw in (
    {}, {"dp": 8, "tp": 2}, {"pp": 4, "vpp": 2, "schedule": "interleaved"}, {"cp": 2, "dp": 4},
    {"ep": 2, "dp": 2}, {"pp": 2, "schedule": "gpipe"}, {"tp": 8, "pp": 8, "dp": 16})]
"""Valid values of every field: the presets' models, and recipes and layouts that exercise each field."""


def fields_of(names: list[str], pool: list[dict[str, Any]], most: int) -> st.SearchStrategy[dict[str, Any]]:
    """Up to ``most`` of the ``names`` fields, each a valid value (one a pool config holds; every field is in
    one) three times in four, else a hostile one."""
    return st.lists(st.sampled_from(names), max_size=most, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: mostly(st.sampled_from([c[k] for c in pool if k in c])) for k in keys}))


@FUZZ
@given(fields_of(MODEL_FIELDS, MODEL_POOL, 3), fields_of(TRAINING_FIELDS, TRAINING_POOL, 2),
       fields_of(PARALLEL_FIELDS, PARALLEL_POOL, 2))
def test_configs_refuse_hostile_fields_with_config_error(model: dict[str, Any], training: dict[str, Any],
                                                         parallel: dict[str, Any]) -> None:
    call(f.ModelConfig, **{**GPT2, **model})
    call(f.TrainingConfig, **training)
    call(f.ParallelConfig, **parallel)
    call(f.ModelConfig.model_validate_json, json_text({**GPT2, **model}))


SIZES = {"num_layers": (1, 2**15), "hidden_size": (1, 2**19), "num_attention_heads": (1, 2**15),
         "vocab_size": (1, 2**23), "ffn_hidden_size": (1, 2**21), "max_position_embeddings": (1, 2**32)}
TRAINING_SIZES = {"seq_len": (1, 2**26), "micro_batch_size": (1, 2**21), "global_batch_size": (1, 2**31)}
DEGREES = {"dp": (1, 2**21), "tp": (1, 2**10), "pp": (1, 2**10), "cp": (1, 2**10)}


@st.composite
def wide_model(draw: st.DrawFn) -> dict[str, Any]:
    """A decoder whose sizes range from 1 to beyond the bounds (most combinations are refused)."""
    fields = {k: draw(wide_ints(*r)) for k, r in SIZES.items() if draw(st.booleans())}
    heads = fields.get("num_attention_heads", 12)
    fields.setdefault("hidden_size", heads * draw(st.sampled_from([8, 64, 128])))
    moe = draw(st.none() | st.fixed_dictionaries({
        "num_experts": wide_ints(2, 2**15), "top_k": st.integers(1, 2), "expert_ffn_hidden_size": wide_ints(1, 2**21),
        "layer_interval": st.integers(1, 3), "first_dense_layers": st.integers(0, 2)}))
    return {**GPT2, "position_embedding": draw(st.sampled_from(["rotary", "learned"])), "moe": moe,
            "ffn_hidden_size": 0, "num_kv_heads": 0, "head_dim": 0, **fields}


@st.composite
def wide_training(draw: st.DrawFn) -> dict[str, Any]:
    fields = {k: draw(wide_ints(*r)) for k, r in TRAINING_SIZES.items() if draw(st.booleans())}
    fields.update(recompute=draw(st.sampled_from(["none", "selective", "full"])),
                  attention=draw(st.sampled_from(["eager", "sdpa", "flash"])),
                  precision=draw(st.sampled_from(["fp32", "amp-bf16", "bf16-mixed", "fp8-mixed"])),
                  framework=draw(st.sampled_from(["torch", "megatron"])),
                  recompute_method=draw(st.sampled_from(["uniform", "block"])),
                  zero_stage=draw(st.integers(0, 3)))
    return fields


@st.composite
def wide_parallel(draw: st.DrawFn) -> dict[str, Any]:
    fields = {k: draw(wide_ints(*r)) for k, r in DEGREES.items() if draw(st.booleans())}
    fields["schedule"] = draw(st.sampled_from(["1f1b", "gpipe"]))
    return fields


@st.composite
def realistic_configs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A preset model (its layer count kept or cut), a recipe of whole micro-batches at 128 to 512 tokens (every
    preset's context holds them) and a layout of the degrees real jobs use (cp with Megatron only, torch's is not
    modelled; torch's tp > 1 with sequence parallelism, as the memory model covers it): mostly answered, some
    refused (a tp that does not divide the key/value heads, a model sequence parallelism does not cover)."""
    model = draw(st.sampled_from(MODEL_POOL))
    model = {**model, "num_layers": draw(st.sampled_from([4, 8, model["num_layers"]]))}
    mbs = draw(st.integers(1, 4))
    training = {**draw(wide_training()), "seq_len": draw(st.sampled_from([128, 256, 512])),
                "micro_batch_size": mbs, "global_batch_size": mbs * 64 * draw(st.integers(1, 2))}
    parallel = {"dp": draw(st.sampled_from([1, 2, 4, 8])), "tp": draw(st.sampled_from([1, 1, 2, 4])),
                "pp": draw(st.sampled_from([1, 2, 4])), "schedule": draw(st.sampled_from(["1f1b", "gpipe"])),
                "cp": 2 if training["framework"] == "megatron" and draw(st.booleans()) else 1}
    training["sequence_parallel"] = parallel["tp"] > 1 and (training["framework"] == "torch" or draw(st.booleans()))
    return model, training, parallel


sized_configs = mostly(realistic_configs(), st.tuples(wide_model(), wide_training(), wide_parallel()))
"""Realistic configs three times in four (answers), else sizes from 1 to beyond the bounds (mostly refused)."""


def build(model: dict[str, Any], training: dict[str, Any], parallel: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    configs = None
    with library_errors_only():
        configs = (f.ModelConfig(**model), f.TrainingConfig(**training), f.ParallelConfig(**parallel))
    return configs


def check_memory(est: f.MemoryEstimate) -> None:
    for stage in est.stages:
        assert all(0 <= v < 2**62 for v in stage.breakdown.values()), stage.breakdown
        assert sum(stage.breakdown.values()) == stage.peak_bytes
        assert stage.peak_bytes <= stage.device_bytes < 2**62
        assert math.isfinite(stage.inflight_microbatches) and stage.num_params >= 0


@FUZZ
@given(sized_configs)
def test_estimate_memory_is_finite_or_refused(fields: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    configs = build(*fields)
    if configs is None:
        return
    est = call(f.estimate_memory, *configs)
    if est is not None:
        check_memory(est)


@FUZZ
@given(sized_configs, st.sampled_from(["vocab_size", "num_layers", "hidden_size"]),
       st.sampled_from(["seq_len", "micro_batch_size"]))
def test_estimates_grow_with_sizes_up_to_the_bounds(fields: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
                                                    size: str, tokens: str) -> None:
    """No estimate comes from a wrapped number: doubling a size (or the tokens) never gives fewer bytes, at every
    magnitude the bounds let through (a wrap would make the larger estimate small or negative)."""
    base = build(fields[0], fields[1], {})
    if base is None:
        return
    small = call(f.estimate_memory, *base)
    if small is None:
        return
    m, t, p = base
    bigger_model = call(m.replace, **{size: getattr(m, size) * 2})
    bigger_training = call(t.replace, **{tokens: getattr(t, tokens) * 2})
    for mm, tt in ((bigger_model, t), (m, bigger_training)):
        big = None if mm is None or tt is None else call(f.estimate_memory, mm, tt, p)
        if big is not None:
            check_memory(big)
            assert big.peak_bytes >= small.peak_bytes


column_values = st.one_of(hostile, st.lists(st.one_of(hostile_ints, hostile_floats, st.booleans()), min_size=0,
                                            max_size=5),
                          st.builds(np.array, st.lists(hostile_ints.filter(lambda x: abs(x) < 2**63), min_size=1,
                                                       max_size=4)),
                          st.builds(lambda xs: np.array(xs, dtype=np.float64),
                                    st.lists(hostile_floats, min_size=1, max_size=4)))


COLUMN_VALUES: dict[str, list[Any]] = {
    "dp": [1, 2, 4, 8], "tp": [1, 2, 4], "pp": [1, 2, 4], "micro_batch_size": [1, 2], "global_batch_size": [64, 128],
    "num_microbatches": [1, 2, 8], "seq_len": [512, 1024, 2048], "zero_stage": [0, 1, 2, 3],
    "recompute": ["none", "selective", "full", 0, 2], "sequence_parallel": [0, 1], "schedule": ["1f1b", "gpipe"]}
"""Values each column takes for Llama 2 7B (32 layers and heads, 4,096 positions)."""


@st.composite
def valid_columns(draw: st.DrawFn) -> dict[str, Any]:
    """Up to three columns of one to six rows, each a list, an int64 array or one value for every row."""
    rows = draw(st.integers(1, 6))
    names = draw(st.lists(st.sampled_from(sorted(COLUMN_VALUES)), max_size=3, unique=True).filter(
        lambda n: not {"num_microbatches", "global_batch_size"} <= set(n)))
    columns: dict[str, Any] = {}
    for name in names:
        values = draw(st.lists(st.sampled_from(COLUMN_VALUES[name]), min_size=rows, max_size=rows))
        form = draw(st.sampled_from(["list", "array", "one"]))
        ints = all(type(v) is int for v in values)
        columns[name] = values[0] if form == "one" else np.array(values) if form == "array" and ints else values
    return columns


realistic_training = st.tuples(wide_training(), st.sampled_from([512, 1024, 2048])).map(
    lambda p: {**p[0], "seq_len": p[1], "micro_batch_size": 1, "global_batch_size": 64, "sequence_parallel": True})
"""A recipe of every kind at sizes Llama 2 7B trains with (the columns vary them; sequence parallelism on, which
torch's tp > 1 needs)."""


@FUZZ
@given(mostly(st.tuples(valid_columns(), realistic_training),
              st.tuples(st.dictionaries(st.sampled_from([*LAYOUT_COLUMNS, "num_microbatches", "bogus"]),
                                        column_values, max_size=3), wide_training())))
def test_batch_estimators_refuse_or_take_columns_exactly(drawn: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Columns are taken exactly (never truncated or wrapped) or refused; valid rows are finite, equal to the
    scalar estimate of their own configs; invalid ones hold -1."""
    columns, training = drawn
    t = call(f.TrainingConfig, **training)
    if t is None:
        return
    model = f.ModelConfig.preset("llama-2-7b")
    lay = call(f.LayoutArrays.from_columns, columns, t)
    if lay is None:
        return
    for name, given_values in columns.items():
        if name in LAYOUT_COLUMNS and name not in ("recompute", "schedule"):
            exact = np.asarray(given_values, dtype=object) if np.asarray(given_values).dtype.kind == "O" \
                else np.asarray(given_values)
            assert (np.broadcast_to(getattr(lay, name), lay.shape) == np.broadcast_to(exact, lay.shape)).all()
    est = call(f.estimate_memory_batch, model, lay, t)
    if est is None:
        return
    assert ((est.peak_bytes >= 0) == est.valid).all() and (est.device_bytes[~est.valid] == -1).all()
    valid = np.flatnonzero(np.atleast_1d(est.valid).ravel())
    if valid.size:
        flat, i = lay.flat(), int(valid[0])
        scalar = call(f.estimate_memory, model, flat.training(i, t), flat.parallel(i))
        assert scalar is not None and scalar.device_bytes == int(np.atleast_1d(est.device_bytes).ravel()[i])
    times = call(f.estimate_iteration_time_batch, model, t, "h100", lay)
    if times is not None:
        finite_numbers(times.iteration_s)
        assert (times.iteration_s > 0).all()


@FUZZ
@given(sized_configs, st.sampled_from(["h100", "a100", "v100", "t4", "mi300x"]))
def test_estimate_iteration_time_is_finite_or_refused(fields: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
                                                      gpu: str) -> None:
    configs = build(*fields)
    if configs is None:
        return
    est = call(f.estimate_iteration_time, *configs, gpu)
    if est is not None:
        finite_numbers(est)
        assert est.iteration_s > 0 and all(v >= 0 for v in est.breakdown.values())


# ---------------------------------------------------------------------------------------------- files
HF_FIXTURES = sorted((FIXTURES / "hf_configs").glob("*.json"))


HF_POOL = [json.loads(p.read_text()) for p in HF_FIXTURES]
"""Every fixture config: the valid values of each key, from configs of its own family and others."""


@FUZZ
@given(st.sampled_from(HF_FIXTURES), mostly(st.just({}), st.dictionaries(st.text(max_size=30), hostile, min_size=1,
                                                                          max_size=3)), st.data())
def test_hugging_face_configs_with_hostile_values(fixture: Path, extra: dict[str, Any], data: st.DataObject) -> None:
    """A fixture config with up to three keys changed (to another fixture's value of that key three times in
    four, else a hostile one) and hostile keys added one time in four."""
    config = json.loads(fixture.read_text())
    keys = data.draw(st.lists(st.sampled_from(sorted(config)), max_size=3))
    config.update({k: data.draw(mostly(st.sampled_from([c[k] for c in HF_POOL if k in c]))) for k in keys})
    config.update(extra)
    model = call(f.ModelConfig.from_hf_config, config)
    if model is not None:
        finite_numbers(model)
    with scratch_file("values.json", json_text(config)) as path:  # NaN / Infinity written as JSON allows not
        from_file = call(f.ModelConfig.from_hf_config, path)
    if from_file is not None and model is not None:
        assert from_file.replace(name=model.name) == model


same_json_bytes = st.tuples(st.booleans(), st.sampled_from([None, 0, 2, 4]), st.booleans(), st.booleans(),
                            st.sampled_from([b"", b"\n", b"  \n"]))
"""How a tool may write the same JSON: a byte-order mark, indent, escaped or raw non-ASCII, CRLF line ends,
trailing white space."""
hostile_bytes = st.tuples(st.binary(max_size=64), st.integers(0, 10**6), st.booleans())
"""Junk bytes written into the file at any place, inserted or over what was there."""


@FUZZ
@given(st.sampled_from(HF_FIXTURES), mostly(same_json_bytes, hostile_bytes))
def test_hugging_face_files_with_hostile_bytes(fixture: Path, change: tuple[Any, ...]) -> None:
    """A fixture's config.json with junk bytes one time in four (a library error or a config), else written as
    another tool writes the same JSON: then the same config as the fixture's."""
    text = fixture.read_bytes()
    if len(change) == 3:
        junk, where, replace = change
        cut = where % (len(text) + 1)
        data = text[:cut] + junk + (text[cut + len(junk):] if replace else text[cut:])
    else:
        bom, indent, ascii_only, crlf, tail = change
        body = json.dumps(json.loads(text), indent=indent, ensure_ascii=ascii_only).encode()
        data = b"\xef\xbb\xbf" * bom + (body.replace(b"\n", b"\r\n") if crlf else body) + tail
    with scratch_file("config.json", data) as path:
        model = call(f.ModelConfig.from_hf_config, path)
    if len(change) == 5:
        assert model is not None and model == f.ModelConfig.from_hf_config(fixture).replace(name=model.name)


YAML_PIECES = ["nodes:", " - ", "{gpu: a100, gpus_per_node: 8, count: 2}", "{gpu: h100, gpus_per_node: 8}",
               "&a ", "*a", "[*a, *a, *a]", "gpu: ", "gpus_per_node: ", "count: ", "free_gpus: ", "a100", "h100",
               "1e9", "-1", ".nan", ".inf", "0x10", "null", "~", "!!python/object:os.system", "!!binary aGk=",
               "<<: *a", "'", '"', "{", "}", "[", "]", ": ", "\n", "\t", "  ", "2024-01-01", "yes", "3: 4",
               "? [1, 2]\n: x", "---", "...", "%YAML 1.1", "\x00", "\ufeff", "intra_node_bytes_per_s: 1e-300"]


def _nodes(gpu: st.SearchStrategy[Any], size: st.SearchStrategy[Any], count: st.SearchStrategy[Any],
           free: st.SearchStrategy[Any], link: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.lists(st.fixed_dictionaries({"gpu": gpu, "gpus_per_node": size, "count": count},
                                          optional={"free_gpus": free, "inter_node_bytes_per_s": link}),
                    min_size=1, max_size=3).map(lambda nodes: {"nodes": nodes})


valid_clusters = _nodes(st.sampled_from(["a100", "h100", "rtx-3090", "v100"]), st.sampled_from([1, 2, 4, 8]),
                        st.integers(1, 3), st.just(1), st.sampled_from([1e9, 1e10]))
"""Clusters of one to three node shapes, each of one to three nodes, all free or one GPU free per node."""
small_clusters = mostly(
    valid_clusters,
    _nodes(mostly(st.sampled_from(["a100", "t4"]), st.sampled_from(["x", "", 3])), mostly(st.just(8), hostile_ints),
           mostly(st.just(1), hostile_ints), hostile_ints, hostile_floats))
"""Clusters of a few node shapes: valid three times in four, else with hostile values."""


@FUZZ
@given(small_clusters, mostly(st.just([]), st.lists(st.tuples(st.integers(0, 10**4), st.sampled_from(YAML_PIECES)
                                                              | st.text(max_size=8)), min_size=1, max_size=2)),
       mostly(st.sampled_from([1, 2, 4, 8]), hostile))
def test_cluster_yaml_and_dicts(cluster: dict[str, Any], edits: list[tuple[int, str]], value: Any) -> None:
    text = yaml.safe_dump(json.loads(json_text(cluster)))
    for where, piece in edits:  # a valid document with a few pieces of YAML put in anywhere
        cut = where % (len(text) + 1)
        text = text[:cut] + piece + text[cut:]
    built = call(f.Cluster.from_yaml, text)
    if built is not None:
        assert 0 < built.total_gpus <= limits.GPUS.high and built.num_nodes <= limits.NODES.high
        assert f.Cluster.from_dict(built.to_dict()) == built
    call(f.Cluster.from_dict, {"nodes": [{"gpu": "a100", "gpus_per_node": value}]})
    call(f.Cluster.from_dict, {"nodes": value})
    call(f.Cluster.from_dict, value)


H100 = yaml.safe_load((Path(f.__file__).parent / "data" / "gpu_specs" / "h100-sxm.yaml").read_text())


GPU_POOL = [yaml.safe_load(p.read_text()) for p in sorted((Path(f.__file__).parent / "data" / "gpu_specs").glob("*.yaml"))]
"""Every packaged GPU spec: a valid value of each field."""
GPU_SPEC_KEYS = sorted(k for k in H100 if k not in ("id", "name", "aliases"))
gpu_overrides = mostly(fields_of(GPU_SPEC_KEYS, GPU_POOL, 2).map(lambda d: {k: v for k, v in d.items()
                                                                           if k != "sources"}), hostile)
"""Field values an override sets (a dict of valid ones three times in four, else any hostile value)."""


@FUZZ
@given(fields_of(sorted(H100), GPU_POOL, 3), gpu_overrides, st.sampled_from(["h100", "a100", "nope", "H100 80GB HBM3"]))
def test_gpu_spec_files_and_overrides(changes: dict[str, Any], override: Any, name: str) -> None:
    spec = {**H100, "id": "fuzz-gpu", "name": "Fuzz", "aliases": ["fuzz"], **changes}
    with scratch_file("fuzz-gpu.yaml", yaml.safe_dump(json.loads(json_text(spec)))) as path:
        specs = call(f.load_gpu_specs, path.parent)
    if specs is not None:
        assert all(k == s.id for k, s in specs.items())
        finite_numbers(specs)
    specs = call(f.load_gpu_specs, overrides={name: override})
    if specs is not None:
        assert all(k == s.id for k, s in specs.items())
    call(f.load_gpu_specs, overrides={name: {"aliases": override, "memory_bytes": override}})


TRACE_FORMATS = {"philly": "timestamp,duration,num_gpus,gpu_time,cluster",
                 "sia": "name,time,application,num_replicas,batch_size",
                 "helios": "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,"
                           "queue",
                 "alibaba-spot": "job_name,organization,gpu_model,cpu_request,gpu_request,worker_num,submit_time,"
                                 "duration,job_type"}
cells = st.one_of(st.sampled_from(["1", "8", "0", "-1", "1e9", "1e400", "nan", "inf", "2.5", "", "x", "9" * 5000,
                                   "2017-10-03 00:00:00", "2017-13-45 99:99:99", "A100", "\"", "a,b", "\x00"]),
                  st.text(max_size=8), st.integers(-(2**70), 2**70).map(str))


TRACE_KINDS = {"csv": ".csv", "gz": ".csv.gz", "gz-truncated": ".csv.gz", "json": ".json", "json-gz": ".json.gz"}
"""The file a trace's rows are written as: CSV (the traces' format), gzipped, a gzip cut in half, or the rows as a
JSON list of objects (a converted trace handed in as is), plain or gzipped."""


def _clock(second: int, day: str) -> str:
    return f"{day} {second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"


@st.composite
def trace_row(draw: st.DrawFn, fmt: str) -> list[str]:
    """A row of ``fmt`` as the real trace writes one (the values of tests/test_traces.py's snippets)."""
    gpus, second, duration = draw(st.integers(1, 64)), draw(st.integers(0, 86_000)), draw(st.integers(1, 10**5))
    if fmt == "philly":
        return [_clock(second, "2017-10-03"), f"{duration}.0", str(gpus), str(gpus * duration),
                draw(st.sampled_from(["vcA", "vcB"]))]
    if fmt == "sia":
        app = draw(st.sampled_from(["cifar10", "bert", "imagenet", "deepspeech2", "yolov3", "ncf"]))
        return [f"{app}-{second}", str(second), app, str(gpus), str(draw(st.sampled_from([12, 256, 2048])))]
    if fmt == "helios":
        return [f"j{second}", "u1", "vcX", str(gpus), "32", str(max(1, gpus // 8)), draw(st.sampled_from(
            ["COMPLETED", "FAILED", "CANCELLED"])), _clock(second, "2020-04-01"), _clock(second + 5, "2020-04-01"),
            _clock(min(second + 5 + duration, 86_399), "2020-04-01"), str(duration), "5"]
    return [str(second), "57", draw(st.sampled_from(["A100-SXM4-80GB", "A10", "GPU-series-1"])), "15",
            draw(st.sampled_from(["1", "0.5", "2"])), str(gpus), str(second), str(duration),
            draw(st.sampled_from(["Spot", "HP"]))]


@st.composite
def trace_files(draw: st.DrawFn) -> tuple[str, list[list[str]], bytes, str, str]:
    """A trace's format, rows, bytes appended, error policy and file kind: three times in four a readable file
    of rows as the trace writes them (any policy), else rows of hostile cells, junk bytes, any kind."""
    fmt = draw(st.sampled_from(sorted(TRACE_FORMATS)))
    if draw(st.integers(0, 3)) < 3:
        return (fmt, draw(st.lists(trace_row(fmt), min_size=1, max_size=6)), b"", draw(st.sampled_from(["skip", "fail"])),
                draw(st.sampled_from(["csv", "gz", "json", "json-gz"])))
    return (fmt, draw(st.lists(st.lists(cells, min_size=3, max_size=12), max_size=6)), draw(st.binary(max_size=16)),
            draw(st.sampled_from(["skip", "fail"])), draw(st.sampled_from(sorted(TRACE_KINDS))))


trace_options = arguments((st.sampled_from([None, 1, 0.5, 3]), None),
                          (st.sampled_from([None, (0, 1e9), (0, 3600)]), st.just((5, 1)) | hostile),
                          (st.floats(0.01, 100.0), None), (st.integers(0, 2**63 - 1), None))
"""sample, time_window, arrival_scale and seed."""


@FUZZ
@given(trace_files(), trace_options)
def test_traces(file: tuple[str, list[list[str]], bytes, str, str], options: tuple[Any, Any, Any, Any]) -> None:
    fmt, rows, junk, on_error, kind = file
    sample, window, arrival_scale, seed = options
    if kind.startswith("json"):
        text = json_text([dict(zip(TRACE_FORMATS[fmt].split(","), r)) for r in rows])
    else:
        text = TRACE_FORMATS[fmt] + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    data = text.encode("utf-8", "surrogatepass") + junk
    if kind.endswith(("gz", "gz-truncated")):
        data = gzip.compress(data)
        data = data[: len(data) // 2] if kind == "gz-truncated" else data
    with scratch_file(f"trace{TRACE_KINDS[kind]}", data) as path:
        options = {"on_error": on_error, "sample": sample, "time_window": window, "arrival_scale": arrival_scale,
                   "seed": seed}
        load = call(f.read_trace, path, fmt, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", f.scheduling.TraceWarning)  # skipped rows, as read_trace lists them
            jobs = call(f.load_trace, path, fmt, **options)
        assert (jobs is None) == (load is None) and (load is None or jobs == load.jobs)
        if load is not None:
            finite_numbers(load)
            assert load.rows_read >= len(load.jobs) + len(load.skipped) - 0
            assert all(j.num_gpus <= limits.GPUS.high for j in load.jobs)
            if load.jobs:
                jobs = call(f.jobs_from_trace, load.jobs[:3], cluster=f.Cluster.preset("frenzy-paper"),
                            default_duration_s=600.0, bound_s=PLAN_BOUND_S)
                if jobs is not None:
                    finite_numbers(jobs)


# ---------------------------------------------------------------------------------------------- planning, scheduling
CONSTRAINT_FIELDS = list(f.PlanConstraints.model_fields)


@HEAVY_FUZZ
@given(st.sampled_from(["gpt2", "qwen2.5-0.5b", "gpt2-medium", "llama-2-7b", "mixtral-8x7b"]),
       arguments((valid_clusters, small_clusters),
                 (st.just({}), st.dictionaries(st.sampled_from(CONSTRAINT_FIELDS), hostile | st.integers(1, 16),
                                               max_size=2)),
                 (st.sampled_from(["throughput", "gpus"]), st.sampled_from(["cost", "time_to_train", "x", 3])),
                 (st.fixed_dictionaries({"seq_len": st.sampled_from([256, 512, 1024])}), wide_training()),
                 (st.floats(0.2, 1.0), hostile_floats), (st.integers(1, 8), hostile_ints)))
def test_plan_job(preset: str, args: tuple[Any, ...]) -> None:
    cluster, constraints, objective, training, time_limit, top_k = args
    built = call(f.Cluster.from_dict, cluster)
    t = call(f.TrainingConfig, **training)
    if built is None or t is None:
        return
    model = f.ModelConfig.preset(preset)
    limit = time_limit if isinstance(time_limit, float) and 0 < time_limit < 2 else 1.0
    plan = call(f.plan_job, model, built, t, objective=objective, constraints=constraints, time_limit_s=limit,
                top_k=top_k, bound_s=PLAN_BOUND_S)
    if plan is None:
        return
    finite_numbers(plan)
    for stage in plan.stages:  # each group (type, micro-batch count) re-estimated from the plan alone
        again = f.estimate_memory(model, plan.stage_training(stage), plan.parallel)
        assert again.device_bytes == stage.device_bytes <= stage.usable_bytes


def _jobs(n: int, work: Any, submit: Any) -> list[Any]:
    model = f.ModelConfig.preset("gpt2")
    return [f.TrainingJob(id=f"j{i}", submit_time_s=submit, model=model, training=f.TrainingConfig(seq_len=512),
                          work_tokens=work) for i in range(n)]


@FUZZ
@given(st.integers(0, 3), mostly(wide_ints(1, 2**40), hostile_ints), mostly(st.floats(0, 1e6), hostile_floats),
       st.sampled_from(["fifo-requested", "frenzy-core", "sia-like", "nope"]), seeds,
       st.sampled_from(["frenzy-paper", "philly-like"]))
def test_simulate(n: int, work: Any, submit: Any, policy: str, seed: Any, cluster: str) -> None:
    jobs = call(_jobs, n, work, submit)
    if jobs is None:
        return
    result = call(f.simulate, jobs, f.Cluster.preset(cluster), policy, seed=seed, progress=False,
                  bound_s=PLAN_BOUND_S, bugs=(f.scheduling.SchedulerError,))  # a policy's placement the check refuses
    if result is not None:
        finite_numbers(result.model_dump(exclude={"utilisation"}))
        assert all(r.submit_time_s >= 0 for r in result.jobs)
        call(f.compare, [result])


JOB_FIELDS = {"id": mostly(st.text(min_size=1, max_size=12), hostile), "submit_time_s": mostly(st.floats(0, 1e6), hostile),
              "request": mostly(st.none() | st.fixed_dictionaries(
                  {"num_gpus": mostly(st.integers(1, 64), hostile)},
                  optional={"gpu_type": mostly(st.sampled_from(["h100", "a100", "A100-SXM4-80GB", None]), hostile)})),
              "deadline_s": mostly(st.none() | st.floats(1e6, 1e9), hostile), "priority": mostly(st.integers(-99, 99))}
job_work = mostly(st.one_of(st.fixed_dictionaries({"work_tokens": st.integers(1, 2**50)}),
                            st.fixed_dictionaries({"work_iterations": st.integers(1, 2**40)})),
                  st.fixed_dictionaries({}, optional={"work_tokens": hostile, "work_iterations": hostile}))
VALID_JOB_FIELDS = {"id": st.text(min_size=1, max_size=12), "submit_time_s": st.floats(0, 1e6),
                    "request": st.none() | st.fixed_dictionaries({"num_gpus": st.integers(1, 64)}, optional={
                        "gpu_type": st.sampled_from(["h100", "a100", "A100-SXM4-80GB", None])}),
                    "deadline_s": st.none() | st.floats(1e6, 1e9), "priority": st.integers(-99, 99)}
valid_job_work = st.one_of(st.fixed_dictionaries({"work_tokens": st.integers(1, 2**50)}),
                           st.fixed_dictionaries({"work_iterations": st.integers(1, 2**40)}))
training_jobs = mostly(
    st.tuples(st.fixed_dictionaries({}, optional=VALID_JOB_FIELDS), valid_job_work),
    st.tuples(st.fixed_dictionaries({}, optional=JOB_FIELDS), job_work)).map(lambda p: {**p[0], **p[1]})
"""The fields of a TrainingJob (gpt2, 64 samples of 512 tokens): all valid three times in four, else each valid
three times in four. Valid values range widely: hypothesis does not repeat an example, so a valid choice of two
values would almost never be drawn again."""


@FUZZ
@given(training_jobs, st.booleans())
def test_training_jobs(fields: dict[str, Any], as_json: bool) -> None:
    """A TrainingJob of hostile fields (from keywords or JSON) or a library error; an accepted job round-trips and
    its numbers are finite."""
    full = {"id": "a", "submit_time_s": 0.0, "model": f.ModelConfig.preset("gpt2"),
            "training": f.TrainingConfig(seq_len=512, global_batch_size=64), **fields}
    if as_json:
        text = json_text({**full, "model": full["model"].model_dump(), "training": full["training"].model_dump()})
        job = call(f.TrainingJob.model_validate_json, text)
    else:
        job = call(f.TrainingJob, **full)
    if job is not None:
        finite_numbers(job)
        assert f.TrainingJob.model_validate_json(job.model_dump_json()) == job


@FUZZ
@given(arguments((st.integers(0, 20), hostile_ints.filter(lambda n: not 50 < n <= 2**20)), (st.floats(1e-3, 10), None),
                 (st.dictionaries(st.sampled_from(["gpt2", "llama-2-7b", "mixtral-8x7b"]), st.floats(1e-3, 10),
                                  min_size=1), st.dictionaries(st.text(max_size=12), hostile, max_size=2)),
                 (st.floats(1e6, 1e12), None), (st.floats(0, 10), None), (st.integers(0, 2**63 - 1), None)))
def test_synthetic_jobs(args: tuple[Any, ...]) -> None:
    n, rate, mix, median, sigma, seed = args
    work = call(f.scheduling.LogNormalWork, median_tokens=median, sigma=sigma)
    jobs = call(f.synthetic_jobs, n, arrival_rate_per_s=rate, model_mix=mix, work_distribution=work, seed=seed,
                bound_s=PLAN_BOUND_S)
    if jobs is not None:
        finite_numbers(jobs)


@FUZZ
@given(mostly(st.sampled_from(["h100", "gpt2", "frenzy-paper", "A100-SXM4-80GB", "llama-2-7b"]), hostile),
       mostly(st.integers(1, 10**4), hostile), mostly(st.floats(0, 1e6), hostile))
def test_names_and_presets(name: Any, scale: Any, other: Any) -> None:
    call(f.get_gpu_spec, name)
    call(f.ModelConfig.preset, name)
    call(f.Cluster.preset, name)
    call(f.Cluster.preset, "frenzy-paper", scale=scale)
    call(f.TrainingJob, id=name, submit_time_s=other, model=f.ModelConfig.preset("gpt2"),
         training=f.TrainingConfig(), work_tokens=scale)


MEGATRON_FLAGS = ["--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size",
                  "--global-batch-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                  "--vocab-size", "--ffn-hidden-size", "--bf16", "--swiglu", "--num-experts", "--recompute-granularity",
                  "--max-position-embeddings", "--num-query-groups", "--group-query-attention"]


MEGATRON_VALUES = {"--num-layers": ["1", "2", "4"], "--hidden-size": ["64", "128"],
                   "--num-attention-heads": ["1", "2", "4"], "--seq-length": ["64", "128"],
                   "--micro-batch-size": ["1", "2"], "--global-batch-size": ["8", "16"],
                   "--tensor-model-parallel-size": ["1", "2"], "--pipeline-model-parallel-size": ["1", "2"],
                   "--vocab-size": ["1000", "50257"], "--ffn-hidden-size": ["256", "512"], "--bf16": [],
                   "--swiglu": [], "--num-experts": ["2", "8"], "--recompute-granularity": ["full", "selective"],
                   "--max-position-embeddings": ["128", "4096"], "--num-query-groups": ["1", "2"],
                   "--group-query-attention": []}
"""What each flag takes on a real command line (a switch takes nothing)."""


@st.composite
def megatron_flag(draw: st.DrawFn) -> list[str]:
    """A flag with a value it takes three times in four, else with a hostile cell (a switch too)."""
    flag = draw(st.sampled_from(MEGATRON_FLAGS))
    values = MEGATRON_VALUES[flag]
    if draw(st.integers(0, 3)) < 3:
        return [flag, draw(st.sampled_from(values))] if values else [flag]
    return [flag, draw(cells)]


@FUZZ
@given(st.lists(megatron_flag(), max_size=3), mostly(st.sampled_from([1, 2, 8]), hostile_ints))
def test_megatron_command_lines(flags: list[list[str]], world_size: int) -> None:
    tokens = [t for flag in flags for t in flag]
    args = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "1", *tokens]
    configs = call(f.from_megatron_args, args, world_size)
    if configs is not None:
        call(f.to_megatron_args, *configs)
    call(f.parse_megatron_args, tokens, world_size)


# ---------------------------------------------------------------------------------------------- the CLI
def run_cli(args: list[str]) -> tuple[int, str, str]:
    """``frenzy ARGS`` in process as the console script runs it (``cli.app.capture``): (exit code, stdout,
    stderr). ``main`` returns the exit code rather than raising SystemExit."""
    from frenzy_core.cli.app import capture

    done = capture(args)
    return done.exit_code, done.stdout, done.stderr


CLI_OPTIONS = ["--seq-len", "--micro-batch", "--global-batch", "--tp", "--pp", "--dp", "--zero", "--precision",
               "--recompute", "--attention", "--cluster", "--gpu-types", "--max-gpus", "--tokens", "--objective",
               "--headroom", "--json", "--emit", "-o", "--time-limit", "--scale", "--gpu", "--seed", "--policies",
               "--format", "--on-error", "--sample", "--time-model", "--plot", "--model", "--keep-outputs", "--out"]
CLI_VALUES = ["1", "0", "-1", "2.9", "1e9", "1e400", "nan", "inf", "99999999999999999999999999", "a100", "h100",
              "frenzy-paper", "nope", "", "x=1", "script={a: &a [1,1], b: [*a,*a]}", "bf16", "full", "torchrun",
              "CLUSTER", "BOMB", "MODEL", "RUNS", "TM", "BADTM", "PNG", "\ud800.png", "\ud800.yaml", "a\x00b"]


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from hostile_cases import alias_bomb

    folder = tmp_path_factory.mktemp("cli")
    (folder / "cluster.yaml").write_text("nodes: [{gpu: a100, gpus_per_node: 8}]\n")
    (folder / "bomb.yaml").write_text(alias_bomb())
    (folder / "trace.csv").write_text("timestamp,duration,num_gpus,gpu_time,cluster\n1,600,1,600,vc\n2,60,2,120,vc\n")
    (folder / "config.json").write_text((FIXTURES / "hf_configs" / "llama.json").read_text())
    (folder / "runs.csv").write_text("model,gpu,dp,seq_len,global_batch_size,step_s\ngpt2,h100,8,1024,64,0.4\n")
    head = "format: frenzy-time-model/1\ngpus:\n  h100-sxm:\n    params: "
    (folder / "tm.yaml").write_text(head + "{matmul_efficiency: 0.6}\n")
    (folder / "bad-tm.yaml").write_text(head + "{matmul_efficiency: .nan}\n")
    return {"CLUSTER": str(folder / "cluster.yaml"), "BOMB": str(folder / "bomb.yaml"),
            "TRACE": str(folder / "trace.csv"), "MODEL": str(folder / "config.json"), "RUNS": str(folder / "runs.csv"),
            "TM": str(folder / "tm.yaml"), "BADTM": str(folder / "bad-tm.yaml"), "PNG": str(folder / "figure.png"),
            "HOME": str(folder)}


RECIPE_OPTIONS = {"--seq-len": ["512", "1024", "2048"], "--micro-batch": ["1", "2", "4"],
                  "--global-batch": ["8", "16", "64"], "--tp": ["1", "2"], "--pp": ["1", "2"],
                  "--precision": ["bf16-mixed", "fp16-mixed", "fp32"],
                  "--recompute": ["none", "selective", "full"], "--attention": ["flash", "sdpa", "eager"],
                  "--headroom": ["0.05", "0.2"], "--json": [], "--plot": ["PNG"]}
VALID_COMMANDS: dict[str, tuple[list[str], dict[str, list[str]]]] = {
    "plan": (["gpt2", "llama-2-7b", "MODEL"], {**RECIPE_OPTIONS, "--cluster": ["CLUSTER", "frenzy-paper"],
                                                "--max-gpus": ["8", "16", "64"], "--time-model": ["TM"],
                                                "--objective": ["throughput", "gpus", "cost"],
                                                "--emit": ["torchrun", "slurm", "kubernetes"]}),
    "memory": (["gpt2", "llama-2-7b", "MODEL"], {**RECIPE_OPTIONS, "--dp": ["1", "4"], "--zero": ["0", "1", "2", "3"]}),
    "simulate": (["TRACE"], {"--cluster": ["CLUSTER", "frenzy-paper"], "--policies": ["fifo-requested",
                                                                                     "frenzy-core"],
                             "--seed": ["0", "7"], "--on-error": ["skip", "fail"], "--limit": ["1", "2"],
                             "--format": ["philly"], "--json": [], "--plot": ["PNG"]}),
    "calibrate": (["RUNS"], {"--out": ["tm-out.yaml", "tm-out.json"], "--json": []}),
    "models": ([], {"--json": []}), "gpus": ([], {"--json": []}),
    "clusters": (["frenzy-paper", "CLUSTER"], {"--scale": ["2", "16"], "--json": []}),
}
"""Commands a user would type, each option one the command takes with a value it accepts (files named as in
:func:`cli_files`): the answers the CLI must give, beside the hostile commands below."""


@st.composite
def valid_cli_args(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(VALID_COMMANDS)))
    targets, options = VALID_COMMANDS[command]
    args = [command, *([draw(st.sampled_from(targets))] if targets else [])]
    for option in draw(st.lists(st.sampled_from(sorted(options)), max_size=3, unique=True)):
        args += [option, *([draw(st.sampled_from(options[option]))] if options[option] else [])]
    return args


hostile_cli_args = st.tuples(
    st.sampled_from(["plan", "memory", "simulate", "calibrate", "models", "gpus", "clusters", "nope"]),
    st.sampled_from(["gpt2", "llama-2-7b", "MODEL", "TRACE", "RUNS", "TM", "nope", "", "BOMB"]),
    st.lists(st.tuples(st.sampled_from(CLI_OPTIONS), st.sampled_from(CLI_VALUES) | st.text(max_size=6)),
             max_size=4),
).map(lambda c: [c[0], c[1], *(t for option, value in c[2] for t in (
    [option] if option in ("--json", "--keep-outputs") else [option, value]))])
"""Any command, target and options, with values that break things."""


@HEAVY_FUZZ
@given(mostly(valid_cli_args(), hostile_cli_args))
def test_cli_prints_one_line_per_error_and_no_traceback(cli_files: dict[str, str], words: list[str]) -> None:
    args = [cli_files.get(w, w) for w in words]
    command = args[0]
    if command == "plan" and "--time-limit" not in args:
        args += ["--time-limit", "1"]
    if command == "simulate" and "--policies" not in args:
        args += ["--policies", "fifo-requested"]
    began = clock()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with contextlib.chdir(cli_files["HOME"]):  # files the command writes (calibrate's --out) land there
            code, out, err = run_cli(args)
    assert clock() - began < PLAN_BOUND_S, "unbounded work"
    event(f"frenzy {command}: exit {code}")
    assert code in (0, 1, 2), (args, code, err)
    assert "Traceback" not in out + err and "internal error" not in err, (args, err)
    if code:
        problems = [line for line in err.splitlines() if line.startswith(("error:", "infeasible:"))]
        assert len(problems) == 1, (args, err)


# ---------------------------------------------------------------------------------------------- online scheduler
SCHEDULER_CALLS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), mostly(st.integers(10**5, 10**10), hostile_ints),
              mostly(st.floats(0, 1e4), hostile_floats)),
    st.tuples(st.just("advance"), mostly(st.floats(0, 1e6), hostile)),
    st.tuples(st.sampled_from(["node_down", "node_up"]), mostly(st.integers(0, 3), hostile)),
    st.tuples(st.sampled_from(["cancel", "job_finished", "expected_end_s"]),
              mostly(st.sampled_from(["j0", "j1", "j2"]), hostile)),
    st.tuples(st.just("save"), st.sampled_from(["", "version", "policy", "policy_params", "now_s", "jobs", "books",
                                               "running", "queue", "pending", "up", "seed", "cluster"]), hostile),
), max_size=8)


@FUZZ
@given(st.sampled_from(["fifo-requested", "frenzy-core", "sia-like", "gavel-like"]),
       seeds, SCHEDULER_CALLS)
def test_online_scheduler(policy: str, seed: Any, calls: list[tuple[Any, ...]]) -> None:
    """Any sequence of calls, with hostile arguments and hand-edited saved states, answers or refuses with a
    library error; every action's numbers are finite."""
    sched = call(f.OnlineScheduler, f.Cluster.preset("frenzy-paper"), policy, seed=seed,
                 throughput=lambda model, training, gpu, count: 1e5 * count, bound_s=PLAN_BOUND_S)
    if sched is None:
        return
    model, training = f.ModelConfig.preset("gpt2"), f.TrainingConfig(seq_len=512)
    for kind, *args in calls:
        if kind == "submit":
            job = call(f.TrainingJob, id=f"j{args[0]}", submit_time_s=args[2], model=model, training=training,
                       work_tokens=args[1])
            if job is not None:
                call(sched.submit, job)
        elif kind == "advance":
            actions = call(sched.advance, args[0], bound_s=PLAN_BOUND_S)
            if actions is not None:
                finite_numbers([a.model_dump() if hasattr(a, "model_dump") else vars(a) for a in actions])
        elif kind == "save":
            state = json.loads(sched.to_json())
            if args[0]:
                state[args[0]] = args[1]
            restored = call(f.OnlineScheduler.from_json, json_text(state), bound_s=PLAN_BOUND_S)
            sched = restored if restored is not None and not args[0] else sched
        else:
            call(getattr(sched, kind), args[0])
    finite_numbers([r.model_dump() for r in sched.records()])


# ---------------------------------------------------------------------------------------------- calibration
RUN_COLUMNS = ["model", "gpu", "dp", "tp", "pp", "seq_len", "global_batch_size", "micro_batch_size", "step_s",
               "tokens_per_s", "tensor_parallel_overlap", "label", "bogus"]
GOOD_RUN = {"model": "gpt2", "gpu": "h100", "dp": "1", "seq_len": "1024", "global_batch_size": "8", "step_s": "0.5"}


RUN_VALUES = {"model": ["gpt2", "llama-2-7b", "qwen2.5-0.5b"], "gpu": ["h100", "a100-80gb"], "dp": ["1", "2", "8"],
              "tp": ["1", "2"], "pp": ["1", "2"], "seq_len": ["512", "1024"], "global_batch_size": ["8", "64"],
              "micro_batch_size": ["1", "2"], "step_s": ["0.2", "0.5", "1.5"], "label": ["run-a", ""]}
"""What a measured run's cells hold (tokens_per_s, the other measure, and the overlap left to the hostile rows)."""
valid_runs = st.lists(st.sampled_from(sorted(RUN_VALUES)), max_size=3, unique=True).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.sampled_from(RUN_VALUES[k]) for k in keys}))


@HEAVY_FUZZ
@given(arguments((st.lists(valid_runs, min_size=1, max_size=3),
                  st.lists(st.dictionaries(st.sampled_from(RUN_COLUMNS), cells, max_size=3), min_size=1, max_size=3)),
                 (st.just(b""), st.binary(min_size=1, max_size=8)), (st.floats(0.0, 10.0), None),
                 (st.lists(st.sampled_from(DEFAULT_FIT), min_size=1, max_size=3, unique=True).map(tuple), None)),
       st.sampled_from([".csv", ".json"]))
def test_calibrate_run_tables(args: tuple[Any, ...], suffix: str) -> None:
    """Run tables (CSV or JSON) of measured runs, else with hostile cells and junk bytes appended: a fit or a
    library error."""
    edits, junk, prior, fit = args
    rows = [{**GOOD_RUN, **edit} for edit in edits]
    columns = sorted({k for r in rows for k in r})
    if suffix == ".csv":
        text = ",".join(columns) + "\n" + "\n".join(",".join(r.get(c, "") for c in columns) for r in rows) + "\n"
    else:
        text = json_text(rows)
    with scratch_file(f"runs{suffix}", text.encode("utf-8", "surrogatepass") + junk) as path:
        result = call(f.calibrate, str(path), prior_weight=prior, fit=fit, bound_s=PLAN_BOUND_S)
        if result is not None:
            finite_numbers(result)


TIME_MODEL_FIELDS = sorted(f.TimeModelParams.model_fields)


@FUZZ
@given(mostly(st.dictionaries(st.sampled_from(["h100-sxm", "a100-80gb"]),
                              st.dictionaries(st.sampled_from(TIME_MODEL_FIELDS[:6]), st.floats(0.05, 1.0),
                                              max_size=3), max_size=2),
              st.dictionaries(st.sampled_from(["h100-sxm", "a100-80gb", "nope", ""]),
                              st.dictionaries(st.sampled_from([*TIME_MODEL_FIELDS[:6], "bogus"]),
                                              mostly(st.floats(0.05, 1.0), hostile), max_size=3), max_size=2)),
       st.sampled_from([".yaml", ".json"]),
       mostly(st.just([]), st.lists(st.tuples(st.integers(0, 10**4), st.sampled_from(YAML_PIECES)), min_size=1,
                                    max_size=1)))
def test_time_model_files(gpus: dict[str, Any], suffix: str, edits: list[tuple[int, str]]) -> None:
    """A calibrated time-model file with hostile parameters or YAML pieces: a plan with those parameters or a
    library error, from the library and from ``frenzy plan --time-model``."""
    text = json_text({"format": "frenzy-time-model/1", "gpus": {g: {"params": p} for g, p in gpus.items()}})
    for where, piece in edits:
        cut = where % (len(text) + 1)
        text = text[:cut] + piece + text[cut:]
    with scratch_file(f"time-model{suffix}", text) as path:
        cluster = f.Cluster.from_dict({"nodes": [{"gpu": "h100", "gpus_per_node": 8}]})
        plan = call(f.plan_job, f.ModelConfig.preset("gpt2"), cluster, f.TrainingConfig(seq_len=512),
                    time_model=str(path), time_limit_s=1.0, bound_s=PLAN_BOUND_S)
        if plan is not None:
            finite_numbers(plan)
            assert plan.time.iteration_s > 0


# ---------------------------------------------------------------------------------------------- probe, plotting
PROBE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "architectures": st.sampled_from([["LlamaForCausalLM"], ["LlamaModel"], ["LlamaForSequenceClassification"],
                                      ["MistralForCausalLM"], []]),
    "model_type": st.sampled_from(["llama", "mistral", "qwen2"]),
    "torch_dtype": st.sampled_from(["float32", "bfloat16", "float16"]),
    "hidden_act": st.sampled_from(["silu", "gelu", "gelu_new", "relu", "tanh"]),
    "rope_scaling": st.sampled_from([None, {"rope_type": "linear", "factor": 2.0},
                                     {"rope_type": "dynamic", "factor": 4.0},
                                     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}]),
    "rope_theta": st.floats(1.0, 1e7),
    "tie_word_embeddings": st.booleans(),
    "use_cache": st.booleans(),
    "attention_dropout": st.floats(0.0, 0.5),
    "rms_norm_eps": st.floats(1e-8, 1e-3),
    "num_key_value_heads": st.sampled_from([1, 2]),
    "num_attention_heads": st.sampled_from([1, 2, 4]),
    "hidden_size": st.sampled_from([16, 32, 64, 128, 256]),
    "intermediate_size": wide_ints(1, 512),
    "vocab_size": wide_ints(1, 2**10),
    "max_position_embeddings": wide_ints(1, 2**16),
    "bogus": hostile,
}
"""The keys a probe's config.json is given other values on, each valid value (three times in four) from a range
a real config uses, else a hostile one. Widths too (bounded as ModelConfig's fields, and fake tensors cost the same
at any width), not ``num_hidden_layers``, whose bound (``_limits.PROBE_LAYER_PASSES``) admits minutes of work: its
reproducers are in tests/hostile_cases.py."""


@st.composite
def tiny_hf_config_bytes(draw: st.DrawFn) -> bytes:
    """The config.json of a one-layer 64-wide Llama with other values on up to three :data:`PROBE_VALUES` keys,
    and one time in four junk bytes spliced in where they cannot make a number larger (the layer count)."""
    from frenzy_core.config.hf import to_hf_config

    tiny = f.ModelConfig.preset("llama-2-7b").replace(num_layers=1, hidden_size=64, num_attention_heads=2,
                                                      num_kv_heads=2, head_dim=0, ffn_hidden_size=128,
                                                      vocab_size=128, max_position_embeddings=256)
    config = dict(to_hf_config(tiny))
    for key in draw(st.lists(st.sampled_from(sorted(PROBE_VALUES)), max_size=3, unique=True)):
        config[key] = draw(mostly(PROBE_VALUES[key]))
    text = json_text(config).encode()
    junk = draw(mostly(st.just(b""), st.binary(min_size=1, max_size=8).filter(
        lambda b: not any(48 <= c <= 57 for c in b))))
    cut = draw(st.integers(0, len(text)))
    while cut < len(text) and 48 <= text[cut - 1 if cut else 0] <= 57:  # never next to a digit
        cut += 1
    return text[:cut] + junk + text[cut:]


probe_trainings = st.builds(lambda seq, mbs, precision, attention, recompute: f.TrainingConfig(
    seq_len=seq, micro_batch_size=mbs, global_batch_size=mbs, precision=precision, attention=attention,
    recompute=recompute), st.sampled_from([8, 16, 32]), st.integers(1, 2),
    st.sampled_from(["fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"]), st.sampled_from(["sdpa", "flash", "eager"]),
    st.sampled_from(["none", "full"]))
"""One micro-batch of 8 to 64 tokens (a probe's cost is its operator count, the same at any length: fake tensors),
in every precision and attention the probe runs, with and without full recompute."""
probe_steps = mostly(st.integers(1, 2), hostile.filter(lambda s: not (type(s) is int and 2 < s <= MAX_PROBE_STEPS)))
"""One or two steps (the peak settles by the second), else a hostile count; accepted counts above two are left
out: each more step repeats the second at about 0.36 CPU s for one layer, so the 256 the probe's bound admits
would take 1.5 minutes, beyond the 60 s per call."""
PROBE_FUZZ = settings(FUZZ, max_examples=EXAMPLES if CAMPAIGN else max(1, EXAMPLES // 5))
"""In CI a fifth of the examples (each probe that gets past the config builds and trains a model: about 0.3 CPU s a
step), in a campaign all of them."""


@PROBE_FUZZ
@given(tiny_hf_config_bytes(), probe_trainings, probe_steps,
       mostly(st.sampled_from(["plain", "framework"]), st.just("nope") | hostile))
def test_probe_memory_of_a_config_file(data: bytes, training: f.TrainingConfig, steps: Any, loop: Any) -> None:
    """``probe_memory`` of a hostile config.json (path) measures the tiny model or refuses with a library error."""
    pytest.importorskip("transformers")
    with scratch_file("probe-config.json", data) as path:
        result = call(f.probe_memory, str(path), training, steps=steps, loop=loop, bound_s=PLAN_BOUND_S)
        if result is not None:
            assert result.peak_bytes > 0
            finite_numbers(result.breakdown)


PLOT_ESTIMATES = [f.estimate_memory(f.ModelConfig.preset(m), f.TrainingConfig(**t), f.ParallelConfig(**p))
                  for m, t, p in (("gpt2", {"seq_len": 512}, {}),
                                  ("llama-2-7b", {"seq_len": 2048, "global_batch_size": 8, "sequence_parallel": True},
                                   {"pp": 4, "tp": 2}),
                                  ("mixtral-8x7b", {"seq_len": 1024, "global_batch_size": 4}, {"pp": 2, "dp": 2,
                                                                                              "ep": 2}))]
"""One stage, four stages, and an MoE model over two: what a figure draws."""
GPU_NAMES = sorted({n for s in f.load_gpu_specs().values() for n in (s.id, *s.aliases)})
plot_names = st.tuples(st.text(st.characters(blacklist_characters="/\x00"), max_size=12),
                       st.sampled_from([".png", ".svg", ".pdf", ".PNG", ".Svg"])).map("".join)
"""File names in the scratch folder of every figure type, any case (never a ``/``: a name stays in the folder)."""


@pytest.mark.filterwarnings("ignore:Glyph")  # a title in a script the font lacks: boxes, and matplotlib says so
@HEAVY_FUZZ
@given(st.sampled_from(PLOT_ESTIMATES), arguments(
    (plot_names, hostile | st.sampled_from(["x.nope", "/nonexistent/x.png", "", "a" * 300 + ".png", "\x00.png",
                                            "\ud800.png"])),
    (st.lists(st.sampled_from(GPU_NAMES), max_size=3), hostile | st.lists(st.text(max_size=8), min_size=1,
                                                                          max_size=2)),
    (st.floats(0, 0.95), None),
    (st.none() | st.text(max_size=40), hostile | st.sampled_from(["$$", "$x^$", r"$\frac$", "a $ b $", "\ud800",
                                                                  "a" * 1001]))))
def test_plotting(estimate: f.MemoryEstimate, args: tuple[Any, ...]) -> None:
    """``plot_memory`` of any GPU list, headroom, title and file name writes the figure or refuses with a library
    error (matplotlib's own errors never escape)."""
    path, gpus, headroom, title = args
    pytest.importorskip("matplotlib")
    from frenzy_core.plotting import plot_memory

    with scratch_folder("plots") as folder:
        target = folder / path if isinstance(path, str) and not path.startswith("/") else path
        out = call(plot_memory, estimate, target, gpus=gpus, headroom=headroom, title=title)
        if out is not None:
            assert out.stat().st_size > 0
