"""The Compare tab: each precision variant's throughput plotted live while `bench` runs, then
throughput and memory bars side by side and a table of the figures and the drift from float32.

It only shows the `bench --json` document and the samples streamed while it is made (plain
dicts): no torch here. The worker emits samples; this widget buffers them in NumPy arrays and
redraws from a timer, so a fast model cannot flood the GUI thread with repaints.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QPen
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QHeaderView, QLabel, QPushButton,
                               QSplitter, QTableView, QVBoxLayout, QWidget)

from . import format as fmt
from .palette import DTYPE_COLORS, OKABE_ITO
from .roles import RAW_ROLE

REDRAW_MS = 66  # ~15 Hz: smooth enough to watch, cheap enough for the GUI thread


def variant_color(name: str) -> str:
    """A variant takes its compute dtype's colour; autocast variants are also drawn dashed or
    hatched, so colour is never the only thing telling them apart."""
    return DTYPE_COLORS.get(name.removeprefix("autocast-"), OKABE_ITO["grey"])


def _pen(name: str) -> QPen:
    pen = pg.mkPen(variant_color(name), width=2)
    if name.startswith("autocast-"):
        pen.setStyle(Qt.PenStyle.DashLine)
    return pen


def _brush(name: str, light: bool = False) -> QBrush:
    color = QColor(variant_color(name))
    if light:
        color.setAlpha(110)
    style = (Qt.BrushStyle.BDiagPattern if name.startswith("autocast-")
             else Qt.BrushStyle.SolidPattern)
    return QBrush(color, style)


# -- the table ----------------------------------------------------------------------------------

def _with_ratio(doc: dict) -> list[dict]:
    """The variants, each with "vs_float32": its throughput over float32's (None without)."""
    variants = doc.get("variants", [])
    base = next((v.get("samples_per_s") for v in variants
                 if v.get("name") == "float32" and v.get("ok")), None)
    return [{**v, "vs_float32": v["samples_per_s"] / base
             if base and v.get("samples_per_s") else None} for v in variants]


def _num(spec):
    return lambda x: "" if x is None else spec.format(x)


def _drift(v):
    if v.get("nonfinite_outputs"):
        return None
    return v.get("max_abs_diff_vs_float32")


# (header, raw value of a variant, text of that value). Raw values feed sorting and the CSV.
COLUMNS = (
    ("Variant", lambda v: v.get("name"), str),
    ("Status", lambda v: "ok" if v.get("ok") else "failed", str),
    ("Samples/s", lambda v: v.get("samples_per_s"), _num("{:,.1f}")),
    ("vs float32", lambda v: v.get("vs_float32"), _num("{:.2f}×")),
    ("Tokens/s", lambda v: v.get("tokens_per_s"), _num("{:,.0f}")),
    ("p50 ms", lambda v: (v.get("latency_ms") or {}).get("p50"), _num("{:.2f}")),
    ("p90 ms", lambda v: (v.get("latency_ms") or {}).get("p90"), _num("{:.2f}")),
    ("min ms", lambda v: (v.get("latency_ms") or {}).get("min"), _num("{:.2f}")),
    ("First call ms", lambda v: v.get("first_call_ms"), _num("{:.1f}")),
    ("Peak memory", lambda v: v.get("peak_memory_bytes"), fmt.size),
    ("Weights", lambda v: v.get("weights_bytes"), fmt.size),
    ("Max |diff| vs fp32", _drift, _num("{:.3g}")),
    ("Cosine vs fp32", lambda v: v.get("cosine_vs_float32"), _num("{:.6f}")),
    ("Top-1 agreement", lambda v: v.get("top1_agreement"), _num("{:.1%}")),
    ("inf/NaN outputs", lambda v: v.get("nonfinite_outputs"), _num("{:d}")),
    ("Error", lambda v: v.get("error"), lambda x: x or ""),
)


class ResultsModel(QAbstractTableModel):
    """One row per variant of a bench document: text to read, RAW_ROLE to sort and export."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._rows: list[list] = []

    def set_doc(self, doc: dict | None):
        self.beginResetModel()
        self._rows = []
        if doc:
            self._rows = [[value(v) for _, value, _ in COLUMNS] for v in _with_ratio(doc)]
        self.endResetModel()

    def raw_rows(self) -> list[list]:
        return [list(row) for row in self._rows]

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(COLUMNS)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        raw = self._rows[index.row()][index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[index.column()][2](raw)
        if role == RAW_ROLE:
            return raw
        if role == Qt.ItemDataRole.TextAlignmentRole and index.column() >= 2:
            if index.column() != len(COLUMNS) - 1:
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and index.column() == 1 and raw == "failed":
            return QColor(OKABE_ITO["vermillion"])
        if role == Qt.ItemDataRole.ToolTipRole and index.column() == len(COLUMNS) - 1:
            return raw
        return None

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if (role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal
                and 0 <= section < len(COLUMNS)):
            return COLUMNS[section][0]
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


class _Series:
    """A growing pair of NumPy arrays (capacity doubles), so a sample is an O(1) append."""

    def __init__(self):
        self.x = np.empty(64)
        self.y = np.empty(64)
        self.n = 0

    def append(self, x: float, y: float):
        if self.n == len(self.x):
            self.x = np.resize(self.x, 2 * self.n)
            self.y = np.resize(self.y, 2 * self.n)
        self.x[self.n], self.y[self.n] = x, y
        self.n += 1


# -- the view -----------------------------------------------------------------------------------

class CompareView(QWidget):
    """Live throughput plot (`plot`), result bars (`bars`), figures table (`table`)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._doc: dict | None = None
        self._series: dict[str, _Series] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._dirty: set[str] = set()
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._redraw)

        self.plot = pg.PlotWidget(title="Throughput while measuring")
        self.plot.setObjectName("benchPlot")
        self.plot.setLabel("left", "samples/s")
        self.plot.setLabel("bottom", "timed call")
        self.plot.showGrid(x=True, y=True, alpha=0.3)
        self.plot.setClipToView(True)
        self.plot.setDownsampling(auto=True, mode="peak")
        self.legend = self.plot.addLegend(offset=(-10, 10))

        self.bars = pg.GraphicsLayoutWidget()
        self._speed_plot = self.bars.addPlot(title="Throughput (samples/s, higher is better)")
        self._memory_plot = self.bars.addPlot(
            title="Memory (MiB, lower is better): peak solid, weights light")
        self._speed_bars = pg.BarGraphItem(x=[], height=[], width=0.6)
        self._peak_bars = pg.BarGraphItem(x=[], height=[], width=0.38)
        self._weight_bars = pg.BarGraphItem(x=[], height=[], width=0.38)
        self._speed_plot.addItem(self._speed_bars)
        self._memory_plot.addItem(self._peak_bars)
        self._memory_plot.addItem(self._weight_bars)
        for item in (self._speed_plot, self._memory_plot):
            item.setMouseEnabled(x=False, y=False)
            item.showGrid(y=True, alpha=0.3)

        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setObjectName("benchNote")
        self.note.setStyleSheet(f"color: {OKABE_ITO['vermillion']}; font-weight: bold;")

        self.stale = QLabel("These figures are from an earlier version of the spec: "
                            "Benchmark to measure the current one.", objectName="staleNote",
                            wordWrap=True)
        self.stale.hide()

        self.model = ResultsModel(self)
        proxy = _SortProxy(self)
        proxy.setSourceModel(self.model)
        self.table = QTableView()
        self.table.setModel(proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # keep the document's order
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)

        self.status = QLabel()
        buttons = QHBoxLayout()
        self._export_buttons = []
        for text, slot in (("Save charts (PNG)…", self._ask_png),
                           ("Save figures (CSV)…", self._ask_csv),
                           ("Save figures (JSON)…", self._ask_json)):
            button = QPushButton(text)
            button.clicked.connect(slot)
            button.setEnabled(False)
            buttons.addWidget(button)
            self._export_buttons.append(button)
        buttons.addWidget(self.status, 1)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.plot)
        split.addWidget(self.bars)
        split.addWidget(self.table)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.note)
        layout.addWidget(self.stale)
        layout.addWidget(split, 1)
        layout.addLayout(buttons)
        self.clear()

    # -- slots --------------------------------------------------------------------------------
    def clear(self):
        """Forget samples and results: a new benchmark starts."""
        self._timer.stop()
        for curve in self._curves.values():
            self.plot.removeItem(curve)
            self.legend.removeItem(curve)
        self._curves.clear()
        self._series.clear()
        self._dirty.clear()
        self._doc = None
        self.model.set_doc(None)
        for bars in (self._speed_bars, self._peak_bars, self._weight_bars):
            bars.setOpts(x=[], height=[])
        self.summary.setText("Run a benchmark to compare float32, float16 and bfloat16 on this "
                             "pipeline's own model and batch.")
        self.note.hide()
        self.stale.hide()
        self.status.clear()
        for button in self._export_buttons:
            button.setEnabled(False)

    def set_stale(self, stale: bool):
        """Mark the figures as another spec's (the spec changed since they were measured)."""
        self.stale.setVisible(stale and self._doc is not None)

    def add_sample(self, sample: dict):
        """One timed call: {"variant", "iteration", "latency_ms", "samples_per_s"}."""
        name, value = sample.get("variant"), sample.get("samples_per_s")
        if name is None or value is None:
            return
        if name not in self._series:
            self._series[name] = _Series()
            # Created once per variant; the timer only feeds it new data.
            self._curves[name] = self.plot.plot([], [], pen=_pen(name), name=name)
        self._series[name].append(float(sample.get("iteration", self._series[name].n + 1)),
                                  float(value))
        self._dirty.add(name)
        if not self._timer.isActive():
            self._timer.start()

    def set_result(self, doc: dict):
        """Show a finished bench document (CONTRACT §3 `bench --json`)."""
        self._redraw()
        self._doc = doc
        self.model.set_doc(doc)
        variants = doc.get("variants", [])
        ok = [v for v in variants if v.get("ok")]
        ticks = [[(i, v["name"]) for i, v in enumerate(ok)]]
        x = np.arange(len(ok), dtype=float)
        names = [v["name"] for v in ok]
        mib = 1024.0 ** 2
        self._speed_bars.setOpts(x=x, height=[v.get("samples_per_s") or 0 for v in ok],
                                 brushes=[_brush(n) for n in names],
                                 pens=[_pen(n) for n in names])
        self._peak_bars.setOpts(x=x - 0.2, height=[(v.get("peak_memory_bytes") or 0) / mib
                                                   for v in ok],
                                brushes=[_brush(n) for n in names], pens=[_pen(n) for n in names])
        self._weight_bars.setOpts(x=x + 0.2, height=[(v.get("weights_bytes") or 0) / mib
                                                     for v in ok],
                                  brushes=[_brush(n, light=True) for n in names],
                                  pens=[_pen(n) for n in names])
        for item in (self._speed_plot, self._memory_plot):
            item.getAxis("bottom").setTicks(ticks)
            item.enableAutoRange()
        self.summary.setText(self._summary_text(doc))
        note = doc.get("note") or ""  # on a CPU: no speed-up expected (core's CPU_NOTE)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        for button in self._export_buttons:
            button.setEnabled(True)

    # -- export -------------------------------------------------------------------------------
    def export_png(self, path) -> list[Path]:
        """The result bars at `path` and the live plot beside it (`<name>-live.png`)."""
        path = Path(path)
        live = path.with_name(f"{path.stem}-live{path.suffix or '.png'}")
        for item, target in ((self.bars.scene(), path), (self.plot.getPlotItem(), live)):
            exporter = ImageExporter(item)
            exporter.parameters()["width"] = max(800, int(exporter.parameters()["width"]))
            exporter.export(str(target))
        return [path, live]

    def export_csv(self, path) -> Path:
        """The table's figures, unformatted (bytes, samples/s, ms), one row per variant."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow([header for header, _, _ in COLUMNS])
            for row in self.model.raw_rows():
                writer.writerow(["" if value is None else value for value in row])
        return path

    def export_json(self, path) -> Path:
        """The bench document as `fp16studio bench --json` prints it."""
        path = Path(path)
        path.write_text(json.dumps(self._doc or {}, indent=2) + "\n", encoding="utf-8")
        return path

    def _ask_png(self):
        self._ask("Save charts", "PNG image (*.png)", self.export_png)

    def _ask_csv(self):
        self._ask("Save figures", "CSV (*.csv)", self.export_csv)

    def _ask_json(self):
        self._ask("Save figures", "JSON (*.json)", self.export_json)

    def _ask(self, title, file_filter, export):
        path, _ = QFileDialog.getSaveFileName(self, title, "", file_filter)
        if not path:
            return
        try:
            written = export(path)
        except OSError as exc:
            self.status.setText(f"Could not save {path}: {exc.strerror or exc}")
            return
        files = written if isinstance(written, list) else [written]
        self.status.setText("Saved " + ", ".join(str(p) for p in files))

    # -- internals ----------------------------------------------------------------------------
    def _redraw(self):
        if not self._dirty:
            self._timer.stop()  # nothing new since the last tick: sleep until the next sample
            return
        for name in self._dirty:
            series = self._series[name]
            self._curves[name].setData(series.x[:series.n], series.y[:series.n])
        self._dirty.clear()

    @staticmethod
    def _summary_text(doc: dict) -> str:
        parts = [f"Device: {doc.get('device', '?')}"
                 + (f" ({doc['device_name']})" if doc.get("device_name") else "")]
        batch = doc.get("batch") or {}
        if batch.get("size"):
            parts.append(f"batch of {batch['size']}"
                         + (f", {batch['tokens']} tokens" if batch.get("tokens") else ""))
        tf32 = doc.get("tf32") or {}
        if tf32 and str(doc.get("device", "")).startswith("cuda"):
            state = "on" if tf32.get("cuda_matmul_allow_tf32") else "off"
            parts.append(f"float32 baseline with TF32 matmul {state} "
                         f"(precision {tf32.get('float32_matmul_precision')})")
        kinds = {v.get("memory_kind") for v in doc.get("variants", []) if v.get("ok")}
        if "process-rss" in kinds:
            parts.append("peak memory = the process's resident memory")
        elif "cuda-max-allocated" in kinds:
            parts.append("peak memory = torch.cuda.max_memory_allocated")
        failed = [v["name"] for v in doc.get("variants", []) if not v.get("ok")]
        if failed:
            parts.append("could not run: " + ", ".join(failed) + " (see Error)")
        if doc.get("reference_error"):
            parts.append(f"no float32 reference: {doc['reference_error']}")
        return " · ".join(parts)
