"""What a checkpoint holds, from the safetensors files' JSON headers alone (no tensor read)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ..common.errors import InputError, first_line
from ..common.files import regular_file

# The safetensors library's own limit on a header (100 MB).
MAX_HEADER_BYTES = 100_000_000

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
    """The dtype of each tensor in a safetensors file, reading only its JSON header: a regular
    file (a FIFO would block), a header of bounded size, depth and shape, or InputError."""
    regular_file(path, "safetensors weights")
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > MAX_HEADER_BYTES:
                raise ValueError(f"a header of {length} bytes")
            header = json.loads(handle.read(length))
    except RecursionError:
        raise InputError(f"{path}: not a readable safetensors file (its header is nested too "
                         "deeply)") from None
    except (OSError, ValueError, struct.error) as exc:
        raise InputError(f"{path}: not a readable safetensors file ({first_line(exc)})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a readable safetensors file (its header is not an "
                         "object of tensors)")
    dtypes = []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if not isinstance(dtype, str):
            raise InputError(f"{path}: not a readable safetensors file (tensor {key!r} has "
                             "no dtype)")
        dtypes.append(_SAFETENSORS_DTYPES.get(dtype, dtype.lower()))
    return dtypes
