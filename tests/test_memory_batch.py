"""estimate_memory_batch equals estimate_memory per configuration and flags the ones it would refuse."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frenzy_core._distinct import distinct
from frenzy_core.config import ModelConfig, MoEConfig, ParallelConfig, PipelineSchedule, Recompute, TrainingConfig
from frenzy_core.config.arrays import LayoutArrays
from frenzy_core.errors import ConfigError
from frenzy_core.memory import batch, estimate_memory, estimate_memory_batch
from frenzy_core.memory.kernel import state_keys, token_keys, torch_sp_covered
from golden.cases import random_configs

DENSE = ModelConfig(num_layers=12, hidden_size=512, num_attention_heads=8, num_kv_heads=4, vocab_size=32000,
                    mlp="swiglu", norm="rmsnorm", position_embedding="rotary", tied_embeddings=False)
MOE = ModelConfig(num_layers=9, hidden_size=512, num_attention_heads=8, vocab_size=32000, mlp="swiglu",
                  norm="rmsnorm", position_embedding="rotary",
                  moe=MoEConfig(num_experts=8, top_k=2, expert_ffn_hidden_size=256, first_dense_layers=1,
                                layer_interval=2))
BERT = ModelConfig(arch="encoder", num_layers=6, hidden_size=256, num_attention_heads=4, vocab_size=8000,
                   type_vocab_size=2, embedding_norm=True, final_norm=False, hidden_dropout=0.1,
                   attention_dropout=0.1, max_position_embeddings=512, qkv_bias=True, linear_bias=True)



def _scalar(model: ModelConfig, training: TrainingConfig, cfg: dict[str, np.ndarray], i: int) -> object:
    recompute = Recompute.from_code(int(cfg["recompute"][i]))
    schedule = PipelineSchedule.from_code(int(cfg["schedule"][i]))
    mbs, dp = int(cfg["micro_batch_size"][i]), int(cfg["dp"][i])
    t = training.replace(micro_batch_size=mbs, seq_len=int(cfg["seq_len"][i]),
                         global_batch_size=mbs * dp * int(cfg["num_microbatches"][i]),
                         zero_stage=int(cfg["zero_stage"][i]), recompute=recompute,
                         recompute_num_layers=int(cfg["recompute_num_layers"][i]) or None,
                         sequence_parallel=bool(cfg["sequence_parallel"][i]))
    p = ParallelConfig(dp=dp, tp=int(cfg["tp"][i]), pp=int(cfg["pp"][i]), vpp=int(cfg["vpp"][i]),
                       cp=int(cfg["cp"][i]), ep=int(cfg["ep"][i]), schedule=schedule)
    return estimate_memory(model, t, p)


@pytest.mark.parametrize("model", [DENSE, MOE, BERT], ids=["dense", "moe", "bert"])
@pytest.mark.parametrize("framework,precision", [("torch", "bf16"), ("torch", "amp-bf16"),
                                                 ("megatron", "bf16-mixed"), ("megatron", "fp8-mixed")])
def test_batch_equals_scalar(model: ModelConfig, framework: str, precision: str) -> None:
    training = TrainingConfig(framework=framework, precision=precision, attention="eager", seq_len=512)
    seed = zlib.crc32(f"{framework}/{precision}/{model.num_layers}".encode())  # not hash(): salted per run
    cfg = random_configs(80, seed=seed)
    if framework == "torch":  # torch's context parallelism is refused; its tensor parallelism is modelled with
        cfg["cp"] = np.ones_like(cfg["cp"])  # sequence parallelism, for Llama-lineage models only
        if torch_sp_covered(model):  # (tests/test_memory_torch_sp.py)
            cfg["sequence_parallel"] = np.where(cfg["tp"] > 1, 1, cfg["sequence_parallel"])
        else:
            cfg["tp"] = np.ones_like(cfg["tp"])
    out = estimate_memory_batch(model, cfg, training)
    checked = 0
    for i in range(80):
        try:
            est = _scalar(model, training, cfg, i)
        except ConfigError:
            assert not out.valid[i], f"row {i} accepted by the batch but refused by estimate_memory"
            assert out.peak_bytes[i] == -1
            continue
        assert out.valid[i], f"row {i} refused by the batch but accepted by estimate_memory"
        assert out.peak_bytes[i] == est.peak_bytes
        assert out.device_bytes[i] == est.device_bytes
        assert out.busiest_stage[i] == est.busiest_stage
        assert {k: int(v[i]) for k, v in out.breakdown.items()} == est.breakdown
        checked += 1
    assert checked >= 10


def test_defaults_come_from_training() -> None:
    training = TrainingConfig(seq_len=1024, micro_batch_size=2, recompute="full", sequence_parallel=True)
    out = estimate_memory_batch(DENSE, {"tp": [1, 2]}, training)
    assert out.peak_bytes[0] == estimate_memory(DENSE, training).peak_bytes
    assert out.peak_bytes[1] == estimate_memory(DENSE, training, ParallelConfig(tp=2)).peak_bytes


def test_names_are_accepted_for_codes() -> None:
    names = estimate_memory_batch(DENSE, {"recompute": ["none", "full"], "schedule": ["gpipe", "1f1b"], "pp": 2,
                                          "num_microbatches": 4})
    codes = estimate_memory_batch(DENSE, {"recompute": [Recompute.NONE.code, Recompute.FULL.code],
                                          "schedule": [PipelineSchedule.GPIPE.code, PipelineSchedule.ONE_F_ONE_B.code],
                                          "pp": 2,
                                          "num_microbatches": 4})
    assert names.valid.all() and (names.peak_bytes == codes.peak_bytes).all()


def test_bad_input_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown configs keys"):
        estimate_memory_batch(DENSE, {"tensor_parallel": [1]})
    with pytest.raises(ConfigError, match="unknown values"):
        estimate_memory_batch(DENSE, {"recompute": ["sometimes"]})
    with pytest.raises(ConfigError, match="broadcast"):
        estimate_memory_batch(DENSE, {"tp": [1, 2], "pp": [1, 2, 4]})
    with pytest.raises(ConfigError, match="not both"):
        estimate_memory_batch(DENSE, {"num_microbatches": 2, "global_batch_size": 8})


@pytest.mark.parametrize("model", [DENSE, MOE], ids=["dense", "moe"])
def test_blocks_do_not_change_results(model: ModelConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are evaluated in blocks (for the cache); any block size gives the same arrays, in the configs' shape."""
    training = TrainingConfig(framework="torch", precision="amp-bf16", attention="eager", seq_len=512)
    cfg = {k: v.reshape(5, 8) for k, v in random_configs(40, seed=7).items()}
    whole = estimate_memory_batch(model, cfg, training)
    monkeypatch.setattr(batch, "BLOCK_ELEMENTS", 5)
    blocked = estimate_memory_batch(model, cfg, training)
    assert whole.valid.shape == (5, 8) and whole.valid.sum() >= 5
    for name in ("peak_bytes", "device_bytes", "busiest_stage", "valid", "host_bytes"):
        assert np.array_equal(getattr(whole, name), getattr(blocked, name)), name
    for cat, values in whole.breakdown.items():
        assert np.array_equal(values, blocked.breakdown[cat]), cat


RECIPES = [
    {"framework": "torch", "precision": "bf16", "keep_outputs": True},
    {"framework": "torch", "precision": "amp-bf16", "attention": "eager", "optimizer": "sgd"},
    {"framework": "torch", "precision": "bf16", "lora": {"rank": 8, "base_quantization": "nf4"}},
    {"framework": "torch", "precision": "amp-bf16", "lora": {"rank": 8, "dropout": 0.1,
                                                             "target_modules": ["q", "o", "up", "down"]}},
    {"framework": "torch", "precision": "bf16", "freeze_embeddings": True, "trainable_layers": 3},
    {"framework": "torch", "precision": "fp32", "offload_optimizer": "cpu", "activation_offload_layers": 1},
    {"framework": "megatron", "precision": "bf16-mixed", "zero_stage": 1},
    {"framework": "megatron", "precision": "fp16-mixed", "attention": "eager", "recompute_method": "block"},
]


def _share(patch: pytest.MonkeyPatch, shared: bool) -> None:
    """Make the batch estimator share state and token terms between rows whatever their number and repeats (True),
    or never (False)."""
    patch.setattr(batch, "SHARED_MIN_ROWS", 0 if shared else 2**62)
    patch.setattr(batch, "SHARED_MIN_REPEATS", 0)


@settings(max_examples=8, deadline=None)
@given(model=st.sampled_from([DENSE, MOE, BERT]), recipe=st.sampled_from(RECIPES), seed=st.integers(0, 2**32 - 1),
       block=st.sampled_from([3, 64, batch.BLOCK_ELEMENTS]), shared=st.booleans())
def test_batch_equals_scalar_over_recipes(model: ModelConfig, recipe: dict[str, object], seed: int,
                                          block: int, shared: bool) -> None:
    """Every valid row equals the scalar estimate, whatever the recipe's zero terms (kept outputs or not, tied
    head or not, dense or MoE, QLoRA, frozen layers, offload, Megatron), the block size and whether rows share
    their state terms."""
    training = TrainingConfig(seq_len=512, **recipe)  # type: ignore[arg-type]
    cfg = random_configs(8, seed=seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "BLOCK_ELEMENTS", block)
        _share(patch, shared)
        out = estimate_memory_batch(model, cfg, training)
    for i in np.flatnonzero(out.valid):
        est = _scalar(model, training, cfg, int(i))
        assert (out.peak_bytes[i], out.device_bytes[i], out.busiest_stage[i], out.host_bytes[i]) == (
            est.peak_bytes, est.device_bytes, est.busiest_stage, est.host_bytes)
        assert {k: int(v[i]) for k, v in out.breakdown.items()} == est.breakdown


def _arrays(out: batch.BatchEstimate) -> dict[str, np.ndarray]:
    return {"peak": out.peak_bytes, "device": out.device_bytes, "stage": out.busiest_stage, "valid": out.valid,
            "host": out.host_bytes, **out.breakdown}


def _cross_product(model: ModelConfig) -> dict[str, np.ndarray]:
    """A planner's table: every combination of a few values per column, so each state key (sharding, pipeline
    position, micro-batches) repeats over micro-batch sizes, sequences, recompute modes and sequence parallelism."""
    axes = {"dp": [1, 2, 4], "tp": [1, 2], "pp": [1, 3], "vpp": [1, 2], "zero_stage": [0, 3],
            "num_microbatches": [1, 4], "micro_batch_size": [1, 2], "seq_len": [256, 512, 1024], "recompute": [0, 1, 2],
            "sequence_parallel": [0, 1]}
    grids = np.meshgrid(*axes.values(), indexing="ij")
    return {k: g.ravel() for k, g in zip(axes, grids)}


@pytest.mark.parametrize("framework,precision", [("torch", "amp-bf16"), ("megatron", "bf16-mixed")])
@pytest.mark.parametrize("model", [DENSE, MOE], ids=["dense", "moe"])
def test_shared_state_terms_change_no_array(model: ModelConfig, framework: str, precision: str) -> None:
    """Rows that repeat their state keys many times (a cross product, 72 per key) and their token keys (tp,
    sequence parallelism, sequence, micro-batch size: 72 or more per key) give the same arrays, value and dtype,
    with the state and token terms shared between them as computed per row; and rows checked one by one equal
    the scalar estimate."""
    training = TrainingConfig(framework=framework, precision=precision, attention="eager", seq_len=512)
    cfg = _cross_product(model)
    if framework == "torch":  # refused at tp > 1 (tests/test_memory_torch_sp.py)
        cfg["sequence_parallel"] = cfg["sequence_parallel"] * (cfg["tp"] == 1)
    lay = LayoutArrays.from_columns(cfg, training)
    for keys in (state_keys(lay), token_keys(lay)):
        assert len(cfg["dp"]) >= 20 * len(distinct(*keys)[0])  # the rows do repeat their keys
    results = {}
    for shared in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            _share(patch, shared)
            results[shared] = _arrays(estimate_memory_batch(model, cfg, training))
    assert results[True]["valid"].sum() >= 100
    for name, values in results[False].items():
        assert values.dtype == results[True][name].dtype and np.array_equal(values, results[True][name]), name
    out = results[True]
    for i in np.flatnonzero(out["valid"])[::97]:
        est = _scalar(model, training, {**cfg, "cp": np.ones_like(cfg["dp"]), "ep": np.ones_like(cfg["dp"]),
                                        "schedule": np.where(cfg["vpp"] > 1, 2, 0),
                                        "recompute_num_layers": np.zeros_like(cfg["dp"])}, int(i))
        assert (out["peak"][i], out["device"][i], out["stage"][i]) == (est.peak_bytes, est.device_bytes,
                                                                    est.busiest_stage)


def test_distinct_rows_share_nothing_and_change_no_array() -> None:
    """Rows whose state keys are all distinct give the same arrays with sharing forced (one key per row) as
    without; the estimator does not share there by itself, however many rows (no key repeats)."""
    training = TrainingConfig(framework="torch", precision="bf16", seq_len=512)
    n = 48
    cfg = {"dp": np.arange(1, n + 1), "global_batch_size": np.arange(1, n + 1) * 8, "micro_batch_size": 1}
    lay = LayoutArrays.from_columns(cfg, training)
    assert len(distinct(*state_keys(lay))[0]) == n
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "SHARED_MIN_ROWS", 0)
        assert batch._shared(lay, state_keys(lay), np.arange(n), lambda keys: keys) is None
    results = {}
    for shared in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            _share(patch, shared)
            results[shared] = _arrays(estimate_memory_batch(DENSE, cfg, training))
    assert results[True]["valid"].all()
    for name, values in results[False].items():
        assert values.dtype == results[True][name].dtype and np.array_equal(values, results[True][name]), name


@pytest.mark.parametrize("framework,precision", [("torch", "amp-bf16"), ("megatron", "bf16-mixed")])
def test_distinct_token_keys_share_nothing_and_change_no_array(framework: str, precision: str) -> None:
    """Rows that share their state keys but no token key (each its own sequence length) give the same arrays
    with every term shared (the token terms one key per row) as with none; by itself the estimator shares the
    state terms there but not the token terms; rows checked one by one equal the scalar estimate."""
    training = TrainingConfig(framework=framework, precision=precision, attention="eager", seq_len=512)
    n = 1200
    tp = 2 if framework == "megatron" else 1  # (torch tp > 1 without sequence parallelism is refused)
    cfg = {"dp": 2, "tp": tp, "pp": 2, "num_microbatches": 4, "seq_len": 64 + 8 * np.arange(n),
           "recompute": np.arange(n) % 3}
    lay = LayoutArrays.from_columns(cfg, training)
    assert len(distinct(*token_keys(lay))[0]) == n and len(distinct(*state_keys(lay))[0]) == 1
    rows = np.arange(n)
    assert batch._shared(lay, token_keys(lay), rows, lambda keys: keys) is None
    assert batch._shared(lay, state_keys(lay), rows, lambda keys: keys) is not None
    results = {}
    for shared in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            _share(patch, shared)
            results[shared] = _arrays(estimate_memory_batch(DENSE, cfg, training))
    by_itself = _arrays(estimate_memory_batch(DENSE, cfg, training))
    assert results[True]["valid"].all()
    for name, values in results[False].items():
        assert values.dtype == results[True][name].dtype and np.array_equal(values, results[True][name]), name
        assert np.array_equal(values, by_itself[name]), name
    full = {k: getattr(lay, k) for k in ("dp", "tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "seq_len",
                                          "zero_stage", "recompute", "recompute_num_layers", "sequence_parallel",
                                          "schedule", "num_microbatches")}
    for i in (0, 601, n - 1):
        est = _scalar(DENSE, training, full, i)
        assert (results[True]["peak"][i], results[True]["device"][i]) == (est.peak_bytes, est.device_bytes)


@pytest.mark.parametrize("framework,precision", [("torch", "bf16"), ("megatron", "bf16-mixed")])
def test_single_stage_rows_change_no_array(framework: str, precision: str) -> None:
    """Rows of one pipeline stage are evaluated at that stage alone, the others at each candidate stage: a table
    mixing both gives every row the arrays it gets in a table of its own kind."""
    training = TrainingConfig(framework=framework, precision=precision, seq_len=512)
    cfg = random_configs(60, seed=11)
    cfg["sequence_parallel"] = cfg["sequence_parallel"] * (cfg["tp"] == 1)
    mixed = _arrays(estimate_memory_batch(MOE, cfg, training))
    single = cfg["pp"] == 1
    assert 0 < single.sum() < len(single) and mixed["valid"][single].any() and mixed["valid"][~single].any()
    for rows in (single, ~single):
        alone = _arrays(estimate_memory_batch(MOE, {k: v[rows] for k, v in cfg.items()}, training))
        for name, values in alone.items():
            assert values.dtype == mixed[name].dtype and np.array_equal(values, mixed[name][rows]), name
