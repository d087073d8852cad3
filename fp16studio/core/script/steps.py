"""Following a script's training steps after its first forward pass (`trace --steps N`).

A step opens at the script's `loss.backward()` (or `scaler.scale(loss)` before it) and closes
with its `optimizer.step()`; an `optimizer.step(closure)` (LBFGS) that runs the forward and
backward passes itself, perhaps several times, is one step whose loss and gradients are those of
its first evaluation (the loss it returns). The loss, the gradients of every traced model module by module
once the backward pass is over, what the optimizer updated and did to the weights
(torch's global optimizer hooks), and the GradScaler's calls and `clip_grad_norm_` in their
order. After N closed steps nothing more is measured: the wrappers stay (taking them off
from inside a hook is not allowed) but only pass the calls on.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import weakref
from dataclasses import dataclass

from ..common import dtypes
from ..diagnostics.report import RunError, StepRecord
from ..diagnostics.rules.dtypes import recomputed_mismatch
from ..diagnostics.rules.edits import Names, names_at, source_line
from ..diagnostics.rules.training import training_findings, training_stalled
from ..run.pristine import guarded, ours
from ..run.training import Float8Gradients, OptimizerProbe, Step, gradient_stats, loss_value
from .entry import DEFAULT_STEPS
from .tracer import Patches, ScriptTracer, UserCode


@dataclass(frozen=True)
class BackwardFailure:
    """An exception raised inside the script's `loss.backward()`, and the module whose forward
    the backward pass was running again when it hit (a gradient checkpoint's recomputation),
    if one was."""

    type: str
    message: str               # its first line, as the script's error says it
    source: dict | None        # the loss.backward() line
    step: int
    module: str | None = None  # the recomputed module, by its path in the traced model
    cls: str | None = None
    input_dtype: str | None = None
    param_dtype: str | None = None
    recomputed_at: dict | None = None   # the innermost line of the user's inside the backward
    autocast: object = None    # the autocast its model's forward ran under (script.recover)


@dataclass(frozen=True)
class ScalerRun:
    """What one GradScaler did over the whole script, past the followed steps too."""

    updates: int
    every_step_skipped: bool   # each update backed the scale off: no step ran
    scale: float
    source: dict | None        # the line of its first step()


class StepWatch:
    """Installed in the script's process beside the tracer (a ScriptWatch watcher)."""

    def __init__(self, user: UserCode, tracer: ScriptTracer, steps: int = DEFAULT_STEPS):
        self.user, self.tracer, self.limit = user, tracer, steps
        self.steps: list[Step] = []
        self._patches = Patches()
        self._hooks: list = []
        self._probes: dict = {}               # id(optimizer) -> OptimizerProbe of this step
        self._stepping: set = set()           # id of each optimizer inside its step() now
        self._scaled = None                   # (weakref to the scaled loss, scale)
        self._in_scaler = False
        self._scalers: dict = {}              # GradScaler -> [updates, source of its step()]
        self.failure: BackwardFailure | None = None   # the backward pass that raised

    # -- the step ---------------------------------------------------------------------------
    @property
    def following(self) -> bool:
        return self.limit > 0 and sum(s.done for s in self.steps) < self.limit

    def _current(self) -> Step | None:
        """The open step, opened now if the last one is closed; None once N are done."""
        if self.steps and not self.steps[-1].done:
            return self.steps[-1]
        if not self.following or not self.tracer.traces:
            return None            # no model ran yet: a backward of the script's own tensors
        self.steps.append(Step(index=len(self.steps)))
        return self.steps[-1]

    def _source(self) -> dict | None:
        return self.user.frame_source(sys._getframe(2))

    def _named_parameters(self) -> list:
        """Every traced model's parameters, named as in that model (a shared one once)."""
        named, seen = [], set()
        for root in self.tracer.roots():
            for name, param in root.named_parameters():
                if id(param) not in seen:
                    seen.add(id(param))
                    named.append((name, param))
        return named

    def _forward_order(self) -> dict:
        order: dict = {}
        for trace in self.tracer.traces:
            for call in trace.calls:
                order.setdefault(call.name, call.index)
        return order

    # -- installing ---------------------------------------------------------------------------
    def install(self):
        import torch
        import torch.nn.utils.clip_grad as clip_grad
        from torch.optim import optimizer as optim

        self._patches.set(torch.Tensor, "backward", self._backward(torch.Tensor.backward))
        for name in ("scale", "unscale_", "step", "update"):
            self._patches.set(torch.amp.GradScaler, name, self._scaler_call(
                torch.amp.GradScaler.__dict__[name], name))
        clip = self._clip(clip_grad.clip_grad_norm_)
        for owner in (torch.nn.utils, clip_grad):
            self._patches.set(owner, "clip_grad_norm_", clip)
        self._hooks = [optim.register_optimizer_step_pre_hook(guarded(self._before_step)),
                       optim.register_optimizer_step_post_hook(guarded(self._after_step))]

    def uninstall(self):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._patches.undo()


    # -- wrappers -------------------------------------------------------------------------------
    def _backward(self, original):
        watch = self

        def backward(tensor, *args, **kwargs):   # one frame: user_ops looks through it
            step = watch._current()
            # A closure's second and later evaluations inside one optimizer.step(): the step
            # keeps its first (the loss step() returns, the gradients it starts from).
            measured = step is not None and not (watch._stepping and step.source is not None)
            if measured:
                step.source = watch._source()
                scaled = watch._scaled
                scale = scaled[1] if scaled is not None and scaled[0]() is tensor else None
                step.scaled, step.scale = scale is not None, scale or step.scale
                with ours:
                    step.loss = loss_value(tensor, scale)
                    named = watch._named_parameters()
                    fp8 = Float8Gradients(tensor, named)
            try:
                result = original(tensor, *args, **kwargs)
            except Exception as exc:
                # A backward inside this one (a recomputation's) raised first: the
                # outermost, the script's loss.backward(), is where the failure is placed.
                watch.failure = watch._failed_backward(exc, watch.user.frame_source(
                    sys._getframe(1)))
                if measured:
                    with ours:
                        fp8.result()    # its hooks off the graph the script may still hold
                raise
            if measured:
                with ours:
                    step.grads = gradient_stats(named, watch._forward_order(), fp8.result())
            return result

        return backward

    def _failed_backward(self, exc: Exception, source: dict | None) -> BackwardFailure:
        from ..common.errors import first_line

        failure = BackwardFailure(type(exc).__name__, first_line(exc, 500), source,
                                  self.steps[-1].index if self.steps else 0)
        frame = _innermost_forward(exc.__traceback__)
        trace, name = self.tracer.place(frame.f_locals["self"]) if frame else (None, None)
        if trace is None:
            return failure
        module = frame.f_locals["self"]
        tensors = [v for v in frame.f_locals.values() if _is_floating_input(v)]
        param = next((p for p in module.parameters() if p.is_floating_point()), None)
        return dataclasses.replace(
            failure, module=name, cls=type(module).__name__,
            input_dtype=dtypes.name_of(tensors[0].dtype) if tensors else None,
            param_dtype=dtypes.name_of(param.dtype) if param is not None else None,
            recomputed_at=self.user.traceback_source(exc.__traceback__),
            autocast=trace.autocast)

    def _raised(self, error: RunError | None) -> bool:
        """Whether the script's error is the one its backward pass raised."""
        return (error is not None and self.failure is not None
                and self.failure.message == error.message)

    def placed(self, error: RunError | None) -> RunError | None:
        """The script's error, at its loss.backward() line when the backward pass raised it
        (the innermost line of the user's would be code the backward ran again)."""
        if not self._raised(error):
            return error
        failure = self.failure
        return dataclasses.replace(error, stage="backward", module=failure.module, source=failure.source)

    def _scaler_call(self, original, name):
        watch = self

        def call(scaler, *args, **kwargs):
            if name in ("step", "update") and not watch._in_scaler:   # counted to the end
                seen = watch._scalers.setdefault(scaler, [0, None])
                seen[0] += name == "update"
                seen[1] = seen[1] or (watch._source() if name == "step" else None)
            # The scaler's calls of its own (step() calls unscale_()) are not the user's order.
            step = watch._current() if scaler.is_enabled() and not watch._in_scaler else None
            if step is None:
                return original(scaler, *args, **kwargs)
            step.scaler.append((name, watch._source()))
            if name == "scale":
                step.scale = float(scaler.get_scale())
            watch._in_scaler = True
            try:
                result = original(scaler, *args, **kwargs)
            finally:
                watch._in_scaler = False
            if name == "scale" and hasattr(result, "dtype"):
                watch._scaled = (weakref.ref(result), step.scale)
            elif name == "step":
                step.done = True   # run, or skipped for inf/NaN gradients: the step is over
            return result

        return call

    def _clip(self, original):
        watch = self

        def clip_grad_norm_(*args, **kwargs):
            step = watch.steps[-1] if watch.steps and not watch.steps[-1].done else None
            if step is not None:
                step.scaler.append(("clip", watch._source()))
            return original(*args, **kwargs)

        return clip_grad_norm_

    def _before_step(self, optimizer, args, kwargs):
        self._stepping.add(id(optimizer))
        # With a closure the step opens inside step() (its backward): probe from here on.
        if self.following:
            names = {id(p): n for n, p in self._named_parameters()}
            self._probes[id(optimizer)] = OptimizerProbe(optimizer, names)

    def _after_step(self, optimizer, args, kwargs):
        self._stepping.discard(id(optimizer))
        probe = self._probes.pop(id(optimizer), None)
        if probe is None or not self.steps or self.steps[-1].done:
            return
        step = self.steps[-1]
        step.optimizers.append(probe.after(self.user.frame_source(sys._getframe(1))))
        step.done = True

    # -- reading ------------------------------------------------------------------------------
    def compute_dtype(self) -> str | None:
        """The half dtype the first model's forward ran in: its autocast's, else its weights'."""
        for trace in self.tracer.traces:
            if trace.autocast is not None and trace.autocast.dtype in dtypes.HALF_NAMES:
                return trace.autocast.dtype
            for call in trace.calls:
                if call.param_dtype in dtypes.HALF_NAMES:
                    return call.param_dtype
        return None

    def scaler_runs(self) -> list[ScalerRun]:
        """Each GradScaler's updates; all skipped when its scale is its first one backed off
        at each (it grows only after `growth_interval` steps that ran)."""
        runs = []
        for scaler, (updates, source) in self._scalers.items():
            if not updates or not scaler.is_enabled() or scaler._scale is None:
                continue
            scale = float(scaler.get_scale())
            skipped = math.isclose(scale, scaler._init_scale * scaler._backoff_factor ** updates,
                                   rel_tol=1e-6)
            runs.append(ScalerRun(updates, skipped, scale, source))
        return runs

    def names(self) -> Names:
        """The user's names at the first model's call and at the first step's
        `loss.backward()` and `optimizer.step()` (or `scaler.step(optimizer)`)."""
        first = self.tracer.traces[0] if self.tracer.traces else None
        call, bound = (source_line(first.source), first.bound) if first else (None, None)
        step = next((s for s in self.steps if s.source is not None), None)
        if step is None:
            return names_at(call, bound=bound)
        scaled = next((source for name, source in step.scaler if name == "step"), None)
        stepped = scaled or next((o.source for o in step.optimizers if o.source), None)
        return names_at(call, source_line(step.source), source_line(stepped),
                        scaler_step=scaled is not None, bound=bound)

    def findings(self, error: RunError | None = None):
        dtype = self.compute_dtype()
        names = self.names()
        recomputed = recomputed_mismatch(self.failure) if self._raised(error) else None
        return ([recomputed] if recomputed else []) + \
            training_findings(self.steps, dtype, error=error, names=names) + \
            training_stalled(self.steps, self.scaler_runs(), dtype, names)

    def documents(self) -> list[StepRecord]:
        return [StepRecord.of(step) for step in self.steps]


def _innermost_forward(tb):
    """The innermost frame of a module's `forward` in a traceback, None where none ran."""
    import torch

    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "forward" and isinstance(frame.f_locals.get("self"),
                                                            torch.nn.Module):
            found = frame
        tb = tb.tb_next
    return found


def _is_floating_input(value) -> bool:
    import torch

    return (torch.is_tensor(value) and value.is_floating_point()
            and not isinstance(value, torch.nn.Parameter))
