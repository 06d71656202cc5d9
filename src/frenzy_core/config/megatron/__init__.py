"""Megatron-LM command lines <-> the three configs.

``args`` tokenises a command line and holds the flag table (``data/megatron_flags.yaml``); ``pattern`` reads
and writes per-layer pattern flags; ``tables`` maps our enums to flag values, one table read both ways;
``model_flags`` and ``reader`` read a command line; ``writer`` writes one (and the environment it needs).
"""

from frenzy_core.config.megatron.args import MegatronArgs
from frenzy_core.config.megatron.reader import MegatronJob, from_megatron_args, parse_megatron_args
from frenzy_core.config.megatron.tables import (
    BERT_WORDPIECE_VOCAB_SIZE,
    GPT2_BPE_VOCAB_SIZE,
    megatron_padded_vocab_size,
)
from frenzy_core.config.megatron.writer import MegatronLaunch, megatron_launch, to_megatron_args

__all__ = [
    "BERT_WORDPIECE_VOCAB_SIZE",
    "GPT2_BPE_VOCAB_SIZE",
    "MegatronArgs",
    "MegatronJob",
    "MegatronLaunch",
    "from_megatron_args",
    "megatron_launch",
    "megatron_padded_vocab_size",
    "parse_megatron_args",
    "to_megatron_args",
]
