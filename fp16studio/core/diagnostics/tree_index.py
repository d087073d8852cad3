"""Look-ups over a TensorNode tree, built once per diagnosis off the GUI thread.

The window's item model asks these questions on every paint or keystroke; answering them from
tables built in one pass keeps a 20 000-tensor tree cheap on the GUI thread (the inventory's
totals are `tree.summary`, taken where a result arrives). Findings are located once, here, by path.
"""

from __future__ import annotations

from dataclasses import dataclass

from .inventory import headroom_by_module, locate, rolled_up

STATUS_RANK = {"ok": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Aggregate:
    """What a row shows for a module or group: totals and summaries of its subtree."""

    bytes: int
    # The one floating dtype of the subtree's tensors, "mixed" when there are several (int64
    # ids beside float16 weights are not mixed); without floating tensors, their one dtype.
    dtype: str | None
    device: str | None
    status: str              # the worst status in the subtree
    tensors: int


class TreeIndex:
    def __init__(self, root):
        self.root = root
        self.by_path: dict[str, object] = {}
        self._parent: dict[int, object] = {}
        self._agg: dict[int, Aggregate] = {}
        self.dtypes: set[str] = set()
        self.devices: set[str] = set()
        self._build()
        # Module path -> the share of its dtype's range its outputs use, rolled up to parents:
        # what "colour by headroom" shows, computed here rather than per result on the GUI thread.
        self.headroom = rolled_up(headroom_by_module(root))

    def __reduce__(self):
        # The tables are keyed by object identity, which pickling does not keep: a pickled
        # index is rebuilt where it is loaded.
        return TreeIndex, (self.root,)

    def _build(self):
        order = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            order.append(node)
            self.by_path.setdefault(node.path, node)
            for child in node.children:
                self._parent[id(child)] = node
                stack.append(child)
        for node in reversed(order):  # children before parents
            if node.is_tensor:
                if node.dtype:
                    self.dtypes.add(node.dtype)
                if node.device:
                    self.devices.add(node.device)
                own = Aggregate(node.bytes, node.dtype, node.device, node.status, 1)
                if not node.children:
                    self._agg[id(node)] = own
                    continue
                parts = [own] + [self._agg[id(c)] for c in node.children]
            else:
                parts = [self._agg[id(c)] for c in node.children]
                # A module's own status counts too (the rules may flag the module itself).
                parts.append(Aggregate(0, None, None, node.status, 0))
            self._agg[id(node)] = _combine(parts)

    def locate(self, findings) -> dict:
        """{finding location: node} for the findings whose location names a node."""
        found = {}
        for finding in findings:
            if finding.location not in found:
                node = self.resolve(finding.location)
                if node is not None:
                    found[finding.location] = node
        return found

    def aggregate(self, node) -> Aggregate:
        return self._agg[id(node)]

    def parent(self, node):
        return self._parent.get(id(node))

    def ancestors(self, node) -> list:
        """The chain from the root's child down to `node` (the root itself is not a row)."""
        chain = []
        while node is not None and node is not self.root:
            chain.append(node)
            node = self._parent.get(id(node))
        return chain[::-1]

    def resolve(self, location: str):
        """The node a finding's location names, by the engine's own rule (inventory.locate)."""
        return locate(self.root, location)

    def visible(self, text: str = "", dtype: str = "", device: str = "",
                only_problems: bool = False) -> set[int] | None:
        """ids of the nodes a filter keeps (matches and their ancestors); None = no filter."""
        text = text.strip().lower()
        if not (text or dtype or device or only_problems):
            return None
        keep: set[int] = set()
        for node in self.by_path.values():
            if node is self.root:
                continue
            if text and text not in node.path.lower():
                continue
            if only_problems and node.status == "ok":
                continue
            if (dtype or device) and not node.is_tensor:
                continue
            if dtype and node.dtype != dtype:
                continue
            if device and node.device != device:
                continue
            while node is not None and id(node) not in keep:
                keep.add(id(node))
                node = self._parent.get(id(node))
        return keep


def _combine(parts) -> Aggregate:
    dtypes = {p.dtype for p in parts if p.dtype}
    floating = {d for d in dtypes if d == "mixed" or d.startswith(("float", "bfloat"))}
    devices = {p.device for p in parts if p.device}
    return Aggregate(
        bytes=sum(p.bytes for p in parts),
        dtype=_one_or_mixed(floating) if floating else (dtypes.pop() if len(dtypes) == 1 else None),
        device=devices.pop() if len(devices) == 1 else ("mixed" if devices else None),
        status=max((p.status for p in parts), key=STATUS_RANK.__getitem__, default="ok"),
        tensors=sum(p.tensors for p in parts),
    )


def _one_or_mixed(names: set) -> str | None:
    return next(iter(names)) if len(names) == 1 else ("mixed" if names else None)
