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
from .module_hooks import ModuleHooks


@dataclass(slots=True)
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


@dataclass(slots=True)
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

    The hooks run once per module call, 11k times in a pass of a 640-layer BERT, so they are
    kept lean: the same two hook functions on every module (not a closure per module), dtype
    and device names made once per pass, and no garbage collection while they are in (see
    `ModuleHooks`).
    """

    def __init__(self, model, count_nonfinite: bool = False):
        self.model = model
        self.count_nonfinite = count_nonfinite
        self.calls: list[ModuleCall] = []
        self.stack: list[ModuleCall] = []
        self.counted = True
        self._hooks = None
        self._params: dict = {}     # module -> (params, param_devices): fixed during a pass
        self._stats: list = []      # per measured tensor: (min, max[, nonfinite count]) 0-d
        self._groups: dict = {}     # (device, dtype) -> indices into _stats
        self._infos: list = []      # (TensorInfo, index into _stats)
        self._seen: dict = {}       # id(tensor) -> (weakref, version, index into _stats)
        self._label_cache: dict = {}  # (device, dtype) -> their names
        self._finished = 0

    def __enter__(self):
        import torch

        self._tensor_type = torch.Tensor
        self._hooks = ModuleHooks(self.model, self._pre_hook, self._post_hook).__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._materialize()
        finally:
            self._hooks.__exit__()  # after the read-back, which garbage collection would slow
            self._seen.clear()
            self._params.clear()
        return False

    @property
    def failed_in(self) -> ModuleCall | None:
        """The innermost module still running: where an exception hit."""
        return self.stack[-1] if self.stack else None

    def _pre_hook(self, name, module, args, kwargs):
        params, devices = self._module_params(module)
        call = ModuleCall(len(self.calls), name, type(module).__name__, params, devices)
        if args:
            self._describe(args, "input", call.inputs)
        if kwargs:
            self._describe(kwargs, "", call.inputs)
        self.calls.append(call)
        self.stack.append(call)

    def _post_hook(self, module, args, kwargs, output):
        call = self.stack.pop()
        self._describe(output, "output", call.outputs)
        call.completed = True
        call.finished = self._finished
        self._finished += 1

    def _module_params(self, module):
        known = self._params.get(module)
        if known is None:
            params, devices = {}, set()
            # _parameters: the module's own, without parameters()'s generator machinery, which
            # costs more than the rest of the hook on models of many small modules.
            for p in module._parameters.values():
                if p is None:
                    continue
                device, key = self._labels(p.device, p.dtype)
                devices.add(device)
                if p.is_floating_point():
                    params[key] = params.get(key, 0) + p.numel()
            known = self._params[module] = (params, tuple(sorted(devices)))
        return known

    def _labels(self, device, dtype) -> tuple[str, str]:
        """('cuda:0', 'float16'): the names of a device and a dtype, made once per pass."""
        key = (device, dtype)
        labels = self._label_cache.get(key)
        if labels is None:
            labels = self._label_cache[key] = (str(device), dtypes.name_of(dtype))
        return labels

    def _describe(self, value, prefix, out):
        """Appends a TensorInfo per tensor in `value` (see `_flatten`)."""
        if isinstance(value, self._tensor_type):  # the common case, without the walk
            out.append(self._info(prefix or "input", value))
            return
        found = []
        _flatten(value, prefix, found)
        for name, tensor in found:
            out.append(self._info(name or "input", tensor))

    def _info(self, name, tensor) -> TensorInfo:
        device, dtype = tensor.device, tensor.dtype
        device_name, dtype_name = self._labels(device, dtype)
        info = TensorInfo(name, dtype_name, device_name, tuple(tensor.shape))
        if dtype.is_floating_point and device_name != "meta":
            seen = self._seen.get(id(tensor))
            if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
                self._infos.append((info, seen[2]))  # seen unchanged: measured once
            elif tensor.numel():
                self._infos.append((info, self._measure(tensor, (device, dtype))))
        return info

    def _measure(self, tensor, group) -> int:
        """Index of the tensor's statistics, taken now; `group` is its (device, dtype)."""
        import torch

        detached = tensor.detach()
        stats = tuple(torch.aminmax(detached))
        if self.count_nonfinite:
            stats += ((~torch.isfinite(detached)).sum(),)
        self._stats.append(stats)
        index = len(self._stats) - 1
        self._groups.setdefault(group, []).append(index)
        if not tensor.is_inference():  # inference tensors have no version counter
            self._seen[id(tensor)] = (weakref.ref(tensor), tensor._version, index)
        return index

    def _materialize(self):
        import torch

        absmax_of, count_of = [0.0] * len(self._stats), [None] * len(self._stats)
        by_device: dict = {}  # stacked per device and dtype, read back once per device
        for (device, _), indices in self._groups.items():
            by_device.setdefault(device, []).append(indices)
        for groups in by_device.values():
            order, absmax, counts = [], [], []
            for indices in groups:
                order += indices
                ends = [torch.stack([self._stats[i][end] for i in indices]) for end in (0, 1)]
                absmax.append(torch.maximum(ends[0].abs(), ends[1].abs()).float())  # NaN wins
                if self.count_nonfinite:
                    counts.append(torch.stack([self._stats[i][2] for i in indices]))
            for index, value in zip(order, torch.cat(absmax).tolist()):
                absmax_of[index] = value
            if counts:
                for index, value in zip(order, torch.cat(counts).tolist()):
                    count_of[index] = value
        for info, index in self._infos:
            info.absmax = absmax = absmax_of[index]
            count = count_of[index]
            if count is None and not math.isfinite(absmax):
                count, self.counted = 1, False
            info.nonfinite = count or 0
        self._stats.clear()
        self._groups.clear()
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
