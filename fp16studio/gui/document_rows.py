"""A table of a typed result's rows (a drift's modules, an FP8 plan's layers): the rows, their
count and the column headers, once; a view says what a cell shows (`data`)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt


class DocumentRows(QAbstractTableModel):
    """`columns`: tuples whose first item is the header; `key`: the result's attribute that
    holds its rows."""

    def __init__(self, columns: tuple, key: str, parent=None):
        super().__init__(parent)
        self.columns, self.key = columns, key
        self.rows: list = []

    def set_result(self, result):
        self.beginResetModel()
        self.rows = list(getattr(result, self.key)) if result is not None else []
        self.took(result)
        self.endResetModel()

    def took(self, result):
        """What a view derives from a new result, inside the reset."""

    def row_at(self, index):
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
