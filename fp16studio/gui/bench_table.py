"""The Compare tab's table of a benchmark's figures: one row per variant, the columns the
document fills, sorted on the raw numbers, each column's width from its header and the font.

A bench result in (core.precision.bench.BenchResult): no torch here.
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHeaderView, QTableView

from fp16studio.core.precision.bench import VARIANTS, BenchResult
from fp16studio.core.present.vocabulary import bench_columns, stability
from .palette import OKABE_ITO
from .roles import RAW_ROLE

# A column is as wide as its header or the widest text its cells hold, whichever is wider,
# measured once from the font: never from the cells, whose measuring at each result held the
# window (issue 31). The texts wider than a figure (FIGURE); an error says the rest in its tooltip.
WIDEST_TEXT = {"Variant": "autocast-bfloat16", "Status": "unsupported", "Support": "unsupported",
               "Peak memory": "1023.9 MiB", "Weights": "1023.9 MiB",
               "Error": "RuntimeError: no kernel for this dtype on"}
FIGURE = "99,999.99"
CELL_PAD_PX = 24    # a cell's margins, or the header's and its sort arrow's


class ResultsModel(QAbstractTableModel):
    """One row per variant of a bench result: text to read, RAW_ROLE to sort and export. The
    columns are the shared ones (core.present.vocabulary, then the verdict's) that this result
    fills; a variant's verdict is its name's tooltip."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.columns: tuple = ()
        self._rows: list[list] = []
        self._stable: list[str] = []
        self._verdicts: list = []

    def set_doc(self, doc: BenchResult | None):
        self.beginResetModel()
        variants = doc.variants if doc is not None else []
        self.columns = bench_columns(doc) if doc is not None else ()
        self._rows = [[value(v) for _, value, _, _ in self.columns] for v in variants]
        self._stable = [stability(v) for v in variants]
        self._verdicts = [v.verdict for v in variants]
        self.endResetModel()

    def headers(self) -> list[str]:
        return [column[0] for column in self.columns]

    def raw_rows(self) -> list[list]:
        return [list(row) for row in self._rows]

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.columns)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        raw = self._rows[index.row()][index.column()]
        header, _, text, _ = self.columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return text(raw)
        if role == RAW_ROLE:
            return raw
        if role == Qt.ItemDataRole.TextAlignmentRole and isinstance(raw, (int, float)):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and raw in ("failed", "noisy"):
            return QColor(OKABE_ITO["vermillion"])
        if role == Qt.ItemDataRole.ToolTipRole:
            if header == "Error":
                return raw
            if header == "Variant" and self._verdicts[index.row()]:
                return self._verdicts[index.row()]
            if self._stable[index.row()] == "noisy":
                return "The spread across rounds says the machine was busy: this figure is not to be trusted."
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if (role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal
                and 0 <= section < len(self.columns)):
            return self.columns[section][0]
        return None


class _SortProxy(QSortFilterProxyModel):
    """Sorts on RAW_ROLE numbers; empty cells (a failed variant) rank lowest."""

    def lessThan(self, left, right):
        a, b = left.data(RAW_ROLE), right.data(RAW_ROLE)
        if a is None or b is None:
            return a is None and b is not None
        if isinstance(a, str) or isinstance(b, str):
            return str(a) < str(b)
        return a < b


class BenchTable(QTableView):
    """The figures of a bench result (`figures.set_doc`), every variant's row in view."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.figures = ResultsModel(self)
        proxy = _SortProxy(self)
        proxy.setSourceModel(self.figures)
        self.setModel(proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # keep the document's order
        self.verticalHeader().hide()
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        self._widths: dict[str, int] = {}
        self.figures.modelReset.connect(self._size_columns)
        # Sized once for the most variants a benchmark measures: a result never changes the
        # page's size hints, which relaid out the whole page at each one (issue 31).
        rows = self.verticalHeader().defaultSectionSize() * (len(VARIANTS) + 1)
        scrollbar = self.horizontalScrollBar().sizeHint().height()
        self.setMinimumHeight(rows + scrollbar + 2 * self.frameWidth() + 4)

    def _size_columns(self):
        """Each column's width from its header and the font (`WIDEST_TEXT`), measured once."""
        header = self.horizontalHeader()
        for section, name in enumerate(self.figures.headers()):
            if name not in self._widths:
                text = self.fontMetrics().horizontalAdvance(WIDEST_TEXT.get(name, FIGURE))
                self._widths[name] = max(text, header.fontMetrics().horizontalAdvance(name)) + CELL_PAD_PX
            header.resizeSection(section, self._widths[name])
