"""The rank picker of a launched run's trace (`trace --launch`): a row per rank (its status,
where its first inf/NaN was, its findings), and the chosen rank's findings.

Plain dicts in (the trace document's `ranks`, and its findings, each with the ranks it was made
on): no torch here. The words are core.present.ranks', as the command line says them.
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QListWidget, QTableView, \
    QVBoxLayout, QWidget

from fp16studio.core.present.ranks import first_nonfinite_words, rank_scope

COLUMNS = ("Rank", "Status", "First inf/NaN", "Findings")


class RanksModel(QAbstractTableModel):
    """One row per rank of the document's `ranks.per_rank`."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[dict] = []

    def set_doc(self, doc: dict | None):
        self.beginResetModel()
        self._rows = list(((doc or {}).get("ranks") or {}).get("per_rank") or ())
        self.endResetModel()

    def rank_at(self, row: int) -> int | None:
        return self._rows[row]["rank"] if 0 <= row < len(self._rows) else None

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
            return (row.get("error") or {}).get("message")
        first = row.get("first_nonfinite")
        return (str(row["rank"]), row["status"],
                first_nonfinite_words(first) if first else "—",
                ", ".join(dict.fromkeys(row.get("findings") or ())) or "—")[index.column()]


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
        self._doc: dict | None = None
        self.table.selectionModel().currentRowChanged.connect(
            lambda current, _previous: self.choose(self.model.rank_at(current.row())))

    def set_doc(self, doc: dict | None):
        """A trace document: shown (and the first bad rank chosen) when it has `ranks`."""
        self._doc = doc if doc and doc.get("ranks") else None
        self.model.set_doc(self._doc)
        self.setVisible(self._doc is not None)
        if self._doc is not None:
            first = self._doc["ranks"].get("first_nonfinite") or \
                self._doc["ranks"].get("first_failed") or {"rank": self.model.rank_at(0)}
            row = next(i for i in range(self.model.rowCount())
                       if self.model.rank_at(i) == first["rank"])
            with QSignalBlocker(self.table.selectionModel()):   # chosen once, here
                self.table.selectRow(row)
            self.choose(first["rank"])

    def choose(self, rank: int | None):
        """Show `rank`'s findings (each with the ranks it was made on)."""
        self.findings.clear()
        if self._doc is None or rank is None:
            return
        world = self._doc["ranks"]["world_size"]
        for finding in self._doc["findings"]:
            if rank in finding.get("ranks", ()):
                self.findings.addItem(f"{finding['severity']}  {finding['code']}  at "
                                      f"{finding['location']} "
                                      f"({rank_scope(finding['ranks'], world)})")
        self.rankChosen.emit(rank)

    def chosen_findings(self) -> list[str]:
        return [self.findings.item(i).text() for i in range(self.findings.count())]
