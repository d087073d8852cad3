"""A model's config.json read as data: bounded, parsed and checked before any library builds a
model from it (CONTRACT §3: a malformed config is one line and exit 2, never a library's
exception or a model that divides by a head count of 0). No torch, no transformers."""

from __future__ import annotations

import json
from pathlib import Path

from ..common.errors import InputError, first_line
from ..common.files import read_bytes

# Sizes a model is built from: whole numbers, at least 1 (0 heads divide by zero, -5 tokens
# make a tensor of negative size) or, for counts of layers and labels, at least 0.
_AT_LEAST_1 = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
               "max_position_embeddings", "num_key_value_heads", "d_model",
               "d_ff", "d_kv", "num_heads", "embedding_size", "n_embd", "n_head", "n_positions")
_AT_LEAST_0 = ("head_dim", "num_hidden_layers", "num_layers", "num_decoder_layers", "num_labels",
               "type_vocab_size", "n_layer")
# The dtypes a config may name (transformers takes `getattr(torch, name)`).
_DTYPES = ("float32", "float16", "bfloat16", "float64", "float", "half", "double", "auto",
           "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int16", "int32", "int64", "bool")


def read_config(folder: str | Path, model: str) -> dict:
    """The settings in `folder`/config.json, or InputError naming what is wrong, in one line."""
    path = Path(folder) / "config.json"
    data = read_bytes(path, "model config")   # a regular file, of bounded size
    try:
        config = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"model {model!r}: unreadable config.json ({first_line(exc)})") from None
    if not isinstance(config, dict):
        raise InputError(f"model {model!r}: config.json is not an object of settings")
    problem = config_problem(config)
    if problem:
        raise InputError(f"model {model!r}: config.json {problem}")
    return config


def config_problem(config: dict, where: str = "") -> str | None:
    """What is wrong with the settings a model is built from, in words; None when nothing is.
    Sub-configs (text_config, vision_config, ...) are checked too."""
    for key, least in [(k, 1) for k in _AT_LEAST_1] + [(k, 0) for k in _AT_LEAST_0]:
        value = config.get(key)
        if value is not None and not _whole(value, least):
            return (f"{where}{key} is {json.dumps(value)[:60]}; it must be a whole number of at "
                    f"least {least}")
    for key in ("id2label", "label2id"):
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            return f"{where}{key} is a {_kind(value)}; it must be an object (label id -> name)"
    labels = config.get("id2label") or {}
    if any(not str(key).lstrip("-").isdigit() for key in labels):
        return f"{where}id2label has keys that are not class ids (whole numbers): {list(labels)[:3]}"
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is not None and (not isinstance(value, str)
                                  or value.removeprefix("torch.") not in _DTYPES):
            return f"{where}{key} is {json.dumps(value)}, which is not a dtype torch has"
    for key, value in config.items():
        if isinstance(value, dict) and "model_type" in value:
            problem = config_problem(value, f"{where}{key}.")
            if problem:
                return problem
    return None


def _whole(value, least: int) -> bool:
    """A whole number of at least `least` (1200.0 counts), or a list or object of them: one
    per stage or part (Swin's num_heads, LXMERT's num_hidden_layers)."""
    values = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
    return bool(values) and all((type(v) is int or (type(v) is float and v.is_integer()))
                                and v >= least for v in values)


def _kind(value) -> str:
    return {list: "list", str: "string", bool: "true/false", int: "number",
            float: "number"}.get(type(value), type(value).__name__)
