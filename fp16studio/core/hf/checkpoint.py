"""What a checkpoint holds, from the safetensors files' JSON headers alone (no tensor read)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..common.errors import InputError

_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
                       "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                       "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def checkpoint_dtypes(folder: Path) -> dict | None:
    """dtype -> tensor count over the safetensors files' headers, or None with no checkpoint."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    counts: dict[str, int] = {}
    for path in files:
        for dtype in safetensors_header_dtypes(path):
            counts[dtype] = counts.get(dtype, 0) + 1
    return counts


def safetensors_header_dtypes(path: Path) -> list[str]:
    """The dtype of each tensor in a safetensors file, reading only its JSON header."""
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100_000_000:
                raise ValueError("header too large")
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error) as exc:
        raise InputError(f"{path.name}: not a readable safetensors file ({exc})") from None
    return [_SAFETENSORS_DTYPES.get(entry["dtype"], entry["dtype"].lower())
            for key, entry in header.items() if key != "__metadata__"]
