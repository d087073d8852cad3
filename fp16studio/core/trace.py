"""Forward hooks that record, per module call, what went in and what came out.

Evidence for the rules: dtypes, devices, shapes, abs-max and inf/NaN counts of every floating
tensor, and a stack that says which module was running when an exception hit. Statistics stay
on the device as 0-d tensors during the pass and are read back once at the end (one sync).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import dtypes


@dataclass
class TensorInfo:
    name: str
    dtype: str
    device: str
    shape: tuple
    absmax: float | None = None
    nonfinite: int = 0

    @property
    def floating(self) -> bool:
        return dtypes.is_floating_name(self.dtype)


@dataclass
class ModuleCall:
    index: int                 # order in which the call started
    name: str                  # module path, "" for the model itself
    cls: str
    params: dict               # floating dtype -> element count, of the module's own parameters
    param_devices: tuple
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    completed: bool = False
    finished: int = -1         # order in which the call returned: inner modules before outer

    @property
    def param_dtype(self) -> str | None:
        """The module's own floating parameter dtype when it is a single one."""
        return next(iter(self.params)) if len(self.params) == 1 else None

    @property
    def nonfinite_out(self) -> int:
        return sum(t.nonfinite for t in self.outputs)

    @property
    def nonfinite_in(self) -> int:
        return sum(t.nonfinite for t in self.inputs)


class Tracer:
    """Context manager: hooks on every module while active, removed on exit even on error."""

    def __init__(self, model):
        self.model = model
        self.calls: list[ModuleCall] = []
        self.stack: list[ModuleCall] = []
        self._handles = []
        self._pending = []  # (TensorInfo, absmax tensor, nonfinite tensor)
        self._finished = 0

    def __enter__(self):
        for name, module in self.model.named_modules():
            self._handles.append(module.register_forward_pre_hook(
                self._pre_hook(name), with_kwargs=True))
            self._handles.append(module.register_forward_hook(
                self._post_hook(), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._materialize()
        return False

    @property
    def failed_in(self) -> ModuleCall | None:
        """The innermost module still running: where an exception hit."""
        return self.stack[-1] if self.stack else None

    def _pre_hook(self, name):
        def hook(module, args, kwargs):
            params, devices = {}, set()
            for p in module.parameters(recurse=False):
                devices.add(str(p.device))
                if p.is_floating_point():
                    key = dtypes.name_of(p.dtype)
                    params[key] = params.get(key, 0) + p.numel()
            call = ModuleCall(index=len(self.calls), name=name, cls=type(module).__name__,
                              params=params, param_devices=tuple(sorted(devices)))
            call.inputs = self._describe(args, "input") + self._describe(kwargs, "")
            self.calls.append(call)
            self.stack.append(call)
        return hook

    def _post_hook(self):
        def hook(module, args, kwargs, output):
            call = self.stack.pop()
            call.outputs = self._describe(output, "output")
            call.completed = True
            call.finished = self._finished
            self._finished += 1
        return hook

    def _describe(self, value, prefix) -> list[TensorInfo]:
        import torch

        found = []
        _flatten(value, prefix, found)
        infos = []
        for name, tensor in found:
            info = TensorInfo(name or "input", dtypes.name_of(tensor.dtype), str(tensor.device),
                              tuple(tensor.shape))
            if tensor.is_floating_point() and tensor.numel() and tensor.device.type != "meta":
                detached = tensor.detach()
                self._pending.append((info, detached.abs().max(),
                                      (~torch.isfinite(detached)).sum()))
            infos.append(info)
        return infos

    def _materialize(self):
        import torch

        if not self._pending:
            return
        by_device: dict = {}
        for item in self._pending:
            by_device.setdefault(item[1].device, []).append(item)
        for items in by_device.values():
            maxes = torch.stack([m.float() for _, m, _ in items]).tolist()
            counts = torch.stack([c for _, _, c in items]).tolist()
            for (info, _, _), absmax, count in zip(items, maxes, counts):
                info.absmax, info.nonfinite = absmax, int(count)
        self._pending.clear()


def _flatten(value, prefix, out, depth=0):
    """(name, tensor) pairs from nested tuples, lists, dicts and ModelOutputs."""
    import torch

    if depth > 4:
        return
    if torch.is_tensor(value):
        out.append((prefix, value))
    elif isinstance(value, dict):  # ModelOutput is a dict too
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out, depth + 1)
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _flatten(item, f"{prefix}[{i}]", out, depth + 1)
