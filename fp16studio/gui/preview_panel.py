"""The Dataset tab: the first rows of the split as the pipeline reads them, images as thumbnails."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSize, Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from fp16studio.engine.lookups import DatasetPreview, Thumbnail


class PreviewModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._columns: list[str] = []
        self._roles: dict[str, str] = {}
        self._rows: list[list] = []
        self._pixmaps: dict[tuple[int, int], QPixmap] = {}

    def set_preview(self, preview: DatasetPreview | None):
        self.beginResetModel()
        preview = preview or DatasetPreview()
        self._columns = list(preview.columns)
        self._roles = {column: role for role, column in preview.roles.items()}
        self._rows = list(preview.rows)
        self._pixmaps = {}
        for r, row in enumerate(self._rows):
            for c, cell in enumerate(row):
                if isinstance(cell, Thumbnail):
                    pixmap = QPixmap()
                    pixmap.loadFromData(cell.png, "PNG")
                    self._pixmaps[(r, c)] = pixmap
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._columns)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Vertical:
            return str(section)
        name = self._columns[section]
        return f"{name}\n({self._roles[name]})" if name in self._roles else f"{name}\n"

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        cell = self._rows[index.row()][index.column()]
        is_image = isinstance(cell, Thumbnail)
        if role == Qt.ItemDataRole.DisplayRole:
            return cell.size if is_image else cell
        if role == Qt.ItemDataRole.DecorationRole and is_image:
            return self._pixmaps.get((index.row(), index.column()))
        if role == Qt.ItemDataRole.ToolTipRole and not is_image:
            return cell
        return None


class PreviewPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = PreviewModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.setIconSize(QSize(56, 56))
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.note = QLabel(objectName="muted", wordWrap=True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)
        self.show_note("The first rows of the dataset appear here once it is read.")

    def set_preview(self, preview: DatasetPreview):
        self.model.set_preview(preview)
        features = preview.features
        self.note.setText(preview.note or
                          f"First {self.model.rowCount()} rows · " +
                          ", ".join(f"{name}: {kind}" for name, kind in features.items()))
        self.note.setToolTip("\n".join(f"{name}: {kind}" for name, kind in features.items()))
        self.table.resizeColumnsToContents()
        for column in range(self.model.columnCount()):
            self.table.setColumnWidth(column, min(self.table.columnWidth(column), 320))

    def show_note(self, text: str):
        self.model.set_preview(None)
        self.note.setText(text)
