"""dtype names as the spec writes them, and their torch counterparts (torch imported lazily)."""

from __future__ import annotations

from .errors import InputError

FLOAT_NAMES = ("float32", "float16", "bfloat16")
HALF_NAMES = ("float16", "bfloat16")

_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32", "torch.float32": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16", "torch.float16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "torch.bfloat16": "bfloat16",
}

BYTES_PER_ELEMENT = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
                     "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def normalize(name: str | None, key: str = "dtype", allow_auto: bool = False) -> str | None:
    """Return the canonical dtype name for a spec value, or raise InputError."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise InputError(f"{key}: expected a dtype name such as 'float16', got {name!r}")
    low = name.strip().lower()
    if allow_auto and low == "auto":
        return "auto"
    if low in _ALIASES:
        return _ALIASES[low]
    choices = ", ".join(FLOAT_NAMES + (("auto",) if allow_auto else ()))
    raise InputError(f"{key}: unknown dtype {name!r} (use one of {choices}; fp16, half, bf16, fp32 also work)")


def to_torch(name: str):
    import torch

    return getattr(torch, name)


def name_of(dtype) -> str:
    """'float16' for torch.float16 (and for numpy/arrow-ish strings that already are names)."""
    return str(dtype).replace("torch.", "")


def is_floating_name(name: str) -> bool:
    return name.startswith(("float", "bfloat")) or name in ("half", "double")
