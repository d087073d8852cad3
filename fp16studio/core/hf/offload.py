"""Where accelerate placed a dispatched model's blocks: `hf_device_map`, set by
`from_pretrained(device_map=...)` and by `dispatch_model`. "cpu" and "disk" there mean offloaded:
the weights wait on the CPU or in `offload_folder`, and each forward brings them to the device the
block computes on (the map's first accelerator, or the CPU when the map names none)."""

from __future__ import annotations

OFFLOAD = ("cpu", "disk")


def block_devices(model) -> dict[str, str]:
    """Block name (relative to `model`, "" for the whole) -> where the map put it: "cuda:0",
    "cpu", "disk", "mps"; {} for a model not dispatched."""
    placement = getattr(model, "hf_device_map", None)
    if not isinstance(placement, dict):
        return {}
    return {name: f"cuda:{device}" if isinstance(device, int) else str(device)
            for name, device in placement.items()}


def offloaded_blocks(model) -> dict[str, str]:
    """The blocks the map offloads ("cpu" or "disk"); none where the whole model is simply on the
    CPU (device_map="auto" on a machine without a GPU: nothing is moved, nothing offloaded)."""
    placed = block_devices(model)
    if set(placed.values()) <= {"cpu"}:
        return {}
    return {name: device for name, device in placed.items() if device in OFFLOAD}
