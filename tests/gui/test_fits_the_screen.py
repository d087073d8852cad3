"""The window fits the screen it is on (issue 21): at 1280x800 and 1024x700, before and after a
run, a trace, a benchmark and a comparison with float32, no panel's size hint pushes the window's
minimum past the screen, the Findings panel stays in the window, and its text (the message, the
script's lines, the fixes, their code) wraps inside it instead of running past its edge.

Offscreen there is no window manager to refuse a size: the test asks for the window's minimum
and checks what a 1024x700 window lays out.
"""

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPoint, QSize
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QApplication, QLabel

from fp16studio.core.precision.bench import BenchResult
from fp16studio.gui import MainWindow
from fp16studio.gui.fit import WrappedText

TIMEOUT_MS = 180_000
SCREENS = ((1280, 800), (1024, 700))
TITLE_BAR = 40          # what a window manager's frame and a panel take off a screen's height
SMALLEST = QSize(1024, 700 - TITLE_BAR)


@pytest.fixture
def window(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1280, 800 - TITLE_BAR)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None and not window.worker.pending(), timeout=TIMEOUT_MS)
    return window


def settle(qtbot):
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(10)


def right_edge(widget, ancestor) -> int:
    return widget.mapTo(ancestor, QPoint(widget.width(), 0)).x()


def assert_fits(qtbot, window, when):
    for width, height in SCREENS:
        for least in (window.minimumSizeHint(), window.minimumSize()):
            assert least.width() <= width and least.height() <= height - TITLE_BAR, \
                f"{when}: the window's minimum {least.toTuple()} does not fit {width}x{height}"
    # The smallest screen's window lays every panel out inside it, none below its own minimum.
    window.resize(SMALLEST)
    settle(qtbot)
    assert window.size() == SMALLEST, when
    for panel in (window.form, window.main_tabs, window.bottom_tabs, window.findings):
        assert right_edge(panel, window) <= window.width(), (when, panel)
        assert panel.width() >= panel.minimumSizeHint().width(), (when, panel)
    assert_form_readable(window.form, when)
    assert_findings_readable(qtbot, window.findings, when)
    window.resize(1280, 800 - TITLE_BAR)
    settle(qtbot)
    assert_findings_readable(qtbot, window.findings, when)


def assert_form_readable(form, when):
    """Every control of the Pipeline form whole: nothing past the viewport's right edge, and
    nothing to scroll sideways to (Tab would)."""
    viewport = form.viewport()
    assert form.widget().width() <= viewport.width(), when
    assert form.horizontalScrollBar().maximum() == 0, when
    for key, field in form.fields.items():
        if field.widget.isVisibleTo(form):
            assert right_edge(field.widget, viewport) <= viewport.width(), (when, key)
            assert field.widget.width() >= field.widget.minimumSizeHint().width(), (when, key)


def assert_findings_readable(qtbot, panel, when):
    """Each finding in turn: every text of the detail wraps, is no wider than the detail's
    viewport, keeps its longest word whole and its last line in view; so do the fix cards."""
    viewport = panel.scroller.viewport()
    rows = max(1, panel.model.rowCount())
    for row in range(rows):
        if panel.model.rowCount():
            panel.view.setCurrentIndex(panel.model.index(row, 0))
        settle(qtbot)
        detail = panel.detail
        where = f"{when}, finding {row}"
        assert detail.width() <= viewport.width(), where
        texts = [w for w in detail.findChildren(QLabel) + detail.findChildren(WrappedText)
                 if w.isVisibleTo(detail)]
        assert texts, where
        for text in texts:
            name = f"{where}: {type(text).__name__} {text.objectName()!r} {text.text()[:40]!r}"
            assert text.wordWrap(), name
            assert right_edge(text, detail) <= viewport.width(), name
            if isinstance(text, WrappedText):
                assert text.document().idealWidth() <= text.viewport().width() + 1, name
            else:
                assert text.minimumSizeHint().width() <= text.width(), name   # no word cut
            assert text.height() >= text.heightForWidth(text.width()), name     # no line cut
        for button in detail.fix_buttons:
            name = f"{where}: fix {button.property('fixId')}"
            assert right_edge(button, detail) <= viewport.width(), name
            assert button.width() >= button.minimumSizeHint().width(), name
            assert button.height() >= button.heightForWidth(button.width()), name


def test_the_window_fits_1280x800_and_1024x700_before_and_after_every_result(qtbot, window):
    assert_fits(qtbot, window, "opened")

    with qtbot.waitSignal(window.diagnosisFinished, timeout=TIMEOUT_MS) as finished:
        assert window.run_diagnosis()
    assert finished.args[0]["findings"]
    assert window.findings.detail.fix_buttons
    assert_fits(qtbot, window, "after a run")

    with qtbot.waitSignal(window.diagnosisFinished, timeout=TIMEOUT_MS):
        assert window.open_script("demo:map-cast")
    detail = window.findings.detail
    assert detail.fix_codes and detail.source.isVisibleTo(detail)   # code and the script's lines
    assert_fits(qtbot, window, "after a trace")

    with qtbot.waitSignal(window.benchmarkFinished, timeout=TIMEOUT_MS):
        assert window.run_benchmark(["float32", "bfloat16"])
    assert window.main_tabs.currentWidget() is window.compare
    assert_fits(qtbot, window, "after a benchmark")

    with qtbot.waitSignal(window.driftFinished, timeout=TIMEOUT_MS):
        assert window.compare_with_float32()
    assert_fits(qtbot, window, "after a comparison with float32")

    # The Findings panel can be widened (its splitter handle): the other panels give way down to
    # their minimums, and its text wraps to the new width.
    window.resize(1280, 800 - TITLE_BAR)
    window.main_tabs.setCurrentWidget(window.tensors)
    window.splitter.setSizes([0, 0, 10_000])
    settle(qtbot)
    assert window.findings.width() >= 450
    assert_findings_readable(qtbot, window.findings, "widened")


def test_a_benchmark_of_many_variants_scrolls_its_tab_rather_than_grow_the_window(qtbot, window):
    """Every variant's bars and row need height; a short window scrolls the Compare tab."""
    variant = {"ok": True, "samples_per_s": 400.0, "latency_ms": {"p50": 10.0, "p90": 11.0, "min": 9.5},
               "peak_memory_bytes": 600 * 2**20, "weights_bytes": 90 * 2**20, "error": None}
    names = ("float32", "tf32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16", "float64")
    doc = {"device": "cpu", "note": "Measured on a CPU: no speed-up is expected.",
           "variants": [dict(variant, name=name) for name in names]}
    result = BenchResult.from_json(doc)
    window.controller.state.took_bench(window.spec, result)
    window.controller.benchChanged.emit(result)
    window.main_tabs.setCurrentWidget(window.compare)
    assert_fits(qtbot, window, "after a benchmark of seven variants")
    scroller = window.compare.scroller
    assert scroller.verticalScrollBar().maximum() > 0          # the figures are there to scroll to
    assert scroller.widget().width() == scroller.viewport().width()


def test_long_words_wrap_inside_the_findings_panel(qtbot, window):
    """A module path or a line of code wider than the panel breaks inside the word."""
    from fp16studio.core import Finding, Fix

    path = ".".join(["encoder", "layer", "11", "attention", "self_attention", "query_key_value"] * 2)
    code = Fix("keep", "Keep " + path + " in float32", {"keep_fp32": (path,)})
    finding = Finding("overflow", "error", path, f"Module {path} overflows in float16.", {"module": path},
                      fixes=(code,))
    panel = window.findings
    panel.set_findings([finding], ok=False)
    window.resize(SMALLEST)
    assert_findings_readable(qtbot, panel, "a long module path")
    panel.set_findings([finding], ok=False, code_fixes=True)
    assert_findings_readable(qtbot, panel, "a long line of code")


def test_at_1024_wide_the_filter_box_and_the_chart_labels_read_well(qtbot, window):
    """The Tensors tab's filter box is never squeezed below its own width (it takes a row of its
    own), and the Compare tab's axis titles and tick labels keep apart, at 1024x700."""
    variant = {"ok": True, "latency_ms": {"p50": 10.0, "p90": 11.0, "min": 9.5},
               "weights_bytes": 90 * 2**20, "error": None}
    names = ("float32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16")
    doc = {"device": "cpu", "variants": [
        dict(variant, name=name, samples_per_s=180.0 + 35 * i, peak_memory_bytes=(610 + 40 * i) * 2**20)
        for i, name in enumerate(names)]}
    result = BenchResult.from_json(doc)
    window.controller.state.took_bench(window.spec, result)
    window.controller.benchChanged.emit(result)
    window.resize(SMALLEST)

    window.main_tabs.setCurrentWidget(window.tensors)
    settle(qtbot)
    panel, search = window.tensors, window.tensors.search
    assert search.width() >= search.sizeHint().width()
    for widget in (search, panel.dtype_filter, panel.device_filter, panel.only_problems, panel.colour_by):
        assert right_edge(widget, panel) <= panel.width(), widget

    window.main_tabs.setCurrentWidget(window.compare)
    settle(qtbot)
    bars = window.compare.bars
    image = QImage(bars.size(), QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:   # ended whatever is asserted: an image freed while painted on crashes the process
        gap = painter.fontMetrics().horizontalAdvance("0")
        titles = []
        for axis in (item for item in bars.scene().items() if isinstance(item, pg.AxisItem)):
            if axis.orientation != "bottom":
                continue
            ticks = sorted((axis.mapRectToScene(rect) for rect, _, _ in axis.generateDrawSpecs(painter)[2]),
                           key=lambda rect: rect.left())
            assert len(ticks) >= 2, axis.labelText
            for left, right in zip(ticks, ticks[1:]):
                assert right.left() - left.right() >= gap, (axis.labelText, left, right)
            titles.append(axis.label.sceneBoundingRect())
    finally:
        painter.end()
    assert len(titles) == 2
    assert not titles[0].intersects(titles[1]), titles
    assert all(0 <= title.left() and title.right() <= bars.width() for title in titles), titles


def test_the_first_window_fits_its_screen_with_a_title_bar_and_the_last_size_is_kept(qtbot):
    """A fixed 1280x800 on a 1280x800 screen put the status bar under its bottom edge (the
    title bar is the screen's too). The first window takes the screen's available room less a
    frame, at most 1280x800; a window opens where and as large as the last one closed."""
    from fp16studio.gui.placement import FRAME, PREFERRED

    first = MainWindow()
    qtbot.addWidget(first)
    room = first.screen().availableGeometry()    # offscreen: 800x800, smaller than preferred
    assert first.height() == min(PREFERRED.height(), room.height() - FRAME.height())
    assert first.width() == max(min(PREFERRED.width(), room.width() - FRAME.width()),
                                first.minimumWidth())
    assert first.pos() == room.topLeft()
    first.show()
    qtbot.waitUntil(lambda: first.spec is not None, timeout=TIMEOUT_MS)
    first.setGeometry(10, 30, first.minimumWidth(), 600)
    first.close()

    second = MainWindow()
    qtbot.addWidget(second)
    kept = second.geometry()   # where the first was left, and kept on the screen by Qt
    assert (kept.top(), kept.height()) == (30, 600) and room.contains(kept)
