"""Blocks a device_map offloads to the CPU or disk that compute in float16 on a CPU:
offload-half."""

from __future__ import annotations

from ..findings import Finding
from . import edits
from .evidence import Evidence
from .words import model_origin, origin_first, origin_phrase, with_origin

OWNS = ("offload-half",)


def half_on_cpu_blocks(ev: Evidence) -> dict[str, str]:
    """The offloaded blocks whose forward was seen computing float16 on a CPU: block -> where
    the map put it. Seen, not guessed: a block brought to a GPU for its forward computes there."""
    found = {}
    for call in ev.calls:
        block = call.name if call.name in ev.offloaded else None
        if block is None or block in found:
            continue
        floats = [t for t in call.outputs if t.floating]
        if any(t.dtype == "float16" and t.device.split(":")[0] == "cpu" for t in floats):
            found[block] = ev.offloaded[block]
    return found


def rule_offload_half(ev: Evidence) -> list[Finding]:
    blocks = half_on_cpu_blocks(ev)
    if not blocks:
        return []
    placed = ", ".join(f"{name or 'the model'} on {device}" for name, device in blocks.items())
    origin = model_origin(ev, "float16")
    why = f" The weights are float16 because {origin_phrase(origin)}." if origin else ""
    load = (origin or {}).get("source") or ev.sources.get("load")   # the from_pretrained line
    fixes = [edits.model_dtype(d, ev.spec, load, ev.names) for d in ("bfloat16", "float32")]
    return [Finding(
        "offload-half", "warning", next(iter(blocks)) or "model",
        f"The device_map offloads {len(blocks)} block(s) ({placed}), and their forward computes "
        "in float16 on the CPU: most CPUs have no fast float16 path, and some operators no "
        "float16 kernel at all. "
        "Load the model in bfloat16 (the CPU's half dtype; offloaded weights take the same "
        f"memory and disk), or float32.{why}",
        with_origin({"offloaded": blocks, "compute device": "cpu", "dtype": "float16"}, origin),
        origin_first(ev, fixes))]
