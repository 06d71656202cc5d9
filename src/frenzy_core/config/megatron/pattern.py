"""Megatron-LM's per-layer pattern flags (``--moe-layer-freq``): read without ``eval``, and written back."""

from __future__ import annotations

import ast
import re

from frenzy_core._base import FrozenModel
from frenzy_core.config.model import ModelConfig
from frenzy_core.errors import ConfigError

__all__ = ["PipelineLayout", "moe_layer_flag", "moe_layer_pattern", "moe_placement", "pipeline_layout"]

_MAX_PATTERN = 1 << 16  # longest --moe-layer-freq list read (a bound, not a Megatron limit)


def moe_layer_pattern(value: object, num_layers: int) -> list[int]:
    """``--moe-layer-freq``: an int k (every k-th layer from 0) or a list expression, ``([0]*3+[1]*9)``."""
    flag = "--moe-layer-freq"
    text = str(value).strip()
    if re.fullmatch(r"\d+", text):
        k = int(text)
        if k <= 0:
            raise ConfigError(f"{flag} must be positive, got {k}", field=flag, value=value)
        return [1 if i % k == 0 else 0 for i in range(num_layers)]
    # Megatron's _eval_pattern admits only digits, brackets, parentheses, commas, + and *.
    if re.search(r"[^,\d\[\]\(\)\+\*\s]", text):
        raise ConfigError(
            f"{flag} must be an integer or a list expression such as ([0]*1+[1]*3), got {text!r}",
            field=flag,
            value=value,
        )
    pattern = _eval_list_expression(text, flag)
    if len(pattern) != num_layers or any(x not in (0, 1) for x in pattern):
        raise ConfigError(
            f"{flag} must give one 0 or 1 per layer ({num_layers}), got {pattern}", field=flag, value=value
        )
    return pattern


def _eval_list_expression(text: str, flag: str) -> list[int]:
    """Evaluate integer lists joined by ``+`` and repeated by ``*`` (what Megatron's ``_eval_pattern``
    admits),
    walking the syntax tree instead of calling ``eval``."""

    def value(node: ast.expr) -> list[int] | int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List):
            items = [value(e) for e in node.elts]
            if all(isinstance(i, int) for i in items):
                return [i for i in items if isinstance(i, int)]
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
                left, right = right, left
            if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
                if len(left) * right > _MAX_PATTERN:
                    raise ConfigError(
                        f"{flag}: {text!r} is longer than {_MAX_PATTERN} layers", field=flag, value=text
                    )
                return left * right
        raise ConfigError(f"{flag}: cannot read list expression {text!r}", field=flag, value=text)

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ConfigError(f"{flag}: cannot read list expression {text!r}", field=flag, value=text) from None
    result = value(tree.body)
    if not isinstance(result, list):
        raise ConfigError(f"{flag}: {text!r} is not a list", field=flag, value=text)
    return result


def moe_placement(pattern: list[int]) -> tuple[int, int] | None:
    """(first_dense_layers, layer_interval) reproducing ``pattern``, or None if no such pair does."""
    if 1 not in pattern:
        return None
    first = pattern.index(1)
    for interval in range(1, len(pattern) + 1):
        if all(
            pattern[i] == (1 if i >= first and (i - first) % interval == 0 else 0)
            for i in range(len(pattern))
        ):
            return first, interval
    return None


def moe_layer_flag(model: ModelConfig) -> str | None:
    """``--moe-layer-freq`` for a model whose MoE layers are not all of them (None: every layer is MoE)."""
    if model.moe is None or (not model.moe.first_dense_layers and model.moe.layer_interval == 1):
        return None
    return "[" + ",".join("1" if model.is_moe_layer(i) else "0" for i in range(model.num_layers)) + "]"


class PipelineLayout(FrozenModel):
    """What ``--pipeline-model-parallel-layout`` places: decoder layers per chunk (model order) and the MTP
    layers' count (all on the last chunk of their rank)."""

    vpp: int
    chunk_layers: tuple[int, ...]
    mtp_layers: int


_LAYOUT_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}


def pipeline_layout(value: object, pp: int, num_layers: int) -> PipelineLayout:
    """Parse a layout such as ``Et*3|(tt|)*6mL`` as Megatron-Core's ``PipelineParallelLayerLayout`` does
    (``parse_str_to_list``: commas dropped, ``(...)*n`` then ``x*n`` unrolled, ``|`` between chunks; chunk i of
    the string is virtual stage i // pp of rank i % pp) and check what its ``validate_layer_layout`` asserts."""
    flag = "--pipeline-model-parallel-layout"
    text = str(value).replace(",", "").strip()
    if len(text) > _MAX_PATTERN:
        raise ConfigError(f"{flag} is longer than {_MAX_PATTERN} characters", field=flag, value=value)
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * min(int(m.group(2)), _MAX_PATTERN), text)
        if len(text) > _MAX_PATTERN:
            raise ConfigError(f"{flag} unrolls to more than {_MAX_PATTERN} characters", field=flag, value=value)
    chunks = text.split("|")
    bad = sorted({c for c in text if c not in _LAYOUT_CHARS and c != "|"})
    if bad:
        raise ConfigError(f"{flag}: unknown layer characters {bad} in {value!r}", field=flag, value=value,
                          hint="use E (embedding), t (transformer layer), m (MTP layer), L (loss) and |")
    if len(chunks) % pp != 0:
        raise ConfigError(f"{flag} has {len(chunks)} chunks, not a multiple of --pipeline-model-parallel-size={pp}",
                          field=flag, value=value)
    flat = "".join(chunks)
    if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
        raise ConfigError(f"{flag} must start with the embedding E and end with the loss L, once each; got "
                          f"{value!r}", field=flag, value=value)
    if flat.count("t") != num_layers:
        raise ConfigError(f"{flag} places {flat.count('t')} transformer layers; --num-layers is {num_layers}",
                          field=flag, value=value)
    mtp = flat.count("m")
    if mtp and ("t" in flat[flat.index("m"):] or any("m" in c for c in chunks[:-pp])):
        raise ConfigError(f"{flag}: MTP layers must follow every transformer layer, in a last virtual chunk",
                          field=flag, value=value)
    return PipelineLayout(vpp=len(chunks) // pp, chunk_layers=tuple(c.count("t") for c in chunks), mtp_layers=mtp)
