"""Stage layouts and per-rank parameter shares."""

from __future__ import annotations

import numpy as np
import pytest

from frenzy_core.config import LayoutArrays, ModelConfig, MoEConfig, TrainingConfig
from frenzy_core.config.params import count_parameters
from frenzy_core.memory.shards import layer_constants, stage_params, stage_shape


def _layouts(pp: int, vpp: int = 1) -> LayoutArrays:
    return LayoutArrays.from_columns({"pp": pp, "vpp": vpp}, TrainingConfig())


MODEL = ModelConfig(num_layers=10, hidden_size=512, num_attention_heads=8, vocab_size=32000, tied_embeddings=True,
                    linear_bias=True, qkv_bias=True)


def test_remainder_layers_go_to_the_first_stages() -> None:
    shape = stage_shape(MODEL, _layouts(4, 1), np.arange(4))
    assert shape.num_layers.tolist() == [3, 3, 2, 2]
    assert shape.is_first.tolist() == [True, False, False, False]
    assert shape.is_last.tolist() == [False, False, False, True]


def test_interleaved_stage_holds_every_pp_th_chunk() -> None:
    # 10 layers in 4 x 2 = 8 chunks: chunks 0, 1 have 2 layers; stage 0 holds chunks 0 and 4, stage 1 chunks 1, 5
    shape = stage_shape(MODEL, _layouts(4, 2), np.arange(4))
    assert shape.num_layers.tolist() == [3, 3, 2, 2]


def test_moe_layers_counted_per_stage() -> None:
    moe = MODEL.replace(moe=MoEConfig(num_experts=4, top_k=1, expert_ffn_hidden_size=256, first_dense_layers=1,
                                      layer_interval=2).model_dump())
    shape = stage_shape(moe, _layouts(2, 1), np.arange(2))
    # layers 0..4 on stage 0 (MoE: 1, 3), layers 5..9 on stage 1 (MoE: 5, 7, 9)
    assert shape.num_moe_layers.tolist() == [2, 3]


def test_tp_splits_weights_and_replicates_norms_and_row_biases() -> None:
    shape = stage_shape(MODEL, _layouts(1, 1), np.arange(1))
    one = stage_params(MODEL, shape, 1)
    four = stage_params(MODEL, shape, 4)
    assert float(one.per_rank(1, 1)[0]) == count_parameters(MODEL).total
    h = MODEL.hidden_size
    lc = layer_constants(MODEL)
    assert lc.attn_replicated == h + 2 * 2 * h  # output-projection bias + two LayerNorms
    assert float(four.per_rank(4, 1)[0]) == pytest.approx(one.split[0] / 4 + one.replicated[0])


def test_tied_head_on_a_later_stage_is_a_copy() -> None:
    shape = stage_shape(MODEL, _layouts(2, 1), np.arange(2))
    prm = stage_params(MODEL, shape, 1)
    assert prm.tied_copy.tolist() == [0, MODEL.vocab_size * MODEL.hidden_size]
