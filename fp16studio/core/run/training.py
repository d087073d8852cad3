"""What one training step shows: the loss, the gradients module by module, the optimizer.

Plain records, measured with torch and kept as Python values, so a step can be read after the
tensors are gone. The rules that read them are in core/diagnostics/rules/training.py; the watchers
that take them in a user's script, in core/script/steps.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common import dtypes
from ..common.precision import float8_scale, float8_smallest
from .pristine import guarded

# torchao's Float8Linear runs its matmuls in this autograd Function: its backward node holds the
# layer's config and its saved weight, and receives the gradient reaching the layer's output.
FLOAT8_BACKWARD = "matmul_with_hp_or_float8_argsBackward"


@dataclass(slots=True)
class GradStat:
    """The gradients of one module's own parameters after a backward pass."""

    module: str
    dtype: str
    device: str
    numel: int
    nonfinite: int
    zero: int
    subnormal: int             # non-zero, below the dtype's smallest normal: precision lost
    absmax: float              # of the finite elements
    # A layer converted to FP8 (torchao): the float8 dtype its backward pass casts the gradient
    # reaching its output to, and the share of that gradient's non-zero values under the
    # dtype's smallest step once scaled (lost to both backward matmuls).
    fp8_dtype: str | None = None
    fp8_underflow: float | None = None

    @property
    def subnormal_share(self) -> float:
        return self.subnormal / self.numel if self.numel else 0.0


@dataclass
class OptimizerStep:
    """One `optimizer.step()`: what it updated, in which dtype, and what it did to them."""

    cls: str
    param_dtypes: dict                  # floating dtype -> parameter count
    state_dtypes: dict                  # floating dtype -> state tensor count (after the step)
    eps: float | None
    eps_in_dtype: dict                  # half dtype of parameters -> eps as that dtype holds it
    lr: float | None
    broke: str | None = None            # the first parameter finite before, non-finite after
    rounded_away: dict = field(default_factory=dict)  # half dtype -> share of updates lost
    source: dict | None = None
    module: str = "torch.optim.adamw"   # the class's module

    @property
    def code(self) -> str:
        """The class as code writes it: torch.optim.AdamW; a library's by its own name."""
        return f"torch.optim.{self.cls}" if self.module.startswith("torch.optim") else self.cls


@dataclass
class Step:
    """One training step of the script: forward, backward, optimizer (CONTRACT §3 `steps`)."""

    index: int
    loss: float | None = None
    source: dict | None = None          # the line that called backward
    grads: list = field(default_factory=list)          # GradStat, in backward order
    optimizers: list = field(default_factory=list)     # OptimizerStep
    scaler: list = field(default_factory=list)         # ("scale" | "unscale_" | "clip" | ...,
    #                                                     source): the GradScaler's calls in order
    scaled: bool = False                # the loss was multiplied by a GradScaler
    scale: float | None = None
    done: bool = False                  # its optimizer step ran (or was skipped by the scaler)

    @property
    def finite(self) -> bool:
        return self.loss is None or self.loss == self.loss and abs(self.loss) != float("inf")

    @property
    def grad_nonfinite(self) -> int:
        return sum(1 for g in self.grads if g.nonfinite)

    @property
    def first_nonfinite_grad(self) -> GradStat | None:
        return next((g for g in self.grads if g.nonfinite), None)

    def first_nonfinite(self) -> dict | None:
        """Where this step first produced inf/NaN: {"phase", "location"}, or None."""
        if not self.finite:
            return {"phase": "forward", "location": "loss"}
        grad = self.first_nonfinite_grad
        if grad is not None:
            return {"phase": "backward", "location": grad.module}
        broke = next((o.broke for o in self.optimizers if o.broke), None)
        if broke is not None:
            return {"phase": "optimizer", "location": broke}
        return None



def loss_value(loss, scale: float | None) -> float | None:
    """The loss a step reports: a scalar tensor's value, unscaled when a GradScaler scaled it."""
    if getattr(loss, "numel", lambda: 0)() != 1:
        return None
    value = float(loss.detach().float())
    return value / scale if scale else value


def gradient_stats(named_params, order: dict, fp8: dict | None = None) -> list[GradStat]:
    """Each module's own parameters' gradients, in backward order: the modules that ran last in
    the forward pass first (`order`: module name -> forward call index). `fp8`: what the
    backward pass cast to float8, per module (`Float8Gradients.result`)."""
    import torch

    by_module: dict = {}
    for name, param in named_params:
        grad = param.grad
        if grad is None or not grad.is_floating_point():
            continue
        module = name.rpartition(".")[0]
        g = stored_values(grad.detach())
        tiny = torch.finfo(g.dtype).tiny
        finite = torch.isfinite(g)
        nonzero = g != 0
        size = g.abs()
        *counts, absmax = torch.stack([
            (~finite).sum().double(), (~nonzero).sum().double(),
            (nonzero & finite & (size < tiny)).sum().double(),
            size.masked_fill(~finite, 0).max().double()]).tolist()
        entry = by_module.setdefault(module, [dtypes.name_of(g.dtype), str(g.device), 0, 0, 0, 0,
                                              0.0])
        entry[2] += g.numel()
        for i, count in enumerate(counts):
            entry[3 + i] += int(count)
        entry[6] = max(entry[6], absmax)
    stats = [GradStat(module, *values, *(fp8 or {}).get(module, ()))
             for module, values in by_module.items()]
    stats.sort(key=lambda s: -order.get(s.module, -1))
    return stats


class Float8Gradients:
    """The gradient reaching each torchao Float8Linear as its backward pass casts it to float8
    (its `cast_config_grad_output`: e5m2 in the tensorwise recipe, scaled by the abs-max; per
    row where the recipe is rowwise), measured by a pre-hook on the layer's node in the loss's
    autograd graph, found before the backward pass runs. No node, no cost: a model that was
    not converted is not touched."""

    def __init__(self, loss, named_params):
        import functools

        names = {id(param): name.rpartition(".")[0] for name, param in named_params}
        self.layers: dict = {}          # module -> [dtype name, under, non-zero]
        self.handles = []
        for node in _graph(getattr(loss, "grad_fn", None)):
            if type(node).__name__ != FLOAT8_BACKWARD:
                continue
            weight = node.saved_tensors[1]          # the layer's weight, transposed (a view)
            module = names.get(id(weight._base if weight._base is not None else weight))
            if module is not None:
                self.handles.append(node.register_prehook(
                    guarded(functools.partial(self._measure, module, node.config))))

    def _measure(self, module: str, config, grad_outputs):
        import torch

        grad = grad_outputs[0]
        if grad is None:
            return None
        cast = config.cast_config_grad_output
        grad = grad.detach().reshape(-1, grad.shape[-1]).float()
        rowwise = cast.scaling_granularity.value == "axiswise"
        amax = grad.abs().amax(dim=-1, keepdim=True) if rowwise else grad.abs().amax()
        scaled = grad * float8_scale(amax, torch.finfo(cast.target_dtype).max,
                                     config.round_scales_to_power_of_2)
        magnitude = scaled.abs()
        zeros = int(torch.count_nonzero(magnitude == 0))
        entry = self.layers.setdefault(module, [dtypes.name_of(cast.target_dtype), 0, 0])
        entry[1] += int(torch.count_nonzero(
            magnitude < float8_smallest(cast.target_dtype))) - zeros
        entry[2] += grad.numel() - zeros
        return None

    def result(self) -> dict:
        """module -> (float8 dtype, share of the gradient's non-zero values under its step)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
        return {module: (dtype, under / nonzero if nonzero else 0.0)
                for module, (dtype, under, nonzero) in self.layers.items()}


def _graph(root):
    """Every node of an autograd graph from `root`, once."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(child for child, _ in node.next_functions)


def stored_values(grad):
    """The elements a gradient holds: a sparse one's stored values (an Embedding with
    sparse=True), which the elementwise statistics can read; a sharded one's (FSDP2's DTensor)
    shard on this rank, read without a collective; a dense one as it is."""
    import torch

    if hasattr(grad, "to_local"):
        grad = grad.to_local()
    if grad.layout == torch.strided:
        return grad
    return grad.coalesce().values() if grad.is_sparse else grad.values()


class OptimizerProbe:
    """Before and after one `optimizer.step()`: half parameters that the step broke, or whose
    updates it rounded away (an update below the weight's resolution leaves it unchanged)."""

    def __init__(self, optimizer, names: dict):
        import torch

        self.optimizer = optimizer
        self.names = names              # id(parameter) -> name
        self.params = [p for group in optimizer.param_groups for p in group["params"]
                       if p.grad is not None and p.is_floating_point()]
        self.finite_before = {id(p): bool(torch.isfinite(p).all()) for p in self.params}
        # Copies only of half parameters: a float32 master copy loses no update.
        self.before = {id(p): p.detach().clone() for p in self.params
                       if dtypes.name_of(p.dtype) in dtypes.HALF_NAMES}

    def after(self, source: dict | None) -> OptimizerStep:
        import torch

        group = self.optimizer.param_groups[0] if self.optimizer.param_groups else {}
        eps = group.get("eps")
        param_dtypes: dict = {}
        for group_ in self.optimizer.param_groups:
            for p in group_["params"]:
                if p.is_floating_point():
                    name = dtypes.name_of(p.dtype)
                    param_dtypes[name] = param_dtypes.get(name, 0) + 1
        state_dtypes: dict = {}
        for state in self.optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value) and value.is_floating_point() and value.dim():
                    name = dtypes.name_of(value.dtype)
                    state_dtypes[name] = state_dtypes.get(name, 0) + 1
        eps_in = {}
        if isinstance(eps, (int, float)):
            eps_in = {d: float(torch.tensor(eps, dtype=dtypes.to_torch(d)))
                      for d in param_dtypes if d in dtypes.HALF_NAMES}
        broke = next((self.names.get(id(p), "parameter") for p in self.params
                      if self.finite_before[id(p)] and not bool(torch.isfinite(p).all())), None)
        cls = type(self.optimizer)
        return OptimizerStep(cls.__name__, param_dtypes, state_dtypes,
                             eps if isinstance(eps, (int, float)) else None, eps_in,
                             group.get("lr") if isinstance(group.get("lr"), (int, float)) else None,
                             broke=broke, rounded_away=self._rounded_away(), source=source,
                             module=cls.__module__)

    def _rounded_away(self) -> dict:
        """Half dtype -> the share of elements with a non-zero gradient the step left unchanged."""
        lost: dict = {}
        for p in self.params:
            old = self.before.get(id(p))
            if old is None:
                continue
            moved = p.grad.detach().to_dense() != 0
            total = int(moved.sum())
            if not total:
                continue
            same = int(((p.detach() == old) & moved).sum())
            entry = lost.setdefault(dtypes.name_of(p.dtype), [0, 0])
            entry[0] += same
            entry[1] += total
        return {d: same / total for d, (same, total) in lost.items()}
