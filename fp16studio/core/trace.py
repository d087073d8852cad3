"""Forward hooks that record, per module call, what went in and what came out.

Evidence for the rules: dtypes, devices, shapes, abs-max and inf/NaN counts of every floating
tensor, and a stack that says which module was running when an exception hit. Statistics stay
on the device as 0-d tensors during the pass and are read back once at the end (one sync).
"""

from __future__ import annotations

import math
import weakref
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
    """Context manager: hooks on every module while active, removed on exit even on error.

    Per floating tensor one `torch.aminmax` (the abs-max comes from its two ends, and inf/NaN
    show in them); the values are read back in one sync per device on exit. Counting inf/NaN
    needs a full pass over a tensor that is usually freed by then, so it is done only with
    `count_nonfinite=True`; otherwise a non-finite abs-max gives `nonfinite = 1` ("at least one")
    and `counted` is False: a caller that shows counts runs the pass again with counting on.
    A tensor seen again unchanged (a module's output that is its parent's output or the next
    module's input) is measured once; unchanged is known from its version counter, so tensors
    made under `torch.inference_mode()` (which have none) are measured every time.
    """

    def __init__(self, model, count_nonfinite: bool = False):
        self.model = model
        self.count_nonfinite = count_nonfinite
        self.calls: list[ModuleCall] = []
        self.stack: list[ModuleCall] = []
        self.counted = True
        self._handles = []
        self._params: dict = {}     # module -> (params, param_devices): fixed during a pass
        self._stats: list = []      # per measured tensor: (min, max[, nonfinite count]) 0-d
        self._infos: list = []      # (TensorInfo, index into _stats)
        self._seen: dict = {}       # id(tensor) -> (weakref, version, index into _stats)
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
        self._seen.clear()
        self._params.clear()
        self._materialize()
        return False

    @property
    def failed_in(self) -> ModuleCall | None:
        """The innermost module still running: where an exception hit."""
        return self.stack[-1] if self.stack else None

    def _pre_hook(self, name):
        def hook(module, args, kwargs):
            params, devices = self._module_params(module)
            call = ModuleCall(index=len(self.calls), name=name, cls=type(module).__name__,
                              params=params, param_devices=devices)
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

    def _module_params(self, module):
        known = self._params.get(module)
        if known is None:
            params, devices = {}, set()
            # _parameters: the module's own, without parameters()'s generator machinery, which
            # costs more than the rest of the hook on models of many small modules.
            for p in module._parameters.values():
                if p is None:
                    continue
                devices.add(str(p.device))
                if p.is_floating_point():
                    key = dtypes.name_of(p.dtype)
                    params[key] = params.get(key, 0) + p.numel()
            known = self._params[module] = (params, tuple(sorted(devices)))
        return dict(known[0]), known[1]

    def _describe(self, value, prefix) -> list[TensorInfo]:
        found = []
        _flatten(value, prefix, found)
        infos = []
        for name, tensor in found:
            info = TensorInfo(name or "input", dtypes.name_of(tensor.dtype), str(tensor.device),
                              tuple(tensor.shape))
            if tensor.is_floating_point() and tensor.numel() and tensor.device.type != "meta":
                self._infos.append((info, self._measure(tensor)))
            infos.append(info)
        return infos

    def _measure(self, tensor) -> int:
        """Index of the tensor's statistics, taken now unless it was seen unchanged before."""
        import torch

        version = None if tensor.is_inference() else tensor._version
        seen = self._seen.get(id(tensor))
        if seen is not None and version is not None and seen[1] == version \
                and seen[0]() is tensor:
            return seen[2]
        detached = tensor.detach()
        stats = tuple(torch.aminmax(detached))
        if self.count_nonfinite:
            stats += ((~torch.isfinite(detached)).sum(),)
        self._stats.append(stats)
        index = len(self._stats) - 1
        if version is not None:
            self._seen[id(tensor)] = (weakref.ref(tensor), version, index)
        return index

    def _materialize(self):
        import torch

        groups: dict = {}  # stacked per device and dtype, read back once per device
        for index, stats in enumerate(self._stats):
            groups.setdefault(stats[0].device, {}).setdefault(stats[0].dtype, []).append(index)
        values: dict = {}
        for by_dtype in groups.values():
            order, absmax, counts = [], [], []
            for indices in by_dtype.values():
                order += indices
                ends = [torch.stack([self._stats[i][end] for i in indices]) for end in (0, 1)]
                absmax.append(torch.maximum(ends[0].abs(), ends[1].abs()).float())  # NaN wins
                if self.count_nonfinite:
                    counts.append(torch.stack([self._stats[i][2] for i in indices]))
            absmax = torch.cat(absmax).tolist()
            counts = torch.cat(counts).tolist() if counts else [None] * len(order)
            values.update(zip(order, zip(absmax, counts)))
        for info, index in self._infos:
            info.absmax, count = values[index]
            if count is None and not math.isfinite(info.absmax):
                count, self.counted = 1, False
            info.nonfinite = count or 0
        self._stats.clear()
        self._infos.clear()


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
