"""The rank picker of a launched run's trace (`trace --launch`): a row per rank (its status,
where its first inf/NaN was, its findings), and the chosen rank's findings.

A launched run's trace in (core.script.rank_merge.RankedTrace: its `ranks`, and its findings,
each with the ranks it was made on): no torch here. The words are core.present.ranks', as the
command line says them.
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QListWidget, QTableView, \
    QVBoxLayout, QWidget

from fp16studio.core.present.ranks import first_nonfinite_words, rank_scope

COLUMNS = ("Rank", "Status", "First inf/NaN", "Findings")


class RanksModel(QAbstractTableModel):
    """One row per rank of the trace's `ranks.per_rank`."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list = []   # RankRow

    def set_ranks(self, ranks):
        """A RankSummary, or None."""
        self.beginResetModel()
        self._rows = list(ranks.per_rank) if ranks is not None else []
        self.endResetModel()

    def rank_at(self, row: int) -> int | None:
        return self._rows[row].rank if 0 <= row < len(self._rows) else None

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if role == Qt.DisplayRole and orientation == Qt.Horizontal and 0 <= section < len(COLUMNS):
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or role not in (Qt.DisplayRole, Qt.ToolTipRole):
            return None
        row = self._rows[index.row()]
        if role == Qt.ToolTipRole:
            return row.error.message if row.error else None
        first = row.first_nonfinite
        return (str(row.rank), row.status,
                first_nonfinite_words(first) if first else "—",
                ", ".join(dict.fromkeys(row.findings)) or "—")[index.column()]


class RankPicker(QWidget):
    """The ranks' table over the chosen rank's findings; `rankChosen(rank)` when one is picked."""

    rankChosen = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = RanksModel(self)
        self.table = QTableView(self)
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().hide()
        self.findings = QListWidget(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)
        layout.addWidget(self.findings)
        self._trace = None
        self.table.selectionModel().currentRowChanged.connect(
            lambda current, _previous: self.choose(self.model.rank_at(current.row())))

    def set_trace(self, trace):
        """A diagnosis: shown (and the first bad rank chosen) when it is a launched run's trace,
        one with `ranks`."""
        self._trace = trace if getattr(trace, "ranks", None) else None
        self.model.set_ranks(self._trace.ranks if self._trace is not None else None)
        self.setVisible(self._trace is not None)
        if self._trace is not None:
            ranks = self._trace.ranks
            first = ranks.first_nonfinite or ranks.first_failed
            rank = first.rank if first is not None else self.model.rank_at(0)
            row = next(i for i in range(self.model.rowCount()) if self.model.rank_at(i) == rank)
            with QSignalBlocker(self.table.selectionModel()):   # chosen once, here
                self.table.selectRow(row)
            self.choose(rank)

    def choose(self, rank: int | None):
        """Show `rank`'s findings (each with the ranks it was made on)."""
        self.findings.clear()
        if self._trace is None or rank is None:
            return
        world = self._trace.ranks.world_size
        for finding in self._trace.findings:
            if rank in finding.ranks:
                self.findings.addItem(f"{finding.severity}  {finding.code}  at "
                                      f"{finding.location} "
                                      f"({rank_scope(list(finding.ranks), world)})")
        self.rankChosen.emit(rank)

    def chosen_findings(self) -> list[str]:
        return [self.findings.item(i).text() for i in range(self.findings.count())]
