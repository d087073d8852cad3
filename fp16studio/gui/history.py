"""Undo/redo as a stack of specs, and a view of what the latest change did to the spec."""

from __future__ import annotations

from PySide6.QtGui import QUndoCommand, QUndoStack
from PySide6.QtWidgets import (QAbstractItemView, QHeaderView, QLabel, QSplitter, QTableWidget,
                               QTableWidgetItem, QUndoView, QVBoxLayout, QWidget)

from fp16studio.core.present import vocabulary
from fp16studio.core.spec.value import KEYS


class SpecChange(QUndoCommand):
    """Replace the window's spec; undo puts the previous one back. Both are whole specs.
    `apply(spec, step)`: `step` None for the change itself (its push), else "Undo …"/"Redo …"."""

    def __init__(self, apply, before, after, text: str):
        super().__init__(text)
        self._apply = apply
        self.before = before
        self.after = after
        self._pushed = False

    def redo(self):
        step = f"Redo “{self.text()}”" if self._pushed else None
        self._pushed = True
        self._apply(self.after, step)

    def undo(self):
        self._apply(self.before, f"Undo “{self.text()}”")


def spec_diff(before, after) -> list[tuple[str, str, str]]:
    """(key, before, after) for each key that differs."""
    if before is None or after is None:
        return []
    a, b = before.to_dict(), after.to_dict()
    return [(key, vocabulary.spec_value(a[key]), vocabulary.spec_value(b[key])) for key in KEYS if a[key] != b[key]]


class HistoryPanel(QWidget):
    """The undo stack on the left; the selected state's change (keys before/after) on the right."""

    def __init__(self, stack: QUndoStack, parent=None):
        super().__init__(parent)
        self.stack = stack
        self.view = QUndoView(stack)
        self.view.setEmptyLabel("Spec as opened")
        self.title = QLabel(objectName="muted", wordWrap=True)
        self.diff = QTableWidget(0, 3)
        self.diff.setHorizontalHeaderLabels(["Spec key", "Before", "After"])
        self.diff.verticalHeader().hide()
        self.diff.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.diff.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(8, 4, 4, 4)
        column.addWidget(self.title)
        column.addWidget(self.diff, 1)
        split = QSplitter()
        split.addWidget(self.view)
        split.addWidget(right)
        split.setSizes([260, 520])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)
        stack.indexChanged.connect(self._show_current)
        self._show_current(stack.index())

    def _show_current(self, index: int):
        command = self.stack.command(index - 1) if index > 0 else None
        rows = spec_diff(command.before, command.after) if command else []
        self.title.setText(f"What “{command.text()}” changed:" if command
                           else "Changes to the spec appear here; Undo and Redo step through them.")
        self.diff.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                self.diff.setItem(r, c, QTableWidgetItem(text))
