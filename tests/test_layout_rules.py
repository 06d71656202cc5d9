"""The layout rule table: its mask on arrays is exactly what validate_layout accepts, row by row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core import ConfigError, ModelConfig, MoEConfig, ParallelConfig, TrainingConfig, validate_layout
from frenzy_core.config import PipelineSchedule, Recompute
from frenzy_core.config.arrays import LAYOUT_COLUMNS, LayoutArrays
from frenzy_core.config.layout import LAYOUT_RULES, layout_mask, require_rows
from frenzy_core.memory import estimate_memory_batch
from frenzy_core.planning.candidates import enumerate_layouts
from frenzy_core.planning.request import PlanConstraints

MODELS = {
    "gqa": ModelConfig(num_layers=12, hidden_size=512, num_attention_heads=8, num_kv_heads=4, vocab_size=32000,
                       mlp="swiglu", norm="rmsnorm", position_embedding="rotary"),
    "moe": ModelConfig(num_layers=6, hidden_size=512, num_attention_heads=8, vocab_size=32000, mlp="swiglu",
                       norm="rmsnorm", position_embedding="rotary",
                       moe=MoEConfig(num_experts=4, top_k=2, expert_ffn_hidden_size=256)),
    "learned": ModelConfig(num_layers=4, hidden_size=256, num_attention_heads=4, vocab_size=8000,
                           max_position_embeddings=512),
}

# values around and beyond each column's range, so that every rule is exercised
COLUMN_VALUES: dict[str, list[int]] = {
    "dp": [0, 1, 2, 3, 4], "tp": [-1, 1, 2, 3, 4, 8], "pp": [0, 1, 2, 3, 4], "vpp": [1, 1, 2, 3, 0],
    "cp": [1, 1, 2, 3], "ep": [1, 2, 4, 3, 0], "micro_batch_size": [1, 2, 0], "global_batch_size": [1, 4, 8, 12, 0],
    "seq_len": [256, 512, 1000, 1024, 0], "zero_stage": [0, 1, 2, 3, 4, -1], "distributed_optimizer": [0, 1, 2],
    "recompute": [0, 1, 2, 3, -1], "recompute_num_layers": [0, 1, 2, -1], "sequence_parallel": [0, 1, 2],
    "schedule": [0, 1, 2, 3, -1], "etp": [0, 0, 1, 2, -1], "shard_group_size": [0, 0, 1, 2, 3, -1],
    "microbatch_group_size": [0, 0, 2, 4, -1], "stage_split": [0, 0, 0, 1, 2, 3, 4, 5, 6, -1],
}
SPLITS = ((), (2, 2), (1, 1, 1, 1), (4, 8), (0, 6), (3, 3, 3, 3), (0, 2, 2, 0))
"""Chunk layer counts the rows' stage_split refers to: right and wrong lengths and sums for the models."""


def _configs(layouts: LayoutArrays, i: int) -> tuple[TrainingConfig, ParallelConfig]:
    """Row ``i`` as the configs a user would write (ConfigError where a config refuses a value)."""
    row = {k: int(getattr(layouts, k)[i]) for k in LAYOUT_COLUMNS}
    if not 0 <= row["stage_split"] < len(layouts.splits):
        raise ConfigError("no such split", field="stage_split")
    parallel = ParallelConfig(**{k: row[k] for k in ("dp", "tp", "pp", "vpp", "cp", "ep")},
                              **{k: row[k] or None for k in ("etp", "shard_group_size", "microbatch_group_size")},
                              stage_layers=layouts.stage_layers(i),
                              schedule=PipelineSchedule.from_code(row["schedule"]))
    training = TrainingConfig(
        micro_batch_size=row["micro_batch_size"], global_batch_size=row["global_batch_size"], seq_len=row["seq_len"],
        zero_stage=row["zero_stage"], distributed_optimizer=row["distributed_optimizer"],
        recompute=Recompute.from_code(row["recompute"]), recompute_num_layers=row["recompute_num_layers"] or None,
        sequence_parallel=row["sequence_parallel"])
    return training, parallel


def _accepts(model: ModelConfig, layouts: LayoutArrays, i: int) -> bool:
    try:
        training, parallel = _configs(layouts, i)
        validate_layout(model, training, parallel)
    except ConfigError:
        return False
    return True


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(MODELS)),
       st.lists(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in COLUMN_VALUES.items()}), min_size=1,
                max_size=20))
def test_mask_is_what_validate_layout_accepts(model_name: str, rows: list[dict[str, int]]) -> None:
    model = MODELS[model_name]
    layouts = LayoutArrays(**{k: np.array([r[k] for r in rows], dtype=np.int64) for k in LAYOUT_COLUMNS},
                           splits=SPLITS)
    mask = layout_mask(model, layouts)
    assert [bool(m) for m in mask] == [_accepts(model, layouts, i) for i in range(len(rows))]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(MODELS)), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2]), st.sampled_from(list(Recompute)), st.sampled_from([0, 1, 2, 3]), st.booleans())
def test_configs_round_trip_through_a_row(model_name: str, dp: int, tp: int, pp: int, recompute: Recompute,
                                          zero: int, sp: bool) -> None:
    training = TrainingConfig(seq_len=512, micro_batch_size=2, global_batch_size=8 * dp, recompute=recompute,
                              zero_stage=zero, sequence_parallel=sp)
    parallel = ParallelConfig(dp=dp, tp=tp, pp=pp)
    row = LayoutArrays.from_configs(training, parallel)
    assert row.parallel(0) == parallel
    assert row.training(0, TrainingConfig(seq_len=512)) == training


def test_errors_name_the_field_and_render_other_vocabularies() -> None:
    model, training = MODELS["gqa"], TrainingConfig(seq_len=512)
    with pytest.raises(ConfigError) as err:
        validate_layout(model, training, ParallelConfig(tp=3))
    assert err.value.field == "parallel.tp" and str(err.value).startswith("num_attention_heads=8 is not divisible")
    flags = {"parallel.tp": "--tensor-model-parallel-size", "model.num_attention_heads": "--num-attention-heads"}
    with pytest.raises(ConfigError) as err:
        validate_layout(model, training, ParallelConfig(tp=3), names=flags)
    assert err.value.field == "--tensor-model-parallel-size"
    assert str(err.value).startswith("--num-attention-heads=8 is not divisible by --tensor-model-parallel-size=3")


def test_rules_name_their_fields_once() -> None:
    names = [rule.name for rule in LAYOUT_RULES]
    assert len(names) == len(set(names))
    prefixes = {field.partition(".")[0] for rule in LAYOUT_RULES for field in rule.fields}
    assert prefixes <= {"model", "training", "parallel"}
    columns = {field.partition(".")[2] for rule in LAYOUT_RULES for field in rule.fields
               if not field.startswith("model.")}
    # parallel.stage_layers is derived from the stage_split column (the split's layer total, RuleRow)
    assert columns <= {*LAYOUT_COLUMNS, "stage_layers"}


def test_require_rows_names_the_first_bad_row() -> None:
    layouts = LayoutArrays.from_columns({"dp": [2, 3, 5]}, TrainingConfig(global_batch_size=8))
    with pytest.raises(ConfigError, match="candidate 1: global_batch_size=8"):
        require_rows(MODELS["gqa"], layouts)


def test_from_code_refuses_unknown_codes() -> None:
    kinds: list[Any] = [Recompute, PipelineSchedule]
    for kind in kinds:
        with pytest.raises(ConfigError):
            kind.from_code(-1)
        assert [kind.from_code(m.code) for m in kind] == list(kind)


@pytest.mark.parametrize("model_name,framework", [("gqa", "megatron"), ("moe", "megatron"), ("learned", "torch")])
def test_every_candidate_the_planner_enumerates_passes_validate_layout(model_name: str, framework: str) -> None:
    model = MODELS[model_name]
    training = TrainingConfig(seq_len=512, global_batch_size=16, framework=framework)
    layouts = enumerate_layouts(model, training, PlanConstraints(), max_world=16, max_tp=8)
    assert len(layouts) > 0
    assert estimate_memory_batch(model, layouts, training).valid.all()
    for i in range(0, len(layouts), max(1, len(layouts) // 50)):
        validate_layout(model, layouts.training(i, training), layouts.parallel(i))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(sorted(MODELS)),
       st.lists(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in COLUMN_VALUES.items()}), min_size=1,
                max_size=20))
def test_rules_at_their_defaults_say_what_their_arithmetic_says(model_name: str, rows: list[dict[str, int]]) -> None:
    """A table that leaves vpp, cp, ep, etp, the shard and micro-batch groups, the stage split and the distributed
    optimizer at their defaults in every row (where the rules answer True at once) gets the mask its rows get
    beside one row that sets them all, where every rule runs its arithmetic."""
    model = MODELS[model_name]
    defaults = {"vpp": 1, "cp": 1, "ep": 1, "etp": 0, "shard_group_size": 0, "microbatch_group_size": 0,
                "stage_split": 0, "distributed_optimizer": 0}
    plain = [{**r, **defaults} for r in rows]
    other = {**plain[0], "vpp": 2, "cp": 2, "ep": 2, "etp": 1, "shard_group_size": 2, "microbatch_group_size": 2,
             "stage_split": 1, "distributed_optimizer": 1}

    def table(rs: list[dict[str, int]]) -> LayoutArrays:
        return LayoutArrays(**{k: np.array([r[k] for r in rs], dtype=np.int64) for k in LAYOUT_COLUMNS},
                            splits=SPLITS)

    assert np.array_equal(layout_mask(model, table(plain)), layout_mask(model, table([*plain, other]))[:-1])
