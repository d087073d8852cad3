"""How numbers read in the window: sizes, shapes, abs-max, counts."""

from __future__ import annotations

import math

from fp16studio.core.units import format_bytes


def size(nbytes: int | None) -> str:
    return "" if nbytes is None else format_bytes(nbytes)


def shape(dims) -> str:
    if dims is None:
        return ""
    return "(" + ", ".join(str(d) for d in dims) + ")" if dims else "scalar"


def absmax(value: float | None) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return f"{value:.4g}"


def value(v) -> str:
    """A spec value as a person reads it: null as an em dash, lists comma-separated."""
    if v is None:
        return "—"
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) if not isinstance(x, dict) else x.get("id", str(x)) for x in v) or "[]"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "{}"
    return str(v)
