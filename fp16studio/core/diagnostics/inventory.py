"""Build the tensor tree of one run: the model's modules with their parameters and buffers,
the batch, and the activations the tracer recorded (in call order)."""

from __future__ import annotations

from ..common import dtypes
from ..common.precision import FLOAT_MAX
from ..hf.offload import block_devices
from .tree import TensorNode


def tensor_node(name, path, kind, tensor) -> TensorNode:
    dtype = dtypes.name_of(tensor.dtype)
    return TensorNode(name=name, path=path, kind=kind, shape=tuple(tensor.shape), dtype=dtype,
                      device=str(tensor.device), bytes=tensor.numel() * tensor.element_size())


def model_tree(model) -> TensorNode:
    """Modules nested by name; each holds its own parameters and buffers, then its children.
    A dispatched model's modules carry the device its device_map gave their block ("disk",
    "cpu", "cuda:1"), and so do their offloaded tensors (on "meta" until a forward needs them)."""
    placed = block_devices(model)
    root = TensorNode(name=type(model).__name__, path="model", kind="module",
                      device=placed.get(""))
    nodes = {"": root}
    for name, module in model.named_modules():
        if name:
            parent_name, _, short = name.rpartition(".")
            parent = nodes[parent_name]
            node = TensorNode(name=short, path=name, kind="module", note=type(module).__name__,
                              device=placed.get(name, parent.device))
            nodes[name] = parent.add(node)
        node = nodes[name]
        prefix = f"{name}." if name else ""
        # The module's own dicts: named_parameters' generator machinery, per module, costs
        # more than the nodes on a model of 11k small modules.
        for pname, param in module._parameters.items():
            if param is not None:
                node.add(_placed(tensor_node(pname, prefix + pname, "parameter", param), node))
        for bname, buf in module._buffers.items():
            if buf is not None:
                node.add(_placed(tensor_node(bname, prefix + bname, "buffer", buf), node))
    # Modules first is how people read a model; tensors of a module before its children.
    for node in nodes.values():
        node.children.sort(key=lambda n: n.kind == "module")
    return root


def _placed(tensor: TensorNode, module: TensorNode) -> TensorNode:
    if tensor.device == "meta" and module.device:
        tensor.device = module.device
    return tensor


def batch_tree(batch: dict) -> TensorNode:
    import torch

    root = TensorNode(name="batch", path="batch", kind="group")
    for key, value in batch.items():
        if torch.is_tensor(value):
            root.add(tensor_node(key, f"batch.{key}", "input", value))
        else:
            root.add(TensorNode(name=key, path=f"batch.{key}", kind="input", dtype="list",
                                device="python", status="error", note="a Python list, not a tensor"))
    return root


def activations_tree(calls) -> TensorNode:
    root = TensorNode(name="activations", path="activations", kind="group")
    for call in calls:
        module = call.name or "model"
        for info in call.outputs:
            size = dtypes.BYTES_PER_ELEMENT.get(info.dtype, 4)
            for dim in info.shape:
                size *= dim
            root.add(TensorNode(
                name=f"{module} → {info.name}", path=f"activations.{call.index}.{info.name}",
                kind="activation", shape=info.shape, dtype=info.dtype, device=info.device,
                bytes=size, absmax=info.absmax, nonfinite=info.nonfinite,
                status="error" if info.nonfinite else "ok", note=module))
    return root


def gradients_tree(grads) -> TensorNode:
    """The gradients of a training step, per module (GradStat, core/run/training.py), shown as
    activations are: dtype, abs-max (headroom), inf/NaN; a layer converted to FP8 also says
    what its backward cast lost."""
    root = TensorNode(name="gradients", path="gradients", kind="group")
    for grad in grads:
        module = grad.module or "model"
        root.add(TensorNode(
            name=f"{module} → grad", path=f"gradients.{module}", kind="gradient",
            shape=(grad.numel,), dtype=grad.dtype, device=grad.device,
            bytes=grad.numel * dtypes.BYTES_PER_ELEMENT.get(grad.dtype, 4), absmax=grad.absmax,
            nonfinite=grad.nonfinite, status="error" if grad.nonfinite else "ok",
            note=module if grad.fp8_dtype is None else f"{module} · FP8 backward in "
            f"{grad.fp8_dtype}: {grad.fp8_underflow:.1%} under its smallest step"))
    return root


def pipeline_tree(model=None, batch=None, calls=()) -> TensorNode:
    root = TensorNode(name="pipeline", path="", kind="group")
    if model is not None:
        root.add(model_tree(model))
    if batch is not None:
        root.add(batch_tree(batch))
    if calls:
        root.add(activations_tree(calls))
    return root


def mark(root: TensorNode, findings) -> None:
    """Set status on the nodes the findings name, so the window can highlight them."""
    rank = {"ok": 0, "info": 0, "warning": 1, "error": 2}
    for finding in findings:
        node = locate(root, finding.location)
        if node is None:
            continue
        severity = "warning" if finding.severity == "info" else finding.severity
        if rank[severity] >= rank[node.status]:
            node.status = severity
            node.note = f"{finding.code}" if node.kind != "module" else f"{node.note} · {finding.code}"


def locate(root: TensorNode, location: str) -> TensorNode | None:
    """The tree node a finding's location names: a module path, a batch key, or the model."""
    for path in (location, f"batch.{location}", "model" if location in ("", "model") else None):
        if path is not None:
            node = root.find(path)
            if node is not None:
                return node
    return None


# -- colour by headroom / drift (per module, for the tree) --------------------------------------


def range_used(absmax: float | None, dtype: str | None) -> float | None:
    """The share of `dtype`'s range an abs-max uses: 1.0 at its largest value, above 1 past it
    (measure a float32 run against "float16" to see what casting it would do)."""
    if absmax is None or dtype not in FLOAT_MAX:
        return None
    return absmax / FLOAT_MAX[dtype]


def headroom_by_module(root: TensorNode, against: str | None = None) -> dict:
    """Module path -> the largest range_used of its outputs, from the tree's activations (each
    against its own dtype, or all against `against`). Module paths as the tree's module nodes
    have them ("model" for the model itself)."""
    used: dict = {}
    for group in root.children:
        if group.path not in ("activations", "gradients"):
            continue
        for node in group.children:
            value = range_used(node.absmax, against or node.dtype)
            if value is not None:
                used[node.note] = max(value, used.get(node.note, value))
    return used


def drift_by_module(modules) -> dict:
    """Module path -> the lowest SQNR (dB) of its calls, from a drift result's modules
    (ModuleDrift or their JSON); a call that was not finite counts as minus infinity."""
    worst: dict = {}
    for module in modules:
        row = module if isinstance(module, dict) else module.to_json()
        sqnr = float("-inf") if row["nonfinite"] else row["sqnr_db"]
        if sqnr is not None:
            path = row["name"] or "model"
            worst[path] = min(sqnr, worst.get(path, sqnr))
    return worst


def fp8_by_layer(plan) -> dict:
    """Layer path -> its output's SQNR in FP8 against bfloat16 (dB), from an FP8 plan
    (precision.fp8_plan.Fp8Plan): the layers it measured."""
    return {layer.name: layer.sqnr_db for layer in plan.layers if layer.sqnr_db is not None}


def rolled_up(values: dict, worst=max) -> dict:
    """`values` with each module's ancestors also given the worst value below them, so a
    collapsed parent shows its children's worst (`worst=min` for SQNR, `max` for range used)."""
    out = dict(values)
    for path, value in values.items():
        parts = path.split(".") if path != "model" else []
        for i in range(len(parts)):
            parent = ".".join(parts[:i]) or "model"
            out[parent] = worst(value, out.get(parent, value))
    return out
