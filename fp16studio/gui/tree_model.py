"""The tensor tree as a lazy QAbstractItemModel, and the proxy that sorts and filters it.

Rows are created on demand (canFetchMore/fetchMore, in chunks), so a 10 000-tensor model costs
only what is expanded. A re-run refreshes by diff: where the structure is unchanged the rows stay
and only their data changes, so the view keeps its expansion and selection.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor, QFont

from fp16studio.core.diagnostics.tree_index import STATUS_RANK, TreeIndex
from fp16studio.core.present import vocabulary
from .palette import SEVERITY_COLORS, device_color, dtype_color, scale_color
from .roles import COLOR_ROLE, NODE_ROLE, PATH_ROLE, RAW_ROLE

COLUMNS = ("Name", "Kind", "Shape", "Dtype", "Device", "Size", "Abs-max", "Status")
NAME, KIND, SHAPE, DTYPE, DEVICE, SIZE, ABSMAX, STATUS = range(len(COLUMNS))
RIGHT_ALIGNED = (SIZE, ABSMAX)


# Rows fetched at a time. Every row fetched under an expanded parent is laid out again, through
# Python, whenever rows are added: fetching a screenful or two at a time keeps an expand or a
# scroll to the end of a 10 000-row module cheap on the GUI thread.
CHUNK = 64
# Cells kept for the next repaint: many screens of rows; a scroll through a 30 000-tensor model
# starts again rather than holding (and having the garbage collector walk) all of them.
CELLS_KEPT = 16_384
COLOUR_BY = ("dtype", "device", "headroom", "drift", "fp8")
SCALED = ("headroom", "drift", "fp8")   # coloured by a value per module


def chain(node) -> tuple:
    """`node` and the single-child modules below it, shown as one dotted row: a wrapper module
    that only holds another one adds a level to click through and nothing to read."""
    nodes = [node]
    while (not nodes[-1].is_tensor and len(nodes[-1].children) == 1
           and not nodes[-1].children[0].is_tensor and nodes[-1].children[0].children):
        nodes.append(nodes[-1].children[0])
    return tuple(nodes)


class _Item:
    """One row: a chain of nodes (usually one); `node` is its last, whose children are the
    row's children, `head` its first, whose subtree totals the row shows."""

    __slots__ = ("chain", "parent", "row", "uid", "children")

    def __init__(self, nodes, parent, row, uid):
        self.chain = nodes
        self.parent = parent
        self.row = row
        self.uid = uid
        self.children: list[_Item] = []

    @property
    def node(self):
        return self.chain[-1]

    @property
    def head(self):
        return self.chain[0]


class Cell(NamedTuple):
    """What a cell shows: its text, the colour of the chip before it (None: no chip) and
    whether its row is one a finding names (drawn bold)."""
    text: str
    color: QColor | None
    bold: bool


class TensorTreeModel(QAbstractItemModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._uids = itertools.count(1)
        self._items: dict[int, _Item] = {}
        self._root: _Item | None = None
        self.tree_index: TreeIndex | None = None
        self._highlighted: set[str] = set()
        self._bold = QFont()
        self._bold.setBold(True)
        self.colour_by = "dtype"
        self._module_values: dict = {}   # module path -> headroom or drift, rolled up
        # (row uid, column) -> Cell: a repaint asks for every cell in view, a scroll or a hover
        # for the same ones again. Emptied by whatever changes what a cell shows (set_tree,
        # set_highlighted, set_colour_by); a row's uid is never reused.
        self._cells: dict[tuple[int, int], Cell] = {}

    # -- content --------------------------------------------------------------------------------
    def set_tree(self, root, tree_index: TreeIndex | None = None):
        """Show `root`; refresh by diff when a tree is already shown."""
        tree_index = tree_index or (TreeIndex(root) if root is not None else None)
        self._cells.clear()
        if self._root is None or root is None:
            self.beginResetModel()
            if self._root is not None:
                self._forget(self._root)
            self._items.clear()
            self.tree_index = tree_index
            self._root = self._new_item(root, None, 0, whole=False) if root is not None else None
            if self._root is not None:  # the top level (model, batch, activations) is always shown
                for row, node in enumerate(root.children[:CHUNK]):
                    self._root.children.append(self._new_item(node, self._root, row))
            self.endResetModel()
            return
        self.tree_index = tree_index
        self._merge(self._root, (root,), QModelIndex())

    def clear(self):
        self.set_tree(None)

    def set_highlighted(self, paths):
        """Rows whose path a finding names are drawn bold."""
        paths = set(paths)
        changed = self._highlighted ^ paths
        self._highlighted = paths
        self._cells.clear()
        for item in list(self._items.values()):
            if any(n.path in changed for n in item.chain) and item.parent is not None:
                left = self.createIndex(item.row, 0, item.uid)
                self.dataChanged.emit(left, left.siblingAtColumn(STATUS), [Qt.ItemDataRole.FontRole])

    def set_colour_by(self, kind: str, module_values: dict | None = None):
        """Chip the Name column by device, or by module `headroom` (range used), `drift` (SQNR
        dB against float32) or `fp8` (a Linear's SQNR in FP8 against bfloat16, dB) from
        `module_values` (path -> value, rolled up: a collapsed parent shows its children's
        worst); "dtype" leaves it to the Dtype column, as by default."""
        self.colour_by, self._module_values = kind, dict(module_values or {})
        self._cells.clear()
        for item in list(self._items.values()):
            if item.parent is not None:
                left = self.createIndex(item.row, 0, item.uid)
                self.dataChanged.emit(left, left, [COLOR_ROLE, Qt.ItemDataRole.ToolTipRole])

    def _module_value(self, item: _Item):
        return self._module_values.get(item.node.path or "model") if not item.node.is_tensor else None

    def index_for_node(self, node) -> QModelIndex:
        """The index of `node`, fetching the rows on its way (for "reveal this module")."""
        if self.tree_index is None or self._root is None:
            return QModelIndex()
        parent_index = QModelIndex()
        item = self._root
        for step in self.tree_index.ancestors(node):
            if any(step is n for n in item.chain):
                continue            # folded into this row
            row = next(i for i, child in enumerate(item.node.children) if child is step)
            while len(item.children) <= row:
                self.fetchMore(parent_index)
            item = item.children[row]
            parent_index = self.createIndex(item.row, 0, item.uid)
        return parent_index

    # -- structure ------------------------------------------------------------------------------
    def _new_item(self, node, parent, row, whole=True) -> _Item:
        item = _Item(chain(node) if whole else (node,), parent, row, next(self._uids))
        self._items[item.uid] = item
        return item

    def _item(self, index: QModelIndex) -> _Item | None:
        if not index.isValid():
            return self._root
        return self._items.get(index.internalId())

    def index(self, row, column, parent=QModelIndex()):
        item = self._item(parent)
        if item is None or not (0 <= row < len(item.children)) or not (0 <= column < len(COLUMNS)):
            return QModelIndex()
        return self.createIndex(row, column, item.children[row].uid)

    def parent(self, index=QModelIndex()):
        if not index.isValid():
            return QModelIndex()
        item = self._items.get(index.internalId())
        if item is None or item.parent is None or item.parent is self._root:
            return QModelIndex()
        return self.createIndex(item.parent.row, 0, item.parent.uid)

    def rowCount(self, parent=QModelIndex()):
        if parent.column() > 0:
            return 0
        item = self._item(parent)
        return len(item.children) if item is not None else 0

    def columnCount(self, parent=QModelIndex()):
        return len(COLUMNS)

    def hasChildren(self, parent=QModelIndex()):
        if parent.column() > 0:
            return False
        item = self._item(parent)
        return item is not None and bool(item.node.children)

    def canFetchMore(self, parent):
        if parent.column() > 0:
            return False
        item = self._item(parent)
        return item is not None and len(item.children) < len(item.node.children)

    def fetchMore(self, parent):
        item = self._item(parent)
        if item is None:
            return
        start = len(item.children)
        end = min(start + CHUNK, len(item.node.children))
        if end <= start:
            return
        self.beginInsertRows(parent, start, end - 1)
        for row in range(start, end):
            item.children.append(self._new_item(item.node.children[row], item, row))
        self.endInsertRows()

    def _forget(self, item: _Item):
        # Each forgotten row's link to its parent is cut: no cycle is left for the garbage
        # collector, which may never walk these rows again (long_lived.py).
        stack = list(item.children)
        while stack:
            child = stack.pop()
            self._items.pop(child.uid, None)
            child.parent = None
            stack.extend(child.children)
        item.children = []

    def _merge(self, item: _Item, nodes: tuple, index: QModelIndex):
        was_complete = len(item.children) == len(item.node.children)
        item.chain = nodes
        node = nodes[-1]
        old = [tuple(n.path for n in child.chain) for child in item.children]
        chains = [chain(child) for child in node.children[:len(old)]]
        if old == [tuple(n.path for n in c) for c in chains]:
            for child, child_chain in zip(item.children, chains):
                self._merge(child, child_chain, self.createIndex(child.row, 0, child.uid))
            if item.children:
                self.dataChanged.emit(self.index(0, 0, index),
                                      self.index(len(item.children) - 1, len(COLUMNS) - 1, index))
                if was_complete:  # rows added at the end show up in an expanded parent at once
                    self.fetchMore(index)
            return
        # The structure changed here: replace these rows, keep as many fetched as before so an
        # expanded parent stays expanded and filled.
        fetched = len(item.children)
        self.beginRemoveRows(index, 0, fetched - 1)
        self._forget(item)
        self.endRemoveRows()
        while len(item.children) < min(fetched, len(node.children)):
            self.fetchMore(index)

    # -- data -----------------------------------------------------------------------------------
    # No flags(): QAbstractItemModel's own (enabled, selectable) is answered without a call into
    # Python for each row the view lays out.
    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        item = self._items.get(index.internalId())
        if item is None:
            return None
        node = item.node
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(item, column)
        if role == RAW_ROLE:
            return _name(item).lower() if column == NAME else self._raw(item.head, column)
        if role == NODE_ROLE:
            return node
        if role == PATH_ROLE:
            return node.path
        if role == COLOR_ROLE:
            return self._color(item, column)
        if role == Qt.ItemDataRole.FontRole and self._bolded(item):
            return self._bold
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(node, self._module_value(item))
        if role == Qt.ItemDataRole.TextAlignmentRole and column in RIGHT_ALIGNED:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def row_cells(self, index: QModelIndex) -> list[Cell]:
        """All the tree's painter draws of `index`'s row, in one call: through the proxy each
        role asked for is two calls into Python, and a cell's roles one by one took a repaint
        of the tree 9-11 ms of CPU where a call per cell took 5 (issue 31). The tree measures
        its columns from them too."""
        uid = index.internalId()   # an invalid index's id is 0: no row
        return [self._cell(uid, column) for column in range(len(COLUMNS))]

    def _cell(self, uid: int, column: int) -> Cell:
        cell = self._cells.get((uid, column))
        if cell is None:
            item = self._items.get(uid)
            if item is None:
                return Cell("", None, False)
            if len(self._cells) >= CELLS_KEPT:
                self._cells.clear()
            cell = self._cells[uid, column] = Cell(self._text(item, column), self._color(item, column),
                                                   self._bolded(item))
        return cell

    def _text(self, item: _Item, column: int) -> str:
        return _name(item) if column == NAME else self._display(item.head, column)

    def _color(self, item: _Item, column: int) -> QColor | None:
        if column == DTYPE:
            color = dtype_color(self._dtype(item.head))
            return QColor(color) if color else None
        if column == STATUS:
            return QColor(SEVERITY_COLORS[self._status(item.head)])
        if column == NAME:
            return self._name_color(item)
        return None

    def _bolded(self, item: _Item) -> bool:
        return any(n.path in self._highlighted for n in item.chain)

    def _name_color(self, item: _Item):
        if self.colour_by == "device":
            device = item.head.device if item.head.is_tensor else self._agg(item.head).device
            return QColor(device_color(device)) if device else None
        value = self._module_value(item) if self.colour_by in SCALED else None
        return QColor(scale_color(self.colour_by, value)) if value is not None else None

    def _agg(self, node):
        return self.tree_index.aggregate(node)

    def _dtype(self, node):
        return node.dtype if node.is_tensor and not node.children else self._agg(node).dtype

    def _status(self, node):
        return node.status if not node.children else self._agg(node).status

    def _display(self, node, column):
        if column == NAME:
            return node.name
        if column == KIND:
            return node.kind
        if column == SHAPE:
            return vocabulary.shape(node.shape) if node.is_tensor else ""
        if column == DTYPE:
            return self._dtype(node) or ""
        if column == DEVICE:
            return (node.device if node.is_tensor else self._agg(node).device) or ""
        if column == SIZE:
            return vocabulary.size(node.bytes if node.is_tensor else self._agg(node).bytes)
        if column == ABSMAX:
            text = vocabulary.number(node.absmax, "{:.4g}")
            return f"{text}  ({node.nonfinite} non-finite)" if node.nonfinite else text
        return self._status(node)

    def _raw(self, node, column):
        if column == SHAPE:
            return float(math.prod(node.shape)) if node.is_tensor and node.shape is not None else -1.0
        if column == SIZE:
            return float(node.bytes if node.is_tensor else self._agg(node).bytes)
        if column == ABSMAX:
            if node.absmax is None:
                return -1.0
            return math.inf if math.isnan(node.absmax) else float(node.absmax)
        if column == STATUS:
            return STATUS_RANK[self._status(node)]
        return (self._display(node, column) or "").lower()

    def _tooltip(self, node, value=None):
        lines = [node.path or node.name]
        if value is not None and self.colour_by == "headroom":
            lines.append(f"uses {value:.3g} of its dtype's range (worst output below)")
        elif value is not None and self.colour_by == "drift":
            lines.append(f"SQNR against float32: {value:.1f} dB (worst call below)")
        elif value is not None and self.colour_by == "fp8":
            lines.append(f"in FP8, SQNR against bfloat16: {value:.1f} dB (worst layer below)")
        if not node.is_tensor:
            agg = self._agg(node)
            lines.append(f"{vocabulary.count(agg.tensors, 'tensor')}, {vocabulary.size(agg.bytes)}")
        if node.note:
            lines.append(node.note)
        return "\n".join(lines)


def _name(item: _Item) -> str:
    return ".".join(n.name for n in item.chain)


class TensorFilterProxy(QSortFilterProxyModel):
    """Sorts on raw values; filters by name, dtype, device and "only problems".

    The filter is answered from the TreeIndex, not by walking rows, because rows that were never
    fetched still have to count: a match deep in a collapsed module keeps its ancestors visible.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSortRole(RAW_ROLE)
        self.setDynamicSortFilter(True)
        self._visible: set[int] | None = None
        self.criteria = dict(text="", dtype="", device="", only_problems=False)

    def set_filter(self, **criteria):
        self.criteria.update(criteria)
        self.refilter()

    def refilter(self):
        source = self.sourceModel()
        index = source.tree_index if source is not None else None
        self.beginFilterChange()
        self._visible = index.visible(**self.criteria) if index is not None else None
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    @property
    def active(self) -> bool:
        return self._visible is not None

    @property
    def kept(self) -> int | None:
        """How many nodes the filter keeps (matches and their ancestors); None when inactive."""
        return None if self._visible is None else len(self._visible)

    def filterAcceptsRow(self, row, parent):
        if self._visible is None:
            return True
        node = self.sourceModel().index(row, 0, parent).data(NODE_ROLE)
        return node is not None and id(node) in self._visible
