"""The tensors in what a module was given or returned, each named by where it sits."""

from __future__ import annotations

# Deeper than this, nesting is data, not a module's arguments or outputs.
MAX_DEPTH = 4


def named_tensors(value, prefix: str, out: list, tensor_type=None, depth: int = 0) -> None:
    """Appends to `out` a (name, tensor) pair per tensor in nested tuples, lists, dicts and
    ModelOutputs: `prefix[0]`, `prefix.key`. `tensor_type` is torch.Tensor, passed by callers
    that walk every module call so the walk needs no import."""
    if tensor_type is None:
        import torch

        tensor_type = torch.Tensor
    if depth > MAX_DEPTH or value is None:
        return
    if isinstance(value, tensor_type):
        out.append((prefix, value))
    elif isinstance(value, dict):  # ModelOutput is a dict too
        for key, item in value.items():
            if item is not None:
                named_tensors(item, f"{prefix}.{key}" if prefix else str(key), out, tensor_type,
                              depth + 1)
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            if item is not None:
                named_tensors(item, f"{prefix}[{i}]", out, tensor_type, depth + 1)
