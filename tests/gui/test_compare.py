"""CompareView: live samples, the result bars and table, and its exports; on a GPU's document
the verdict, busy time against the rest of each step at a glance, and empty axes once the
figures are gone (Continue as a Pipeline clears them)."""

import csv
import json
import subprocess
import sys

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt

from fp16studio.core.precision.bench import BenchResult
from fp16studio.gui.compare import CompareView
from fp16studio.gui.roles import RAW_ROLE

DOC = {
    "device": "cpu", "device_name": "x86_64",
    "note": "Measured on a CPU: no speed-up is expected.",
    "tf32": {"cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": True,
             "float32_matmul_precision": "highest"},
    "batch": {"size": 4, "shapes": {"input_ids": [4, 16]}, "tokens": 60},
    "variants": [
        {"name": "float32", "ok": True, "samples_per_s": 400.0,
         "latency_ms": {"p50": 10.0, "p90": 11.0, "min": 9.5}, "peak_memory_bytes": 600 * 2**20,
         "weights_bytes": 90 * 2**20, "max_abs_diff_vs_float32": 0.0, "top1_agreement": None,
         "cosine_vs_float32": 1.0, "nonfinite_outputs": 0, "memory_kind": "process-rss",
         "tokens_per_s": 6000.0, "first_call_ms": 30.0, "error": None},
        {"name": "float16", "ok": True, "samples_per_s": 200.0,
         "latency_ms": {"p50": 20.0, "p90": 22.0, "min": 19.0}, "peak_memory_bytes": 550 * 2**20,
         "weights_bytes": 45 * 2**20, "max_abs_diff_vs_float32": None, "top1_agreement": None,
         "cosine_vs_float32": None, "nonfinite_outputs": 12, "memory_kind": "process-rss",
         "tokens_per_s": 3000.0, "first_call_ms": 40.0, "error": None},
        {"name": "bfloat16", "ok": False, "samples_per_s": None, "latency_ms": None,
         "peak_memory_bytes": None, "weights_bytes": None, "max_abs_diff_vs_float32": None,
         "top1_agreement": None, "error": "RuntimeError: no bfloat16 kernel"},
    ],
}


@pytest.fixture
def view(qtbot):
    widget = CompareView()
    qtbot.addWidget(widget)
    widget.resize(1100, 900)
    widget.show()
    return widget


def shown(view, plot):
    """Whether the chart `plot` (its title, axes and bars) is drawn with the result bars."""
    scenes = {item.scene() for item in plot.items()}
    assert len(scenes) == 1   # all of it or none
    return scenes == {view.bars.scene()}


def _cell(view, row, header, role=Qt.ItemDataRole.DisplayRole):
    return view.model.data(view.model.index(row, view.model.headers().index(header)), role)


def test_samples_are_plotted_live_on_curves_created_once(view, qtbot):
    for i in (1, 2, 3):
        view.add_sample({"variant": "float32", "iteration": i, "latency_ms": 10.0,
                         "samples_per_s": 400.0 + i})
    view.add_sample({"variant": "float16", "iteration": 1, "latency_ms": 20.0,
                     "samples_per_s": 200.0})
    items = view.live.listDataItems()
    assert [item.name() for item in items] == ["float32", "float16"]
    qtbot.waitUntil(lambda: items[0].getData()[0] is not None
                    and len(items[0].getData()[0]) == 3, timeout=2000)
    assert list(items[0].getData()[1]) == [401.0, 402.0, 403.0]
    for i in range(4, 200):  # past the buffer's first capacity
        view.add_sample({"variant": "float32", "iteration": i, "latency_ms": 10.0,
                         "samples_per_s": 400.0})
    qtbot.waitUntil(lambda: len(items[0].getData()[0]) == 199, timeout=2000)
    assert view.live.listDataItems() == items
    qtbot.waitUntil(lambda: not view._timer.isActive(), timeout=2000)  # idle: stops redrawing
    # Values left and below only, under its title.
    plot = view.live
    axes = [item for item in view.plot.scene().items() if isinstance(item, pg.AxisItem)]
    assert sorted(axis.orientation for axis in axes if axis.isVisible()) == ["bottom", "left"]
    assert plot.getAxis("left").labelText == "samples/s"
    assert plot.title.text == "Throughput while measuring" and plot.title.scene() is view.plot.scene()
    assert [label.text for _, label in view.legend.items] == ["float32", "float16"]
    assert {item.opts["pen"].widthF() for item in items} == {1.0}   # wider: 10x a repaint's CPU


def test_result_fills_bars_table_and_says_cpu_gives_no_speed_up(view, qtbot, qtmodeltester):
    view.add_sample({"variant": "float32", "iteration": 1, "latency_ms": 10.0,
                     "samples_per_s": 400.0})
    view.set_result(BenchResult.from_json(DOC))
    assert len(view._speed_bars.opts["width"]) == 0     # the bars come an event after the table
    qtbot.waitUntil(lambda: len(view._speed_bars.opts["width"]) == 2)
    qtbot.waitUntil(lambda: view.charts.currentWidget() is view.results)   # then words and page
    qtmodeltester.check(view.model)
    assert view.model.rowCount() == 3
    assert _cell(view, 0, "Variant") == "float32" and _cell(view, 0, "Samples/s") == "400.0"
    assert _cell(view, 1, "vs float32") == "0.50×"
    assert _cell(view, 1, "Peak memory") == "550.0 MiB" and _cell(view, 1, "Peak memory", RAW_ROLE) == 550 * 2**20
    assert _cell(view, 1, "Max |diff| vs fp32") == "" and _cell(view, 1, "inf/NaN outputs") == "12"
    assert _cell(view, 2, "Status") == "failed" and "no bfloat16 kernel" in _cell(view, 2, "Error")
    # Keys this document predates are not shown as empty columns.
    assert "Stability" not in view.model.headers() and "TFLOP/s" not in view.model.headers()
    assert "no speed-up" in view.note.text()
    assert "bfloat16" in view.details.text() and "Peak memory: the process's resident memory" in view.details.text()
    # Only the variants that ran get bars.
    assert list(view._speed_bars.opts["width"]) == [400.0, 200.0]
    assert list(view._weight_bars.opts["width"]) == [90.0, 45.0]
    view.table.sortByColumn(2, Qt.SortOrder.DescendingOrder)  # sorts on raw numbers
    proxy = view.table.model()
    assert proxy.data(proxy.index(0, 0)) == "float32"


def test_exports_png_csv_and_json(view, tmp_path):
    view.add_sample({"variant": "float32", "iteration": 1, "latency_ms": 10.0,
                     "samples_per_s": 400.0})
    view.set_result(BenchResult.from_json(DOC))
    written = view.export_png(tmp_path / "charts.png")
    assert [p.name for p in written] == ["charts.png", "charts-live.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with view.export_csv(tmp_path / "figures.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["Variant"] for row in rows] == ["float32", "float16", "bfloat16"]
    assert float(rows[0]["Samples/s"]) == 400.0 and int(rows[1]["Weights"]) == 45 * 2**20
    assert rows[2]["Samples/s"] == "" and rows[2]["Status"] == "failed"
    assert json.loads(view.export_json(tmp_path / "bench.json").read_text()) == BenchResult.from_json(DOC).to_json()


def test_clear_forgets_the_previous_run(view):
    view.add_sample({"variant": "float32", "iteration": 1, "latency_ms": 1.0,
                     "samples_per_s": 4.0})
    view.set_result(BenchResult.from_json(DOC))
    view.finish_drawing()
    view.clear()
    assert view.live.listDataItems() == [] and view.model.rowCount() == 0
    assert not view.note.isVisibleTo(view)
    assert len(view._speed_bars.opts["width"]) == 0


def test_columns_keep_their_widths_when_another_result_arrives(view, qtbot):
    """The widths come from the headers and the font, not the cells: a result with wider
    figures and longer names neither moves the columns nor cuts a header or a variant's name."""
    view.set_result(BenchResult.from_json(DOC))
    header = view.table.horizontalHeader()
    widths = {name: header.sectionSize(i) for i, name in enumerate(view.model.headers())}
    wider = json.loads(json.dumps(DOC))
    wider["variants"][0].update(name="autocast-bfloat16", samples_per_s=12345.6,
                                peak_memory_bytes=987 * 2**20)
    wider["variants"][2]["error"] = "RuntimeError: " + "a long message " * 20
    view.set_result(BenchResult.from_json(wider))
    assert {name: header.sectionSize(i) for i, name in enumerate(view.model.headers())} == widths
    metrics = header.fontMetrics()
    last = len(widths) - 1   # the last column stretches to the table's edge
    assert all(header.sectionSize(i) > metrics.horizontalAdvance(name)
               for i, name in enumerate(view.model.headers()) if i != last)
    assert widths["Variant"] > view.table.fontMetrics().horizontalAdvance("autocast-bfloat16")


def test_a_real_benchmark_streams_into_the_view(view, qtbot):
    from fp16studio.core.precision.bench import benchmark
    from fp16studio.core.demo.pipelines import demo_spec

    result = benchmark(demo_spec("healthy"), variants="float32,bfloat16",
                       on_sample=view.add_sample, warmup=1, min_iterations=3, min_seconds=0.0)
    view.set_result(result)
    assert {item.name() for item in view.live.listDataItems()} == {"float32", "bfloat16"}
    assert all(len(item.getData()[0]) == 3 for item in view.live.listDataItems())
    assert view.model.rowCount() == 2 and _cell(view, 0, "Status") == "ok"
    qtbot.waitUntil(lambda: bool(view.note.text()))   # the words come a turn after the table
    assert "says little about a GPU" in view.note.text()


def test_compare_does_not_import_torch():
    code = "import sys, fp16studio.gui.compare; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**__import__("os").environ,
                                          "QT_QPA_PLATFORM": "offscreen"})
    assert out.stdout.strip() == "False"


def test_per_variant_stability_support_and_throughput_are_shown(view):
    """The keys the bench document gained (CONTRACT §3): a badge for a noisy figure, where
    the variant runs natively, and the achieved TFLOP/s."""
    doc = json.loads(json.dumps(DOC))
    doc["variants"][0].update(stable=True, spread=0.02, support="native", tflops=1.5, flops_per_sample=10**9)
    doc["variants"][1].update(stable=False, spread=0.4, support="emulated", tflops=0.7, flops_per_sample=10**9)
    doc["variants"][2].update(support="unsupported")
    view.set_result(BenchResult.from_json(doc))
    view.finish_drawing()
    assert [_cell(view, r, "Stability") for r in range(3)] == ["stable", "noisy", ""]
    assert [_cell(view, r, "Support") for r in range(3)] == ["native", "emulated", "unsupported"]
    assert _cell(view, 2, "Status") == "unsupported"  # not tried, rather than failed
    assert "not on this device: bfloat16" in view.details.text()
    assert "could not run" not in view.details.text()
    assert _cell(view, 1, "Spread") == "40.0%" and _cell(view, 0, "TFLOP/s") == "1.5"
    assert "% of peak" not in view.model.headers()       # no known peak on this device
    labels = [text for _, text in view._speed_plot.getAxis("left")._tickLevels[0]]
    assert labels == ["float32", "float16 (noisy)"]


def test_every_variant_fits_in_the_table_and_the_charts_save_at_full_size(view, tmp_path):
    from PySide6.QtGui import QImage

    doc = json.loads(json.dumps(DOC))
    doc["variants"] += [dict(doc["variants"][0], name=n)
                        for n in ("tf32", "autocast-float16", "autocast-bfloat16")]
    view.resize(640, 500)
    view.set_result(BenchResult.from_json(doc))
    table = view.table
    assert table.minimumHeight() >= table.verticalHeader().defaultSectionSize() * 7
    written = view.export_png(tmp_path / "charts.png")
    assert all(QImage(str(p)).width() >= 1600 for p in written)


def test_variants_are_told_apart_by_more_than_colour():
    from fp16studio.gui.compare import _brush, _pen, variant_color

    assert variant_color("tf32") == variant_color("float32")  # the same weights
    names = ("float32", "tf32", "autocast-float16")
    assert len({_pen(name).style() for name in names}) == 3     # the lines of the live plot
    assert len({_brush(name).style() for name in names}) == 3   # the bars


# -- a GPU's document: the verdict, busy time and the rest --------------------------------------
FIGURES = {"ok": True, "stable": True, "spread": 0.01, "peak_memory_bytes": 2**30,
           "weights_bytes": 2**29, "max_abs_diff_vs_float32": 0.0, "top1_agreement": None}
GPU_DOC = {
    "device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3", "note": None,
    "verdict": "float16 pays: 4.17x float32's throughput but launch-bound.",
    "variants": [
        dict(FIGURES, name="float32", samples_per_s=880.0, busy_ms=36.0, overhead_ms=0.3,
             bound="math", kernel_speedup=1.0, verdict="float32 is math-bound.",
             latency_ms={"p50": 36.3, "p90": 37.0, "min": 36.0}),
        dict(FIGURES, name="float16", samples_per_s=3674.0, busy_ms=2.9, overhead_ms=5.8,
             bound="launch", kernel_speedup=12.4, verdict="float16 is launch-bound.",
             latency_ms={"p50": 8.7, "p90": 9.0, "min": 8.6})]}
CPU_DOC = {"device": "cpu", "verdict": "Half precision does not pay on this CPU (2 threads).",
           "variants": [dict(FIGURES, name="float32", samples_per_s=10.0, busy_ms=None,
                             overhead_ms=None, bound=None, kernel_speedup=None,
                             verdict="float32 on this CPU (2 threads): the reference.",
                             latency_ms={"p50": 400.0, "p90": 410.0, "min": 390.0})]}


def test_busy_and_the_rest_of_each_step_are_stacked_per_variant(view):
    view.set_result(BenchResult.from_json(GPU_DOC))
    view.finish_drawing()
    assert shown(view, view._time_plot)
    busy, rest = view._busy_bars.opts, view._overhead_bars.opts
    assert list(busy["width"]) == [36.0, 2.9] and list(rest["x0"]) == [36.0, 2.9]
    assert list(rest["width"]) == [0.3, 5.8]
    assert view.summary.text().startswith("Verdict: float16 pays: 4.17x")
    headers = view.model.headers()
    assert {"Busy ms", "Overhead ms", "Bound", "Kernels vs fp32"} <= set(headers)
    tip = view.model.data(view.model.index(1, 0), 3)  # ToolTipRole on the variant's name
    assert tip == "float16 is launch-bound."


def test_on_a_cpu_there_is_no_time_chart_and_no_gpu_columns(view):
    view.set_result(BenchResult.from_json(GPU_DOC))
    view.finish_drawing()
    view.set_result(BenchResult.from_json(CPU_DOC))
    view.finish_drawing()
    assert not shown(view, view._time_plot)
    assert not {"Busy ms", "Bound"} & set(view.model.headers())
    assert "Verdict: Half precision does not pay on this CPU" in view.summary.text()


def test_once_cleared_the_charts_keep_no_names_nor_ranges_of_the_old_figures(view):
    view.set_result(BenchResult.from_json(GPU_DOC))
    view.finish_drawing()
    view.clear()
    for plot in view._result_plots:
        assert plot.getAxis("left")._tickLevels is None
        assert [list(r) for r in plot.viewRange()] == [[0.0, 1.0], [0.0, 1.0]]
    assert view.charts.currentWidget() is view.plot
    assert not shown(view, view._time_plot)


def test_the_log_says_a_variant_this_device_cannot_run_is_unsupported_not_failed(qtbot):
    from fp16studio.core.spec.value import PipelineSpec
    from fp16studio.gui.session_controller import SessionController

    controller = SessionController()
    try:
        logged = []
        controller.logged.connect(lambda level, text: logged.append((level, text)))
        why = "TF32 is a mode of NVIDIA GPUs (compute capability 8.0 or newer)"
        doc = {"device": "cpu", "variants": [
            {"name": "tf32", "ok": False, "support": "unsupported", "error": why},
            {"name": "float16", "ok": False, "support": "native", "error": "boom"}]}
        controller._on_benchmark(PipelineSpec(model="m", dataset="synthetic"), BenchResult.from_json(doc))
        assert ("warning", f"tf32: unsupported ({why})") in logged
        assert ("warning", "float16: failed (boom)") in logged
    finally:
        controller.shutdown()


def test_an_empty_chart_is_drawn_empty_and_fills_with_figures(view):
    def values(plot):
        return [plot.getAxis(side).style["showValues"] for side in ("left", "bottom")]

    live = view.live
    assert values(live) == [False, False]            # no 0.2 ... 0.8 of nothing
    view.add_sample({"variant": "float32", "iteration": 1, "latency_ms": 5.0, "samples_per_s": 800.0})
    assert values(live) == [True, True]
    view.set_result(BenchResult.from_json(DOC))
    view.finish_drawing()
    # Each chart's figures shown; the variants' names once, on the first chart (the others
    # share its rows: names on each squeezed the memory chart to nothing at 1024 wide).
    assert values(view._result_plots[0]) == [True, True]
    assert all(values(plot)[1] for plot in view._result_plots)
    view.set_result(BenchResult.from_json(dict(DOC, variants=[dict(v, ok=False) for v in DOC["variants"]])))
    view.finish_drawing()                             # every variant failed: nothing to draw
    assert all(values(plot) == [False, False] for plot in view._result_plots)
    view.clear()
    assert values(live) == [False, False]


def test_the_verdict_is_one_sentence_and_the_rest_a_click_away(view, qtbot):
    """Issue 43 item 5: the tab opens on the verdict and the charts, not a paragraph."""
    doc = dict(CPU_DOC, note="Measured on a CPU: judge speed on the device you deploy on.",
               batch={"size": 4})
    view.show()
    view.set_result(BenchResult.from_json(doc))
    view.finish_drawing()
    assert view.summary.text() == "Verdict: Half precision does not pay on this CPU (2 threads)."
    assert not view.details.isVisibleTo(view) and not view.note.isVisibleTo(view)
    assert view.details_button.isVisibleTo(view) and "caveats" in view.details_button.text()
    view.details_button.click()
    assert view.details.isVisibleTo(view) and view.note.isVisibleTo(view)
    assert "batch of 4" in view.details.text()
    view.clear()
    assert not view.details_button.isVisibleTo(view)


def test_the_spread_is_drawn_as_whiskers_and_an_unstable_bar_is_marked(view):
    """Issue 43 items 2 and 5: the spread a picture (whiskers on the throughput bars), the
    noisy variant's bar outlined as well as named, the axis in its unit and batch."""
    doc = json.loads(json.dumps(GPU_DOC))
    doc["batch"] = {"size": 8}
    doc["variants"][1].update(stable=False, spread=0.5)
    view.set_result(BenchResult.from_json(doc))
    view.finish_drawing()
    opts = view._spread.opts
    assert list(opts["x"]) == [880.0, 3674.0]
    assert list(opts["right"]) == [880.0 * 0.01 / 2, 3674.0 * 0.5 / 2]
    assert list(opts["left"]) == list(opts["right"])
    pens = view._speed_bars.opts["pens"]
    assert pens[1].style() == Qt.PenStyle.DashLine and pens[0].style() == Qt.PenStyle.SolidLine
    assert view._speed_plot.getAxis("bottom").labelText == "samples/s, batch of 8"
    assert view._time_plot.getAxis("bottom").labelText == "ms per call"
    view.clear()
    assert len(view._spread.opts["x"]) == 0
    assert view._speed_plot.getAxis("bottom").labelText == "samples/s"


def test_a_growing_live_plot_draws_its_axes_anew_a_few_times_per_tenfold_growth(view):
    """Each redraw whose new samples moved the view drew both axes and their grid anew (10-20 ms
    of the GUI thread under load, issue 43): the view now steps, so over 400 samples painted
    one by one the axes are drawn anew a handful of times, not at each sample; and the view
    holds every sample."""
    drawn = []
    for side in ("left", "bottom"):
        axis = view.live.getAxis(side)
        specs = axis.generateDrawSpecs
        axis.generateDrawSpecs = lambda *a, _specs=specs, _side=side: (drawn.append(_side), _specs(*a))[1]
    ranges = []
    view.live.vb.sigRangeChanged.connect(lambda *_: ranges.append(view.live.viewRange()))
    rng = np.random.default_rng(0)
    for i in range(1, 401):
        for name, speed in (("float32", 400.0 + 3 * i), ("float16", 200.0)):
            view.add_sample({"variant": name, "iteration": i, "latency_ms": 5.0,
                             "samples_per_s": speed * (1 + 0.05 * rng.standard_normal())})
        view._redraw()   # the timer's tick
        view.plot.grab()  # and the paint after it
    assert len(ranges) <= 20 and len(drawn) <= 2 * 20, (len(ranges), len(drawn))
    (x0, x1), (y0, y1) = view.live.viewRange()
    xs, ys = zip(*(item.getData() for item in view.live.listDataItems()))
    assert x0 <= min(map(min, xs)) and max(map(max, xs)) < x1
    assert y0 <= min(map(min, ys)) and max(map(max, ys)) < y1
    view.clear()   # a new benchmark: the view empty, then grown anew from its first samples
    assert view.live.viewRange() == [[0, 1], [0, 1]]
    view.add_sample({"variant": "float32", "iteration": 1, "latency_ms": 5.0, "samples_per_s": 40.0})
    view._redraw()
    (x0, x1), (y0, y1) = view.live.viewRange()
    assert x1 <= 1.5 and 40 < y1 <= 50


def test_a_live_view_moved_by_hand_stays_where_it_was_put(view):
    view.add_sample({"variant": "float32", "iteration": 1, "latency_ms": 5.0, "samples_per_s": 40.0})
    view._redraw()
    view.live.vb.sigRangeChangedManually.emit([True, True])   # as a drag or the wheel does
    view.live.setRange(xRange=(0, 0.5), yRange=(10, 20), padding=0)
    view.add_sample({"variant": "float32", "iteration": 2, "latency_ms": 5.0, "samples_per_s": 4000.0})
    view._redraw()
    assert view.live.viewRange() == [[0, 0.5], [10, 20]]


def test_on_a_narrow_page_the_live_legend_names_each_variant_whole_beside_its_line(view, qtbot):
    """At 1024x700 the Compare page is about 390 pixels wide: the legend beside the live plot
    was cut ("floa"), the plot held as wide as its title, and each sample line sat far below
    its name in a legend stretched to the plot's height."""
    view.resize(390, 560)
    view.show()
    qtbot.waitExposed(view)
    names = ("float32", "bfloat16", "autocast-float16")
    for i in range(30):
        for name in names:
            view.add_sample({"variant": name, "iteration": i + 1, "samples_per_s": 1000.0 + i})
    view._redraw()
    qtbot.wait(50)
    visible = view.plot.mapToScene(view.plot.viewport().rect()).boundingRect()
    for (sample, label), name in zip(view.legend.items, names):
        assert label.text == name
        shown = label.mapRectToScene(label.itemRect())
        assert visible.contains(shown), (name, shown, visible)   # the whole name in view
        line = sample.mapRectToScene(sample.boundingRect())
        assert abs(line.center().y() - shown.center().y()) < shown.height() / 2   # beside it
