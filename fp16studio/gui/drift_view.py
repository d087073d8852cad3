"""The Drift tab ("Compare with float32"): the spec in float32 and in its half variant on one
batch, compared module by module (core.precision.drift, run in the engine).

A table of each module call (max |diff|, cosine, SQNR, abs-max in both runs, non-finite values)
with the first divergent module highlighted, over a strip plot along the model's depth: SQNR per
module, and headroom (the float32 abs-max as a share of the variant dtype's range, where 1 is
its largest finite value). The plot items are made once and updated with setData.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QLabel, QSplitter, QTableView, QVBoxLayout, QWidget

from fp16studio.core.diagnostics.inventory import range_used
from fp16studio.core.precision.drift import DriftResult
from fp16studio.core.present import vocabulary
from fp16studio.core.run.compare import DRIFT_SQNR_DB, OutputDrift
from fp16studio.core.run.distance import SQNR_CEILING_DB
from .document_rows import DocumentRows
from .fit import share_the_width
from .later_pages import MadeInParts, all_parts
from .light_plot import LightPlot
from .palette import OKABE_ITO
from .plot_style import follow_palette, menus_in_parts
from .roles import RAW_ROLE

HINT = ("Compare with float32 (Ctrl+D) runs this spec in float32 and in its half precision on "
        "the same batch and shows where, module by module, the half run parts from float32.")


def _number(pattern):
    return lambda value: vocabulary.number(value, pattern)


sqnr_text = _number("{:.1f}")   # the table's column and the verdict's output SQNR


COLUMNS = (  # header, the ModuleDrift's attribute, text
    ("Module", "name", lambda v: v or "model"),
    ("Class", "cls", str),
    ("Max |diff|", "max_abs_diff", _number("{:.4g}")),
    ("Cosine", "cosine", _number("{:.6f}")),
    ("SQNR dB", "sqnr_db", sqnr_text),
    ("Abs-max float32", "abs_max_float32", _number("{:.4g}")),
    ("Abs-max variant", "abs_max_variant", _number("{:.4g}")),
    ("Non-finite", "nonfinite", str),
)


class DriftModel(DocumentRows):
    """One row per module call of a DriftResult, in call order (the model's depth)."""

    def __init__(self, parent=None):
        super().__init__(COLUMNS, "modules", parent)
        self.first_divergent_row: int | None = None

    def took(self, result: DriftResult | None):
        first = result.first_divergent if result is not None else None
        self.first_divergent_row = next(
            (i for i, row in enumerate(self.rows) if (row.name or "model") == first), None)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        row = self.row_at(index)
        if row is None:
            return None
        _, key, text = COLUMNS[index.column()]
        first = index.row() == self.first_divergent_row
        if role == Qt.ItemDataRole.DisplayRole:
            return text(getattr(row, key))
        if role == RAW_ROLE:
            return getattr(row, key)
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() >= 2:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.BackgroundRole and first:
            color = QColor(OKABE_ITO["vermillion"])
            color.setAlpha(60)
            return color
        if role == Qt.ItemDataRole.FontRole and first:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ForegroundRole and row.nonfinite and key == "nonfinite":
            return QColor(OKABE_ITO["vermillion"])
        if role == Qt.ItemDataRole.ToolTipRole and first:
            return "The first module whose output parts from float32"
        return None


def strip_series(result: DriftResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(SQNR dB, headroom, non-finite?) per module call, NaN where unknown. A call with inf/NaN
    values in the variant is drawn at 0 dB: it kept nothing of the signal."""
    dtype = result.variant.removeprefix("autocast-")
    sqnr, used, broken = [], [], []
    for row in result.modules:
        value = 0.0 if row.nonfinite else row.sqnr_db
        sqnr.append(math.nan if value is None else min(value, SQNR_CEILING_DB))
        share = range_used(row.abs_max_float32, dtype)
        used.append(math.nan if share is None or share <= 0 else share)
        broken.append(bool(row.nonfinite))
    return np.array(sqnr, float), np.array(used, float), np.array(broken, bool)


class DriftView(MadeInParts, QWidget):
    def __init__(self, parent=None, *, begun: bool = False):
        """Made whole; `begun` only for `in_parts`, which makes the rest."""
        super().__init__(parent)
        self._result: DriftResult | None = None
        if not begun:
            all_parts(self._make())

    def _make(self):
        # A part per event, each a few milliseconds (issue 43), and top-down: the page's frame
        # first, then each widget made in its place. A finished group of widgets moved into
        # another (the table and the plot into their splitter, that into the page's layout) is
        # restyled whole under the style sheet: that last part was 11-19 ms under load.
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.verdict = QLabel(HINT, self, wordWrap=True, textFormat=Qt.TextFormat.PlainText)
        layout.addWidget(self.verdict)
        self.stale = QLabel("This comparison is of an earlier version of the spec: Compare with "
                            "float32 again to see the current one.", self, objectName="staleNote",
                            wordWrap=True)
        self.stale.hide()
        layout.addWidget(self.stale)
        split = QSplitter(Qt.Orientation.Vertical, self)
        split.setChildrenCollapsible(False)
        layout.addWidget(split, 1)
        yield
        self.model = DriftModel(self)
        self.table = QTableView(split, objectName="driftTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        share_the_width(self.table, {0: 0.3, 1: 0.2})   # the path and class elided, figures in view
        yield

        self.plot = pg.GraphicsLayoutWidget(split)
        split.setSizes([260, 220])
        yield
        # Each plot's context menu comes in a part of its own, at the end (menus_in_parts).
        self.sqnr_plot = LightPlot(self.plot.ci, row=0)
        yield   # a plot, then what it shows
        self.sqnr_plot.setLabel("left", "SQNR dB", short="dB")
        self.sqnr_plot.addLine(y=DRIFT_SQNR_DB, pen=pg.mkPen(OKABE_ITO["grey"], style=Qt.PenStyle.DashLine))
        self.sqnr_curve = self.sqnr_plot.plot([], [], pen=pg.mkPen(OKABE_ITO["blue"], width=2),
                                              symbol="o", symbolSize=4, connect="finite")
        self.broken_points = pg.ScatterPlotItem(symbol="x", size=9, pen=pg.mkPen(OKABE_ITO["vermillion"], width=2))
        self.sqnr_plot.addItem(self.broken_points)
        yield
        self.headroom_plot = LightPlot(self.plot.ci, row=2)
        yield
        self.headroom_plot.setLabel("left", "range used", short="range")
        self.headroom_plot.setLabel("bottom", "module, in call order")
        self.headroom_plot.setLogMode(y=True)
        self.headroom_plot.addLine(y=0.0, pen=pg.mkPen(OKABE_ITO["vermillion"], style=Qt.PenStyle.DashLine))
        self.headroom_curve = self.headroom_plot.plot([], [], pen=pg.mkPen(OKABE_ITO["orange"], width=2),
                                                      symbol="o", symbolSize=4, connect="finite")
        self.headroom_plot.setXLink(self.sqnr_plot)
        self.first_marks = [p.addLine(x=0, pen=pg.mkPen(OKABE_ITO["vermillion"], width=1))
                            for p in (self.sqnr_plot, self.headroom_plot)]
        for mark in self.first_marks:
            mark.hide()
        yield
        follow_palette(self.plot)
        yield from menus_in_parts(self.sqnr_plot, self.headroom_plot)

    def set_result(self, result: DriftResult | None):
        """Show a drift result, or nothing."""
        self._result = result
        self.model.set_result(result)
        self.stale.hide()
        if result is None:
            self.verdict.setText(HINT)
            for curve in (self.sqnr_curve, self.headroom_curve):
                curve.setData([], [])
            self.broken_points.setData([], [])
            for mark in self.first_marks:
                mark.hide()
            return
        self.verdict.setText(verdict(result))
        sqnr, used, broken = strip_series(result)
        depth = np.arange(len(sqnr), dtype=float)
        self.sqnr_curve.setData(depth, sqnr)
        self.broken_points.setData(depth[broken], sqnr[broken])
        self.headroom_curve.setData(depth, used)   # log axis: the curve takes log10 itself
        first = self.model.first_divergent_row
        for mark in self.first_marks:
            mark.setVisible(first is not None)
            if first is not None:
                mark.setValue(first)
        if first is not None:
            self.table.scrollTo(self.model.index(first, 0))

    def show_failure(self, message: str):
        self.set_result(None)
        self.verdict.setText(f"The comparison could not be run: {message}")

    def set_stale(self, stale: bool):
        self.stale.setVisible(stale and self._result is not None)


def verdict(result: DriftResult) -> str:
    """One sentence over the table: within tolerance, or where it parts and how far."""
    variant = result.variant
    if result.error:
        return f"The {variant} run could not be compared: {result.error.message}"
    output = result.output or OutputDrift()
    where = (f" The first module that parts from float32: {result.first_divergent}."
             if result.first_divergent else "")
    if result.ok:
        return (f"{variant} stays within tolerance of float32 on {result.device} (output "
                f"SQNR {sqnr_text(output.sqnr_db)} dB).{where}")
    if not output.finite:
        return f"{variant} overflows: its output holds {output.nonfinite} inf/NaN values.{where}"
    return (f"{variant} drifts from float32: output SQNR {sqnr_text(output.sqnr_db)} dB, "
            f"under the {DRIFT_SQNR_DB:.0f} dB tolerance.{where}")

