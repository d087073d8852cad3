"""The Compare tab: each precision variant's throughput plotted live while `bench` runs, then
throughput and memory bars side by side and a table of the figures and the drift from float32
(bench_table.py).

It only shows the bench result (core.precision.bench.BenchResult, as the engine returns it)
and the samples streamed while it is made (plain dicts): no torch here. The worker emits
samples; this widget buffers them in NumPy arrays and redraws from a timer, so a fast model
cannot flood the GUI thread with repaints.

The tab scrolls vertically when the window is shorter than the charts and every variant's row
need: its figures never set the window's least height.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QPalette, QPen
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QPushButton, QSplitter,
                               QStackedWidget, QTabWidget, QToolButton, QVBoxLayout, QWidget)
from pyqtgraph.exporters import ImageExporter

from fp16studio.core.precision.bench import VARIANTS, BenchResult
from fp16studio.core.present.vocabulary import bench_notes, stability, status
from .bench_table import BenchTable
from .fit import ElidedLabel, VerticalScrollArea
from .later_pages import MadeInParts, all_parts
from .light_plot import LightPlot
from .palette import DTYPE_COLORS, OKABE_ITO
from .plot_style import follow_palette, menus_in_parts, restyle, show_values
from .turns import Turns

REDRAW_MS = 66  # ~15 Hz: smooth enough to watch, cheap enough for the GUI thread
EXPORT_WIDTH = 1600
BAR_ROW_PX = 26     # the height of one variant's bars: its name stays readable
# A live curve draws only what is in view, at most a sample per pixel column (its peaks kept):
# thousands of calls stay a cheap repaint.
LIVE_CURVE = {"clipToView": True, "autoDownsample": True, "downsampleMethod": "peak"}


def variant_color(name: str) -> str:
    """A variant takes its compute dtype's colour (tf32 float32's: the same weights); autocast
    variants are also drawn dashed or hatched and tf32 dotted or dense, so colour is never the
    only thing telling them apart."""
    dtype = name.removeprefix("autocast-")
    return DTYPE_COLORS.get("float32" if dtype == "tf32" else dtype, OKABE_ITO["grey"])


def _pen(name: str, width: int = 2) -> QPen:
    pen = pg.mkPen(variant_color(name), width=width)
    if name.startswith("autocast-"):
        pen.setStyle(Qt.PenStyle.DashLine)
    elif name == "tf32":
        pen.setStyle(Qt.PenStyle.DotLine)
    return pen


_NOISY_PEN = pg.mkPen(OKABE_ITO["vermillion"], width=2, style=Qt.PenStyle.DashLine)


def _brush(name: str, light: bool = False) -> QBrush:
    color = QColor(variant_color(name))
    if light:
        color.setAlpha(110)
    style = (Qt.BrushStyle.BDiagPattern if name.startswith("autocast-")
             else Qt.BrushStyle.Dense3Pattern if name == "tf32" else Qt.BrushStyle.SolidPattern)
    return QBrush(color, style)


class _Series:
    """A growing pair of NumPy arrays (capacity doubles), so a sample is an O(1) append, and
    their bounds so far."""

    def __init__(self):
        self.x = np.empty(64)
        self.y = np.empty(64)
        self.n = 0
        self.bounds = [math.inf, -math.inf, math.inf, -math.inf]   # x low, high, y low, high

    def append(self, x: float, y: float):
        if self.n == len(self.x):
            self.x = np.resize(self.x, 2 * self.n)
            self.y = np.resize(self.y, 2 * self.n)
        self.x[self.n], self.y[self.n] = x, y
        self.n += 1
        b = self.bounds
        b[:] = min(b[0], x), max(b[1], x), min(b[2], y), max(b[3], y)


def _page_of(tabs: QTabWidget) -> QStackedWidget:
    """Where `tabs` keeps its pages: a page made there is not moved (and restyled whole) when
    added as a tab."""
    return tabs.findChild(QStackedWidget, "qt_tabwidget_stackedwidget")


# -- the view -----------------------------------------------------------------------------------

class CompareView(MadeInParts, QWidget):
    """Live throughput chart (`plot`, its LightPlot `live`), result bars (`bars`: the
    LightPlots `_result_plots`), figures table (`table`)."""

    def __init__(self, parent=None, *, begun: bool = False):
        """Made whole; `begun` only for `in_parts`, which makes the rest."""
        super().__init__(parent)
        self._doc: BenchResult | None = None
        self._series: dict[str, _Series] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._dirty: set[str] = set()
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._redraw)
        # A result is shown in turns, an event each: the table, then the bars on their hidden
        # page, then the words over it and the page, then the page's charts painted. All in one
        # event held the window 97-113 ms under load (docs/benchmarks.md).
        self._turns = Turns(self)
        if not begun:
            all_parts(self._make())

    def _make(self):
        # A part per event, each some milliseconds (more than 10 held the window under load,
        # issue 43). The page's frame first, then each widget made into its place: a subtree
        # of widgets moved into another widget is restyled whole under the style sheet (the
        # finished body moved into its scroll area, 10-13 ms).
        body = QWidget()
        layout = QVBoxLayout(body)
        self.scroller = VerticalScrollArea(body, fit_content=True, parent=self)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroller)
        # The verdict in one sentence; what the figures mean, the device, the batch and the
        # caveats a click away (Details), so the charts are what the tab opens on.
        headline = QHBoxLayout()
        layout.addLayout(headline)
        self._details_box = QWidget()
        layout.addWidget(self._details_box)
        self._details_box.hide()
        self.stale = QLabel("These figures are from an earlier version of the spec: "
                            "Benchmark to measure the current one.", objectName="staleNote",
                            wordWrap=True)
        self.stale.hide()
        layout.addWidget(self.stale)
        # The live plot while measuring, the result bars after: one at a time, each with the
        # height to be read at 1280x800, and the table below shows every variant.
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)
        layout.addWidget(split, 1)
        self.charts = QTabWidget(split, documentMode=True)
        buttons = QHBoxLayout()
        layout.addLayout(buttons)
        yield

        # The charts are LightPlots: a PlotItem's "Plot Options" form, made in its constructor,
        # was 20-35 ms of the GUI thread a chart (issue 43). Each is made, then placed in its
        # layout (which lays the layout out again at each item), a part each. Their context
        # menus are enabled in a part of their own, at the end, and made when first opened
        # (menus_in_parts).
        self.plot = pg.GraphicsLayoutWidget(_page_of(self.charts))
        self.plot.setObjectName("benchPlot")
        self.charts.addTab(self.plot, "Live throughput")
        yield
        self.live = LightPlot(self.plot.ci, row=0, title="Throughput while measuring", placed=False)
        yield
        self.live.place(True)
        # Its view steps with the samples (LightPlot.grow): pyqtgraph's auto range moved it, and
        # drew its axes and grid anew, at almost every redraw.
        self.live.disableAutoRange()
        self.live.setLabel("left", "samples/s")
        self.live.setLabel("bottom", "timed call")
        self.live.showGrid(x=True, y=True, alpha=0.3)
        self.legend = self.live.legend_beside()   # beside the plot, not over the curves it names
        yield

        # Horizontal bars: the variant names sit on the left axis, one per line, so long names
        # (autocast-bfloat16) never run into each other. Short titles and axis labels: a plot
        # is never narrower than its title, and what they mean is in the key below.
        self.results = QWidget(_page_of(self.charts))
        results = QVBoxLayout(self.results)
        results.setContentsMargins(0, 0, 0, 0)
        self.bars = pg.GraphicsLayoutWidget(self.results)
        # As tall as the most variants' bars, as the table is for their rows: a result never
        # changes the page's size hints (issue 31).
        self.bars.setMinimumHeight(BAR_ROW_PX * len(VARIANTS) + 90)
        results.addWidget(self.bars, 1)
        # The key to the bars on one line (a wrapped label's least height is one line, and a
        # short page drew its other lines over the axes), whole on hover: what each chart
        # measures is on its axis.
        results.addWidget(ElidedLabel("Whiskers: how far a figure moved between rounds · "
                                      "(noisy): too far to rank · solid: peak memory, GPU busy · "
                                      "light: weights, the rest of a step", objectName="muted"))
        self.charts.addTab(self.results, "Results")
        yield
        self._speed_plot = LightPlot(self.bars.ci, row=0, col=0, title="Throughput", placed=False)
        yield
        self._speed_plot.place(True)
        self._speed_plot.setLabel("bottom", "samples/s")
        yield
        self._memory_plot = LightPlot(self.bars.ci, row=0, col=2, title="Memory", placed=False)
        yield
        self._memory_plot.place(True)
        self._memory_plot.setLabel("bottom", "MiB")
        # MiB as they are (0.05 MiB), not rescaled with a "(x0.001)" appended to a long label.
        self._memory_plot.getAxis("bottom").enableAutoSIPrefix(False)
        yield
        # Each step split into the GPU's busy time and the rest (the interpreter launching
        # kernels, waits): at a glance, where half precision's faster kernels went. In the
        # layout only when the document has busy times (a GPU's).
        self._time_plot = LightPlot(self.bars.ci, row=0, col=4, title="Time per call", placed=False)
        self._time_plot.setLabel("bottom", "ms per call")
        yield
        self._speed_bars = pg.BarGraphItem(x0=0, y=[], width=[], height=0.6)
        self._peak_bars = pg.BarGraphItem(x0=0, y=[], width=[], height=0.38)
        self._weight_bars = pg.BarGraphItem(x0=0, y=[], width=[], height=0.38)
        self._busy_bars = pg.BarGraphItem(x0=0, y=[], width=[], height=0.6)
        self._overhead_bars = pg.BarGraphItem(x0=[], y=[], width=[], height=0.6)
        # The spread across rounds drawn as whiskers on each throughput bar (the table has it
        # as a figure): a bar whose whiskers reach far is a figure the machine moved.
        self._spread = pg.ErrorBarItem(x=np.zeros(0), y=np.zeros(0), height=0, beam=0.25)
        self._speed_plot.addItem(self._speed_bars)
        self._speed_plot.addItem(self._spread)
        self._memory_plot.addItem(self._peak_bars)
        self._memory_plot.addItem(self._weight_bars)
        self._time_plot.addItem(self._busy_bars)
        self._time_plot.addItem(self._overhead_bars)
        for item in self._result_plots:
            item.setMouseEnabled(x=False, y=False)
            item.showGrid(x=True, alpha=0.3)
            item.invertY(True)   # the document's order, top to bottom
        # The other bars share the throughput bars' rows, so their names are written once.
        for item in (self._memory_plot, self._time_plot):
            item.setYLink(self._speed_plot)
            item.getAxis("left").setStyle(showValues=False)
        yield
        for widget in (self.plot, self.bars):
            follow_palette(widget)
        yield

        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        headline.addWidget(self.summary, 1)
        self.details_button = QToolButton(text="Details", checkable=True,
                                          toolButtonStyle=Qt.ToolButtonStyle.ToolButtonTextBesideIcon,
                                          arrowType=Qt.ArrowType.RightArrow, autoRaise=True)
        self.details_button.toggled.connect(self._show_details)
        headline.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignTop)
        self.details = QLabel(objectName="muted", wordWrap=True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setObjectName("benchNote")
        self.note.setStyleSheet(f"color: {OKABE_ITO['vermillion']}; font-weight: bold;")
        box = QVBoxLayout(self._details_box)
        box.setContentsMargins(16, 0, 0, 0)
        box.addWidget(self.details)
        box.addWidget(self.note)
        yield

        self.table = BenchTable(split)
        self.model = self.table.figures
        yield

        buttons.addWidget(QLabel("Save:"))
        self._export_buttons = []
        for text, tip, slot in (("Charts (PNG)…", "Save the charts as PNG images", self._ask_png),
                                ("CSV…", "Save the figures as CSV", self._ask_csv),
                                ("JSON…", "Save the figures as the bench --json document", self._ask_json)):
            button = QPushButton(text, toolTip=tip)
            button.clicked.connect(slot)
            button.setEnabled(False)
            buttons.addWidget(button)
            self._export_buttons.append(button)
        self.status = ElidedLabel()
        buttons.addWidget(self.status, 1)
        yield
        self._forget()
        yield
        self._empty_bars()
        yield from menus_in_parts(self.live, *self._result_plots)

    # -- slots --------------------------------------------------------------------------------
    def clear(self):
        """Forget samples and results: a new benchmark starts."""
        self._forget()
        self._empty_bars()

    def _forget(self):
        """All of `clear` but the bars: no samples, figures or words of a run."""
        self._timer.stop()
        self._turns.drop()
        self.bars.setUpdatesEnabled(True)   # were its charts' paint among the turns dropped
        for curve in self._curves.values():
            self.live.removeItem(curve)
            self.legend.removeItem(curve)
        self._curves.clear()
        self._series.clear()
        self.live.regrow()
        show_values(self.live, False)
        self._dirty.clear()
        self._doc = None
        self.model.set_doc(None)
        self.charts.setCurrentWidget(self.plot)
        self.summary.setText("Run a benchmark to compare float32, float16 and bfloat16 on this "
                             "pipeline's own model and batch.")
        self.details.clear()
        self.note.clear()
        self.details_button.setChecked(False)
        self.details_button.hide()
        self._speed_plot.setLabel("bottom", "samples/s")
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
            if not self._series:
                self.charts.setCurrentWidget(self.plot)
                show_values(self.live, True)
            self._series[name] = _Series()
            # Created once per variant; the timer only feeds it new data.
            # One pixel wide: five noisy curves of 700 calls each repainted in 43 ms of the GUI
            # thread with two-pixel (dashed) lines, in 4 ms with these (issue 31).
            self._curves[name] = self.live.plot([], [], pen=_pen(name, width=1), name=name, **LIVE_CURVE)
            self.legend.addItem(self._curves[name], name)
        self._series[name].append(float(sample.get("iteration", self._series[name].n + 1)),
                                  float(value))
        self._dirty.add(name)
        if not self._timer.isActive():
            self._timer.start()

    def set_result(self, doc: BenchResult):
        """Show a finished bench result (CONTRACT §3 `bench --json`): the table now, the bars
        on the result charts' hidden page an event later, the summary and note over them and
        that page in the next, its charts painted in the one after (`finish_drawing` for them
        at once)."""
        self._redraw()
        self._doc = doc
        self.model.set_doc(doc)
        for button in self._export_buttons:
            button.setEnabled(True)
        self._turns.start(self._draw_bars, self._show_results, self._paint_charts)

    def finish_drawing(self):
        """What is left of the result shown now (before an export reads the bars)."""
        self._turns.finish()

    def _say_result(self):
        doc = self._doc
        self.summary.setText(self._headline(doc))
        self.details.setText(" · ".join(self._details(doc)))
        note = doc.note or ""  # on a CPU: what its figures say (core's CPU_NOTE)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.details_button.setText("Details and caveats" if note else "Details")
        self.details_button.show()

    def _show_details(self, shown: bool):
        self.details_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self._details_box.setVisible(shown)

    def _empty_bars(self):
        """No bars, no names nor ranges of figures gone: empty axes until the next result."""
        for bars in (self._speed_bars, self._peak_bars, self._weight_bars, self._busy_bars,
                     self._overhead_bars):
            bars.setOpts(x0=0, y=[], width=[])
        self._spread.setData(x=np.zeros(0), y=np.zeros(0), left=np.zeros(0), right=np.zeros(0))
        for item in self._result_plots:
            item.getAxis("left").setTicks(None)
            item.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
            show_values(item, False)
        self._show_time_plot(False)

    def _draw_bars(self):
        doc = self._doc
        if doc is None:
            return
        ok = [v for v in doc.variants if v.ok]
        if not ok:   # every variant failed: nothing to draw (the table says why)
            self._empty_bars()
            return
        # A noisy figure is marked where it is drawn, not only in the table.
        ticks = [[(i, v.name + (" (noisy)" if stability(v) == "noisy" else "")) for i, v in enumerate(ok)]]
        y = np.arange(len(ok), dtype=float)
        names = [v.name for v in ok]
        mib = 1024.0 ** 2
        pens = [_pen(n) for n in names]
        speeds = np.array([v.samples_per_s or 0.0 for v in ok])
        # An unstable figure's bar outlined in the warning colour, as well as named (noisy).
        speed_pens = [_NOISY_PEN if stability(v) == "noisy" else pen for v, pen in zip(ok, pens)]
        self._speed_bars.setOpts(y=y, width=speeds, brushes=[_brush(n) for n in names], pens=speed_pens)
        half = speeds * np.array([v.spread or 0.0 for v in ok]) / 2
        self._spread.setData(x=speeds, y=y, left=np.minimum(half, speeds), right=half,   # in the text's colour
                             pen=pg.mkPen(self.bars.palette().color(QPalette.ColorRole.Text), width=1.5))
        batch = doc.batch.size if doc.batch is not None else None
        # Where the batch does not fit (1024 wide), the unit alone: the whole in its tooltip.
        self._speed_plot.setLabel("bottom", f"samples/s, batch of {batch}" if batch else "samples/s",
                                  short="samples/s")
        self._peak_bars.setOpts(y=y - 0.2, width=[(v.peak_memory_bytes or 0) / mib for v in ok],
                                brushes=[_brush(n) for n in names], pens=pens)
        self._weight_bars.setOpts(y=y + 0.2, width=[(v.weights_bytes or 0) / mib for v in ok],
                                  brushes=[_brush(n, light=True) for n in names], pens=pens)
        busy = [v.busy_ms for v in ok]
        timed = any(b is not None for b in busy)
        self._show_time_plot(timed)
        if timed:
            busy = [b or 0.0 for b in busy]
            self._busy_bars.setOpts(y=y, width=busy, brushes=[_brush(n) for n in names], pens=pens)
            self._overhead_bars.setOpts(
                x0=busy, y=y, width=[max(v.overhead_ms or 0.0, 0.0) for v in ok],
                brushes=[_brush(n, light=True) for n in names], pens=pens)
        for item in self._result_plots:
            item.getAxis("left").setTicks(ticks)
            item.enableAutoRange()
            show_values(item, True)

    def _show_results(self):
        # The charts drawn once, at their size, with their bars (set in the turn before, while
        # their page was hidden): each drawing of a chart's axes is 2-3 ms of the GUI thread an
        # axis (issue 43). So the words, which change the page's layout and with it the charts'
        # size, are set in the same event as the page is shown, and laid out with it before it
        # is painted; set while the live plot was shown, they also repainted its curves (15 ms).
        # The charts themselves are painted in the next event: the page's first paint (its
        # labels, table, buttons) and theirs were together the heaviest event of a result.
        self._say_result()
        self.bars.setUpdatesEnabled(False)
        self.charts.setCurrentWidget(self.results)

    def _paint_charts(self):
        self.bars.setUpdatesEnabled(True)

    @property
    def _result_plots(self):
        return (self._speed_plot, self._memory_plot, self._time_plot)

    def _show_time_plot(self, show: bool):
        if show != self._time_plot.placed:
            self._time_plot.place(show)
            if show:
                restyle(self.bars)  # in the palette, as the plots already there

    # -- export -------------------------------------------------------------------------------
    def export_png(self, path) -> list[Path]:
        """The result bars at `path` and the live plot beside it (`<name>-live.png`), each
        chart whole: its title, axes and legend."""
        path = Path(path)
        self.finish_drawing()
        live = path.with_name(f"{path.stem}-live{path.suffix or '.png'}")
        for view, target in ((self.bars, path), (self.plot, live)):
            exporter = ImageExporter(view.scene())
            # At least EXPORT_WIDTH pixels wide, whatever size the tab has on screen.
            exporter.parameters()["width"] = max(EXPORT_WIDTH, int(exporter.parameters()["width"]))
            exporter.export(str(target))
        return [path, live]

    def export_csv(self, path) -> Path:
        """The table's figures, unformatted (bytes, samples/s, ms), one row per variant."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(self.model.headers())
            for row in self.model.raw_rows():
                writer.writerow(["" if value is None else value for value in row])
        return path

    def export_json(self, path) -> Path:
        """The bench document as `fp16studio bench --json` prints it."""
        path = Path(path)
        doc = self._doc.to_json() if self._doc is not None else {}
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
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
        bounds = [series.bounds for series in self._series.values()]
        self.live.grow(x=(min(b[0] for b in bounds), max(b[1] for b in bounds)),
                       y=(min(b[2] for b in bounds), max(b[3] for b in bounds)))

    @staticmethod
    def _headline(doc: BenchResult) -> str:
        """The verdict, one sentence (core words it; an unstable bench names no winner)."""
        if doc.verdict:
            return f"Verdict: {doc.verdict}"
        ran = sum(1 for v in doc.variants if v.ok)
        return f"Measured {ran} of {len(doc.variants)} variants on {doc.device or '?'}."

    @staticmethod
    def _details(doc: BenchResult) -> list[str]:
        """What the headline leaves a click away: the device and batch, what the figures
        mean, what could not run."""
        parts = [f"Device: {doc.device or '?'}" + (f" ({doc.device_name})" if doc.device_name else "")]
        batch = doc.batch
        if batch is not None and batch.size:
            parts.append(f"batch of {batch.size}" + (f", {batch.tokens} tokens" if batch.tokens else ""))
        tf32 = doc.tf32
        if tf32 is not None and doc.device.startswith("cuda"):
            state = "on" if tf32.cuda_matmul_allow_tf32 else "off"
            parts.append(f"float32 baseline with TF32 matmul {state} "
                         f"(precision {tf32.float32_matmul_precision})")
        parts += bench_notes(doc)  # what the memory and spread figures mean, as everywhere
        for state, label in (("unsupported", "not on this device"), ("failed", "could not run")):
            names = [v.name for v in doc.variants if status(v) == state]
            if names:
                parts.append(f"{label}: {', '.join(names)} (see Error)")
        if doc.reference_error:
            parts.append(f"no float32 reference: {doc.reference_error}")
        return parts
