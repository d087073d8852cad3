"""The tensor inventory as a pure-Python tree: modules, parameters, buffers, batch, activations.

The GUI wraps it in a lazy item model; the CLI summarises it. Nodes hold plain values only
(no tensors), so a tree can cross threads and processes and outlive the model it describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..common.codec import Document, meta

NODE_KINDS = ("group", "module", "parameter", "buffer", "input", "activation", "gradient")
NODE_STATUSES = ("ok", "warning", "error")


@dataclass
class TensorNode(Document):
    """One row of the tensor inventory: a module or a tensor, with its children."""

    name: str
    path: str
    kind: str = field(metadata=meta(enum=NODE_KINDS))
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    device: str | None = None
    bytes: int = 0
    absmax: float | None = None
    nonfinite: int = 0
    status: str = field(default="ok", metadata=meta(enum=NODE_STATUSES))
    note: str = ""
    children: list[TensorNode] = field(default_factory=list)

    @property
    def is_tensor(self) -> bool:
        return self.kind not in ("group", "module")

    def add(self, child: "TensorNode") -> "TensorNode":
        self.children.append(child)
        return child

    def __reduce__(self):
        # Pickled as a constructor call: smaller and faster to load than a __dict__ per node,
        # and the Python-level call per node lets the thread unpickling a 10 000-tensor tree
        # (the window's worker) hand the GIL to the GUI thread instead of holding it throughout.
        return TensorNode, tuple(getattr(self, name) for name in _FIELDS)

    def walk(self):
        """Depth-first, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def find(self, path: str) -> "TensorNode | None":
        return next((node for node in self.walk() if node.path == path), None)


@dataclass
class Inventory(Document):
    """The tensor inventory's totals (CONTRACT inventory)."""

    parameters: int = 0     # elements of the parameters
    tensors: int = 0
    bytes: int = 0
    dtypes: dict[str, int] = field(default_factory=dict)     # tensors per dtype
    devices: dict[str, int] = field(default_factory=dict)    # tensors per device


def summary(root: TensorNode) -> Inventory:
    """The tree's inventory: parameter count (elements), tensor count, bytes, tensors per dtype
    and per device."""
    parameters = tensors = total = 0
    by_dtype: dict[str, int] = {}
    by_device: dict[str, int] = {}
    for node in root.walk():
        if not node.is_tensor:
            continue
        tensors += 1
        total += node.bytes
        by_dtype[node.dtype] = by_dtype.get(node.dtype, 0) + 1
        by_device[node.device] = by_device.get(node.device, 0) + 1
        if node.kind == "parameter":
            count = 1
            for dim in node.shape or ():
                count *= dim
            parameters += count
    return Inventory(parameters=parameters, tensors=tensors, bytes=total, dtypes=by_dtype,
                     devices=by_device)


_FIELDS = tuple(f.name for f in fields(TensorNode))
