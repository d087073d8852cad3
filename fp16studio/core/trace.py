"""What went in and what came out of every module call of one forward pass.

Evidence for the rules: dtypes, devices, shapes, abs-max and inf/NaN counts of every floating
tensor, and a stack that says which module was running when an exception hit. Statistics of
CPU tensors are read as they are taken; on an accelerator they stay there as 0-d tensors during
the pass and are read back once at the end (one sync per device).
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
    """Context manager: every module call watched while active (see `ModuleHooks`), and
    nothing left behind on exit, even on error.

    Per floating tensor one `torch.aminmax` (the abs-max comes from its two ends, and inf/NaN
    show in them). On the CPU the values are read at once (nothing to wait for, and no 0-d
    tensors to keep); on an accelerator they stay there and are read back in one sync per
    device on exit. Counting inf/NaN needs a full pass over a tensor that is usually freed by
    then, so it is done only with `count_nonfinite=True`; otherwise a non-finite abs-max gives
    `nonfinite = 1` ("at least one") and `counted` is False: a caller that shows counts runs
    the pass again with counting on.
    A tensor seen again unchanged (a module's output that is its parent's output or the next
    module's input) is measured once; unchanged is known from its version counter, so tensors
    made under `torch.inference_mode()` (which have none) are measured every time.

    The callbacks run once per module call, 11k times in a pass of a 640-layer BERT, so they are
    kept lean: dtype and device names made once per pass, one tuple per distinct shape, and no
    garbage collection while the pass lasts (see `ModuleHooks`).
    """

    read_now_on = ("cpu",)  # device names whose statistics are read as they are taken

    def __init__(self, model, count_nonfinite: bool = False):
        self.model = model
        self.count_nonfinite = count_nonfinite
        self.calls: list[ModuleCall] = []
        self.stack: list[ModuleCall] = []
        self.counted = True
        self._hooks = None
        self._modules: dict = {}    # module -> (class name, params, param_devices), see below
        self._values: list = []     # per measured tensor: (abs-max, inf/NaN count) once read
        self._pending: dict = {}    # (device, dtype) -> [(index, min, max, count)], 0-d tensors
        self._waiting: list = []    # (TensorInfo, index into _values) until the read-back
        self._seen: dict = {}       # id(tensor) -> its entry (see _measure)
        self._label_cache: dict = {}  # (device, dtype) -> their names
        self._shapes: dict = {}     # shape -> the one tuple of it
        self._finished = 0

    def __enter__(self):
        import torch

        self._tensor_type = torch.Tensor
        self._aminmax, self._isfinite = torch.aminmax, torch.isfinite
        self._hooks = ModuleHooks(self.model, self._pre_hook, self._post_hook).__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._read_back()
        finally:
            # Before the hooks go and garbage collection resumes: less for it to walk.
            self._seen.clear()
            self._modules.clear()
            self._shapes.clear()
            self._values.clear()
            self._hooks.__exit__()
        return False

    @property
    def failed_in(self) -> ModuleCall | None:
        """The innermost module still running: where an exception hit."""
        return self.stack[-1] if self.stack else None

    def _pre_hook(self, name, module, args, kwargs):
        known = self._modules.get(module)
        if known is None:
            known = self._modules[module] = self._module_record(module)
        call = ModuleCall(len(self.calls), name, *known)
        if args:
            inputs, info, tensor_type = call.inputs, self._info, self._tensor_type
            for i, value in enumerate(args):  # args is a tuple: most often of tensors
                if isinstance(value, tensor_type):
                    inputs.append(info(_INPUT_NAMES[i] if i < 8 else f"input[{i}]", value))
                else:
                    self._describe(value, f"input[{i}]", inputs, depth=1)
        if kwargs:
            self._describe(kwargs, "", call.inputs)
        self.calls.append(call)
        self.stack.append(call)

    def _post_hook(self, module, args, kwargs, output):
        call = self.stack.pop()
        if isinstance(output, self._tensor_type):  # the common case, without the walk
            call.outputs.append(self._info("output", output))
        else:
            self._describe(output, "output", call.outputs)
        call.completed = True
        call.finished = self._finished
        self._finished += 1

    def _module_record(self, module) -> tuple:
        """(class name, floating dtype -> element count, devices) of the module's own
        parameters: fixed during a pass."""
        # _parameters: the module's own, without parameters()'s generator machinery, which
        # costs more than the rest of the hook on models of many small modules.
        own = module._parameters
        if not own:
            return type(module).__name__, {}, ()
        params, devices, labels_of = {}, [], self._label_cache
        for p in own.values():
            if p is None:
                continue
            key = (p.device, p.dtype)
            device, dtype, _, _, floating = labels_of.get(key) or self._labels(*key)
            if device not in devices:
                devices.append(device)
            if floating:
                params[dtype] = params.get(dtype, 0) + p.numel()
        return type(module).__name__, params, tuple(sorted(devices))

    def _labels(self, device, dtype) -> tuple[str, str, bool, bool, bool]:
        """('cuda:0', 'float16', measured, read now, floating): the names of a device and a
        dtype, whether a tensor of them is measured, whether its statistics are read as they
        are taken, and whether the dtype is a floating one; made once per pass."""
        key = (device, dtype)
        labels = self._label_cache.get(key)
        if labels is None:
            device_name = str(device)
            labels = self._label_cache[key] = (
                device_name, dtypes.name_of(dtype),
                dtype.is_floating_point and device_name != "meta",
                device_name in self.read_now_on, dtype.is_floating_point)
        return labels

    def _describe(self, value, prefix, out, depth=0):
        """Appends a TensorInfo per tensor in `value` (see `_flatten`)."""
        found = []
        _flatten(value, prefix, found, self._tensor_type, depth)
        for name, tensor in found:
            out.append(self._info(name or "input", tensor))

    def _info(self, name, tensor) -> TensorInfo:
        seen = self._seen.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
            # Seen unchanged (a module's output that is its parent's output or the next
            # module's input): measured once, and described once per name in a row.
            if seen[3] == name:
                return seen[4]
        else:
            seen = None
        key = (tensor.device, tensor.dtype)
        device, dtype_name, measured, now, _ = self._label_cache.get(key) or self._labels(*key)
        shape = self._shapes.get(tensor.shape)
        if shape is None:  # one tuple per distinct shape: fewer objects for the collector
            shape = tuple(tensor.shape)
            self._shapes[shape] = shape
        info = TensorInfo(name, dtype_name, device, shape)
        if seen is None:
            if not measured or not tensor.numel():
                return info
            seen = self._measure(tensor, key, now)
        value = self._values[seen[2]]
        if value is None:
            self._waiting.append((info, seen[2]))
        else:
            info.absmax, info.nonfinite = value
        seen[3], seen[4] = name, info
        return info

    def _measure(self, tensor, key, now: bool) -> list:
        """The tensor's entry of `_seen`, its statistics taken now (at index 2 in `_values`),
        and read now too where `now`, else on exit; `key` is the tensor's (device, dtype)."""
        detached = tensor.detach() if tensor.requires_grad else tensor
        low, high = self._aminmax(detached)
        count = (~self._isfinite(detached)).sum() if self.count_nonfinite else None
        index = len(self._values)
        if now:
            low = low.item()  # aminmax passes NaN on
            absmax = max(abs(low), abs(high.item())) if low == low else math.nan
            self._values.append(self._value(absmax, None if count is None else count.item()))
        else:
            self._values.append(None)
            self._pending.setdefault(key, []).append((index, low, high, count))
        # [tensor, its version, index into _values, last name described under, that TensorInfo]
        entry = [weakref.ref(tensor), tensor._version if not tensor.is_inference() else -1,
                 index, None, None]
        if entry[1] >= 0:  # inference tensors have no version counter: not known again
            self._seen[id(tensor)] = entry
        return entry

    def _value(self, absmax: float, count: int | None) -> tuple[float, int]:
        """(abs-max, inf/NaN count); without a count, 1 ("at least one") where the abs-max is
        not finite."""
        if count is None and not math.isfinite(absmax):
            count, self.counted = 1, False
        return absmax, count or 0

    def _read_back(self):
        """The statistics left on devices, stacked per device and dtype, read back in one sync
        per device."""
        import torch

        by_device: dict = {}
        for (device, dtype), rows in self._pending.items():
            by_device.setdefault(device, []).append((dtype, rows))
        for groups in by_device.values():
            order, absmax, counts = [], [], []
            # float64 where the device has it (a float64 tensor was measured there): float32
            # would turn 1e300 into inf; exact for every narrower dtype.
            wide = (torch.float64 if any(dtype == torch.float64 for dtype, _ in groups)
                    else torch.float32)
            for _, rows in groups:
                order += [row[0] for row in rows]
                ends = [torch.stack([row[end] for row in rows]) for end in (1, 2)]
                absmax.append(torch.maximum(ends[0].abs(), ends[1].abs()).to(wide))  # NaN wins
                if self.count_nonfinite:
                    counts.append(torch.stack([row[3] for row in rows]))
            counts = torch.cat(counts).tolist() if counts else [None] * len(order)
            for index, value, count in zip(order, torch.cat(absmax).tolist(), counts):
                self._values[index] = self._value(value, count)
        for info, index in self._waiting:
            info.absmax, info.nonfinite = self._values[index]
        self._pending.clear()
        self._waiting.clear()


_INPUT_NAMES = tuple(f"input[{i}]" for i in range(8))


def _flatten(value, prefix, out, tensor_type=None, depth=0):
    """(name, tensor) pairs from nested tuples, lists, dicts and ModelOutputs."""
    if tensor_type is None:
        import torch

        tensor_type = torch.Tensor
    if depth > 4 or value is None:
        return
    if isinstance(value, tensor_type):
        out.append((prefix, value))
    elif isinstance(value, dict):  # ModelOutput is a dict too
        for key, item in value.items():
            if item is not None:
                _flatten(item, f"{prefix}.{key}" if prefix else str(key), out, tensor_type,
                         depth + 1)
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            if item is not None:
                _flatten(item, f"{prefix}[{i}]", out, tensor_type, depth + 1)
