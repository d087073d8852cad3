"""A spec's training steps (`train`, CONTRACT §1), run after its forward pass as the user's loop
runs them, mistakes included: the optimizer with its lr and eps, the model in its spec dtype,
the spec's autocast, a GradScaler (`torch.amp.GradScaler(device_type)`), gradients clipped where
the loop clips (before `unscale_` when `clip_before_unscale`), and `master_weights`: the optimizer
updates float32 parameters while the forward pass runs in half precision (autocast over float32
weights; half weights get a float32 master copy, their gradients copied in and the updated
values copied back), and `fp8`: the Linear layers FP8 takes, less `fp8_keep`, converted by
torchao for the steps (core/run/float8.py) and put back after.

Each step is measured with the same helpers as a traced script's steps (core/run/training.py)
into `Step` records; the rules that read them are in core/diagnostics/rules/training.py. The model is
left as it was found (weights, buffers, gradients, mode): the warm model serves the next run.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from ..common import dtypes
from ..common.errors import InputError
from ..spec.value import PipelineSpec
from .float8 import converted_for_training, fp8_support
from .pipeline import autocast_context
from .training import Float8Gradients, OptimizerProbe, Step, gradient_stats, loss_value

OPTIMIZER_CLASSES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD"}


@dataclass
class TrainRun:
    """What the training steps did."""

    steps: list = field(default_factory=list)          # Step, in order
    compute_dtype: str | None = None                    # the half dtype the forward ran in
    exception: BaseException | None = None              # a step that raised (the loop stops)
    fp8_support: tuple | None = None                    # float8.fp8_support, where train.fp8 is set


def compute_dtype(spec: PipelineSpec, model, device) -> str | None:
    """The half dtype the forward pass computes in: the autocast's where it acts on this
    device, else the dtype most of the weights hold; None for float32."""
    if spec.autocast and (spec.autocast_device or device.type) == device.type:
        return spec.autocast
    counts: dict = {}
    for param in model.parameters():
        if param.is_floating_point():
            name = dtypes.name_of(param.dtype)
            counts[name] = counts.get(name, 0) + param.numel()
    if not counts:
        return None
    most = max(counts, key=counts.get)
    return most if most in dtypes.HALF_NAMES else None


def run_train_steps(spec: PipelineSpec, model, batch: dict, device, order: dict) -> TrainRun:
    """Run `spec.train["steps"]` training steps on the batch. `order`: module name -> forward
    call index (gradients are listed in backward order). Raises InputError when the model
    computes no loss from the labels or cannot be converted as `train.fp8` asks; any other
    failure of a step ends the loop and is kept."""
    import torch

    train = spec.train
    run = TrainRun(compute_dtype=compute_dtype(spec, model, device),
                   fp8_support=fp8_support(train["fp8"], device) if train["fp8"] else None)
    # Dropout is on, as in the user's loop; seeded, so a diagnosis gives the same steps twice.
    devices = [device] if device.type == "cuda" else []
    with _model_restored(model), converted_for_training(train, model, device), \
            torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        model.train()
        loop = _Loop(spec, model, device, order)
        for index in range(train["steps"]):
            step = Step(index=index)
            run.steps.append(step)
            try:
                loop.step(step, batch)
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's loop failed: a finding
                run.exception = exc
                break
    return run


class _Loop:
    """The optimizer, scaler and master copy of one run, and one step of the user's loop."""

    def __init__(self, spec: PipelineSpec, model, device, order: dict):
        import torch

        train = spec.train
        self.spec, self.model, self.device, self.order = spec, model, device, order
        self.train = train
        trainable = [(n, p) for n, p in model.named_parameters()
                     if p.requires_grad and p.is_floating_point()]
        if not trainable:   # the optimizer would refuse an empty parameter list
            raise InputError(f"train: the model {spec.model!r} has no trainable parameters (all "
                             "frozen, or none floating): nothing for the optimizer to update")
        # master_weights: a float32 copy of each half parameter is what the optimizer updates.
        self.pairs = []                 # (model parameter, the parameter the optimizer updates)
        names = {}
        for name, param in trainable:
            master = param
            if train["master_weights"] and dtypes.name_of(param.dtype) in dtypes.HALF_NAMES:
                master = torch.nn.Parameter(param.detach().float())
            self.pairs.append((param, master))
            names[id(master)] = name
        self.names = names
        self.params = [master for _, master in self.pairs]
        kwargs = {"lr": train["lr"]}
        if train["eps"] is not None and train["optimizer"] != "sgd":
            kwargs["eps"] = train["eps"]
        cls = getattr(torch.optim, OPTIMIZER_CLASSES[train["optimizer"]])
        self.optimizer = cls(self.params, **kwargs)
        self.scaler = (torch.amp.GradScaler(device.type) if train["grad_scaler"] else None)
        self._stepped = False
        self.optimizer.register_step_post_hook(self._ran)

    def _ran(self, *_):
        self._stepped = True

    def step(self, step: Step, batch: dict):
        import torch

        train, scaler, optimizer = self.train, self.scaler, self.optimizer
        with autocast_context(self.spec, self.device):
            output = self.model(**batch)
        loss = output.get("loss") if hasattr(output, "get") else getattr(output, "loss", None)
        if loss is None or not torch.is_tensor(loss):
            raise InputError("train: the model computed no loss from the labels (a training "
                             "step needs one; pick a task whose model takes labels)")
        step.loss = loss_value(loss, None)
        if scaler is not None:
            step.scaled, step.scale = True, float(scaler.get_scale())
            step.scaler.append(("scale", None))
            loss = scaler.scale(loss)
        fp8 = Float8Gradients(loss, self.model.named_parameters())
        loss.backward()
        del output, loss
        step.grads = gradient_stats(self.model.named_parameters(), self.order, fp8.result())
        self._gradients_to_masters()
        clip = train["clip_grad_norm"]
        if scaler is not None and clip is not None and not train["clip_before_unscale"]:
            step.scaler.append(("unscale_", None))
            scaler.unscale_(optimizer)
        if clip is not None:  # before unscale_ when the user's loop clips there: still scaled
            step.scaler.append(("clip", None))
            torch.nn.utils.clip_grad_norm_(self.params, clip)
        probe = OptimizerProbe(optimizer, self.names)
        self._stepped = False
        if scaler is not None:
            step.scaler.append(("step", None))
            scaler.step(optimizer)      # skipped when the gradients hold inf/NaN
            step.scaler.append(("update", None))
            scaler.update()
        else:
            optimizer.step()
        if self._stepped:
            step.optimizers.append(probe.after(None))
        del probe
        optimizer.zero_grad(set_to_none=True)
        self._masters_to_model()
        step.done = True

    def _gradients_to_masters(self):
        for param, master in self.pairs:
            if master is not param:
                master.grad = None if param.grad is None else param.grad.detach().float()
                param.grad = None

    def _masters_to_model(self):
        import torch

        with torch.no_grad():
            for param, master in self.pairs:
                if master is not param:
                    param.copy_(master)


@contextlib.contextmanager
def _model_restored(model):
    """The model's weights, buffers, gradients and mode as they were, after the block."""
    import torch

    training = model.training
    saved = {name: tensor.detach().clone()
             for name, tensor in model.state_dict(keep_vars=True).items()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, tensor in model.state_dict(keep_vars=True).items():
                if name in saved:
                    tensor.copy_(saved[name])
        for param in model.parameters():
            param.grad = None
        model.train(training)
        del saved
