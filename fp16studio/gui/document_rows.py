"""A table of a result document's rows (a drift's modules, an FP8 plan's layers): the rows,
their count and the column headers, once; a view says what a cell shows (`data`)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt


class DocumentRows(QAbstractTableModel):
    """`columns`: tuples whose first item is the header; `key`: the document's list of rows."""

    def __init__(self, columns: tuple, key: str, parent=None):
        super().__init__(parent)
        self.columns, self.key = columns, key
        self.rows: list[dict] = []

    def set_doc(self, doc: dict | None):
        self.beginResetModel()
        self.rows = list(doc[self.key]) if doc else []
        self.took(doc)
        self.endResetModel()

    def took(self, doc: dict | None):
        """What a view derives from a new document, inside the reset."""

    def row_at(self, index) -> dict | None:
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        return self.rows[index.row()]

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return self.columns[section][0]
        return None
