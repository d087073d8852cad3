"""What went in and what came out of every module call of one forward pass.

Evidence for the rules: dtypes, devices, shapes, abs-max and inf/NaN counts of every floating
tensor (taken by `TensorStats`), and a stack that says which module was running when an
exception hit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common import dtypes
from .module_hooks import ModuleHooks
from .named_tensors import named_tensors
from .pristine import guarded, ours
from .tensor_stats import TensorStats


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

    Statistics as `TensorStats` takes them: one `torch.aminmax` per floating tensor, a tensor
    seen again unchanged measured once, read on exit where they stay on an accelerator, and
    inf/NaN counted only with `count_nonfinite=True` (else `nonfinite = 1`, "at least one",
    and `counted` is False: a caller that shows counts runs the pass again with counting on).

    The callbacks run once per module call, 11k times in a pass of a 640-layer BERT, so they are
    kept lean: dtype and device names made once per pass, one tuple per distinct shape, and no
    garbage collection while the pass lasts (see `ModuleHooks`).
    """

    def __init__(self, model, count_nonfinite: bool = False):
        self.model = model
        self.calls: list[ModuleCall] = []
        self.stack: list[ModuleCall] = []
        self._hooks = None
        self._modules: dict = {}    # module -> (class name, params, param_devices), see below
        self._stats = TensorStats(count_nonfinite)
        # The statistics' containers and calls, bound once: the hot path reads them directly.
        self._seen, self._values, self._kinds = (self._stats.seen, self._stats.values,
                                                 self._stats.kinds)
        self._kind, self._measure = self._stats.kind, self._stats.measure
        self._waiting: list = []    # (TensorInfo, index into _values) until the read-back
        self._shapes: dict = {}     # shape -> the one tuple of it
        self._finished = 0

    def __enter__(self):
        import torch

        self._tensor_type = torch.Tensor
        # Our statistics reach torch as the script found it, not its wrappers (pristine.py).
        self._hooks = ModuleHooks(self.model, guarded(self._pre_hook),
                                  guarded(self._post_hook)).__enter__()
        return self

    def __exit__(self, *exc):
        try:
            with ours:
                self._read_back()
        finally:
            # Before the hooks go and garbage collection resumes: less for it to walk.
            self._stats.clear()
            self._modules.clear()
            self._shapes.clear()
            self._hooks.__exit__()
        return False

    @property
    def counted(self) -> bool:
        """Whether every inf/NaN count is exact (see `TensorStats`)."""
        return self._stats.counted

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
        params, devices, kinds = {}, [], self._kinds
        for p in own.values():
            if p is None:
                continue
            key = (p.device, p.dtype)
            device, dtype, _, _, floating = kinds.get(key) or self._kind(*key)
            if device not in devices:
                devices.append(device)
            if floating:
                params[dtype] = params.get(dtype, 0) + p.numel()
        return type(module).__name__, params, tuple(sorted(devices))

    def _describe(self, value, prefix, out, depth=0):
        """Appends a TensorInfo per tensor in `value` (see `named_tensors`)."""
        found = []
        named_tensors(value, prefix, found, self._tensor_type, depth)
        for name, tensor in found:
            out.append(self._info(name or "input", tensor))

    def _info(self, name, tensor) -> TensorInfo:
        seen = self._seen.get(id(tensor))
        # TensorStats.entry's test, inlined: this runs for each of a pass's 20k tensors.
        if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
            # Seen unchanged (a module's output that is its parent's output or the next
            # module's input): measured once, and described once per name in a row.
            if seen[3] == name:
                return seen[4]
        else:
            seen = None
        key = (tensor.device, tensor.dtype)
        device, dtype_name, measured, now, _ = self._kinds.get(key) or self._kind(*key)
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
            info.absmax, info.nonfinite, _ = value
        seen[3], seen[4] = name, info
        return info

    def _read_back(self):
        """The statistics left on devices into the descriptions that wait for them."""
        self._stats.read_back()
        for info, index in self._waiting:
            info.absmax, info.nonfinite = self._values[index][:2]
        self._waiting.clear()


_INPUT_NAMES = tuple(f"input[{i}]" for i in range(8))

