"""Each result is shown with the spec it was made from (issue 43): a plan of one pipeline is not
drawn on the next one's tree, the status bar says where the latest result ran, and each colour
mode has its key or says what fills it."""

from PySide6.QtCore import QModelIndex

from fp16studio.core.precision.bench import BenchResult
from fp16studio.core.precision.fp8_plan import Fp8Plan
from fp16studio.gui import MainWindow
from fp16studio.gui.roles import COLOR_ROLE
from fp16studio.gui.tree_panel import NOTHING_YET, TensorPanel
from window_steps import RUN_TIMEOUT_MS, shown


def open_window(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None and not window.worker.pending(),
                    timeout=RUN_TIMEOUT_MS)
    return window


def chips(panel: TensorPanel, parent=QModelIndex(), depth=3) -> list:
    """The chips the tree's rows carry, `depth` levels down."""
    model, found = panel.model, []
    for row in range(model.rowCount(parent)):
        index = model.index(row, 0, parent)
        if index.data(COLOR_ROLE) is not None:
            found.append(index.data())
        if depth > 1:
            if model.canFetchMore(index):
                model.fetchMore(index)
            found += chips(panel, index, depth - 1)
    return found


def plan(layers):
    row = {"in_features": 64, "out_features": 64, "eligible": True, "reason": "",
           "flops_share": 0.1, "sqnr_db": 32.4, "keep_bf16": False}
    return Fp8Plan.from_json({
        "recipe": "tensorwise", "device": "cpu", "compute_capability": None, "emulated": True,
        "preflight": [], "layers": [dict(row, name=name) for name in layers], "keep_bf16": [],
        "converted": list(layers), "threshold_db": 20.0, "findings": []})


def test_a_plan_of_the_pipeline_before_is_not_drawn_on_the_one_continued_from_a_trace(qtbot):
    window = open_window(qtbot)
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS):
        assert window.open_script("demo:map-cast")
    modules = [node.path for node in window.diagnosis.tree.walk() if node.kind == "module"]
    # A plan of the pipeline in the form arrives, naming layers the trace's tree has too.
    window.controller.state.took_fp8(window.spec, plan(modules[1:4]))
    panel = window.tensors
    panel.colour_by.setCurrentIndex(panel.colour_by.findData("fp8"))
    assert chips(panel) and window.fp8.model.rowCount() == 3
    assert "SQNR in FP8 vs bfloat16:" in panel.legend.text()

    window.act_continue.trigger()
    shown(qtbot)
    assert not chips(panel)                          # no SQNR chip of the old plan
    assert window.fp8.model.rowCount() == 0 and not window.fp8.stale.isVisibleTo(window.fp8)
    assert panel.legend.text().endswith(f"{NOTHING_YET['fp8']}</span>")


def test_a_plan_goes_stale_with_an_edit_and_comes_back_with_undo(qtbot):
    window = open_window(qtbot)
    window.controller.state.took_fp8(window.spec, plan(["model"]))
    window.controller.edit(window.spec.replace(samples=3), "Edit samples")
    shown(qtbot)
    assert window.fp8.stale.isVisibleTo(window.fp8) and window.fp8.model.rowCount() == 1
    window.undo_stack.undo()
    shown(qtbot)
    assert not window.fp8.stale.isVisibleTo(window.fp8)
    assert "Undo “Edit samples”: showing this spec's FP8 plan." in window.log.toPlainText()


def test_the_status_bar_says_where_a_benchmark_ran(qtbot):
    window = open_window(qtbot)
    assert window.status.device.text() == "device: —"
    window.controller.state.took_bench(window.spec, BenchResult(device="cpu"))
    assert window.status.device.text() == "device: cpu"


def test_each_colour_mode_has_its_key_or_says_what_fills_it(qtbot):
    panel = TensorPanel()
    qtbot.addWidget(panel)
    keys = {}
    for kind in ("dtype", "device", "headroom", "drift", "fp8"):
        panel.colour_by.setCurrentIndex(panel.colour_by.findData(kind))
        keys[kind] = panel.legend.text()
    assert "float16" in keys["dtype"] and "cpu" in keys["device"] and "float16" not in keys["device"]
    for kind in ("headroom", "drift", "fp8"):                # nothing measured yet: said so
        assert NOTHING_YET[kind] in keys[kind] and "float16" not in keys[kind]
    panel.set_module_values("drift", {"model": 12.0})
    panel.colour_by.setCurrentIndex(panel.colour_by.findData("drift"))
    key = panel.legend.text()
    assert "SQNR vs float32:" in key and "under&nbsp;20&nbsp;dB" in key and "int64" not in key


def test_the_log_follows_new_lines_unless_scrolled_up(qtbot):
    from PySide6.QtWidgets import QLabel, QTabWidget

    from fp16studio.gui.log_panel import LogPanel

    tabs, log = QTabWidget(), LogPanel()
    qtbot.addWidget(tabs)
    tabs.addTab(log, "Log")
    tabs.addTab(QLabel("changes"), "Changes")
    tabs.resize(400, 150)
    tabs.show()
    bar = log.verticalScrollBar()

    def say(lines, tab=0):
        tabs.setCurrentIndex(tab)
        for i in range(lines):
            log.log("info", f"line {i} " * 5)
        log.flush()
        tabs.setCurrentIndex(0)
        qtbot.wait(1)

    say(30)
    assert bar.maximum() > 0 and bar.value() == bar.maximum()      # followed to the end
    say(80, tab=1)                                                  # while another tab is shown
    assert bar.value() == bar.maximum()
    bar.setValue(0)                                                 # scrolled up to read
    say(5)
    assert bar.value() == 0
    log.detach()


def test_the_toolbars_progress_stays_in_view_in_the_smallest_window(qtbot):
    from PySide6.QtCore import QPoint

    window = open_window(qtbot)
    # Narrower than 1024: a real screen's fonts make the buttons wider than offscreen's.
    window.setMinimumWidth(0)
    window.resize(760, 660)
    window._on_busy(True)                 # as while a benchmark runs
    window._on_progress(0, 0, "Benchmarking…")
    qtbot.waitUntil(lambda: window.width() < 1000)
    qtbot.wait(50)
    bar = window.progress
    assert bar.isVisible() and not bar.visibleRegion().isEmpty()
    assert bar.mapTo(window, QPoint(bar.width(), 0)).x() <= window.toolbar.width()
    window._on_busy(False)


def test_the_tree_filters_read_whole_in_a_narrow_tab(qtbot):
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(380, 300)                # the Tensors tab in a 1024-wide window
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.wait(10)                        # its layout's turn
    for chooser in (panel.dtype_filter, panel.device_filter, panel.colour_by, panel.search):
        assert chooser.width() >= chooser.sizeHint().width(), chooser.currentText() \
            if chooser is not panel.search else "filter box"
    assert panel.only_problems.width() >= panel.only_problems.sizeHint().width()
