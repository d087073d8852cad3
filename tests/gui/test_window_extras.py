"""The window's other surfaces: benchmark streaming, dataset preview, status bar, pickers, app."""

import json
import re
import subprocess
import sys

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from fp16studio.gui import MainWindow
from fp16studio.gui.file_actions import CANCEL
from fp16studio.gui.pickers import SourcePicker

TIMEOUT_MS = 180_000


@pytest.fixture
def window(qtbot):
    window = MainWindow("demo:healthy")
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.spec is not None, timeout=TIMEOUT_MS)
    return window


def test_benchmark_streams_samples_to_the_plot_and_emits_the_document(qtbot, window, monkeypatch,
                                                                      tmp_path):
    samples = []
    plot_sample = window.compare.add_sample
    monkeypatch.setattr(window.compare, "add_sample", lambda s: (samples.append(s), plot_sample(s)))
    with qtbot.waitSignal(window.benchmarkFinished, timeout=TIMEOUT_MS) as finished:
        assert window.run_benchmark(["float32", "bfloat16"])
    doc = finished.args[0]
    assert [v["name"] for v in doc["variants"]] == ["float32", "bfloat16"]
    assert samples and {s["variant"] for s in samples} <= {"float32", "bfloat16"}
    assert window.benchPlot is window.compare.plot
    assert window.main_tabs.currentWidget() is window.compare
    assert window.bench_result.to_json() == doc
    assert window.act_bench.isEnabled()

    # Minutes of measuring that no file holds: closing asks first, and Save keeps them.
    assert window.controller.dirty and window.windowTitle().endswith(" • — fp16studio")
    asked = []
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: asked.append(text) or CANCEL)
    assert not window.close()   # the close event was refused
    assert asked == ["This pipeline has a benchmark's figures that are not saved. Save them first?"]
    path = tmp_path / "measured.fp16studio"
    assert window.save_session(path=str(path))
    assert json.loads(path.read_text())["bench"] == doc
    assert not window.controller.dirty and "•" not in window.windowTitle()


def test_dataset_preview_and_model_info_arrive_from_the_worker(qtbot, window):
    model = window.preview.model
    qtbot.waitUntil(lambda: model.rowCount() > 0, timeout=TIMEOUT_MS)
    columns = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert columns[0].startswith("image") and "(image)" in columns[0]
    assert model.index(0, 0).data(Qt.ItemDataRole.DecorationRole) is not None   # a thumbnail
    picker = window.form.model_picker
    qtbot.waitUntil(lambda: "safetensors" in picker.info.text(), timeout=TIMEOUT_MS)
    assert "float32" in picker.info.text()


def test_preview_model_passes_qt_model_tester(qtbot, window, qtmodeltester):
    qtbot.waitUntil(lambda: window.preview.model.rowCount() > 0, timeout=TIMEOUT_MS)
    qtmodeltester.check(window.preview.model)


def test_status_bar_shows_engine_versions_after_a_run(qtbot, window):
    assert not re.search(r"torch \d", window.status.versions.text())
    with qtbot.waitSignal(window.diagnosisFinished, timeout=TIMEOUT_MS) as finished:
        window.run_diagnosis()
    assert finished.args[0]["ok"]
    assert re.search(r"torch \d", window.status.versions.text())
    assert window.status.device.text() == f"device: {finished.args[0]['device']}"
    assert re.fullmatch(r"RAM engine [\d.]+ [KMG]iB · window [\d.]+ [KMG]iB",
                        window.status.memory.text())


def test_status_bar_shows_engine_versions_once_torch_is_loaded_without_a_run(qtbot, window):
    """The engine loads torch at start (warm-up); a benchmark is the only job the user runs: the
    status bar says which torch ran it, not "torch not loaded yet"."""
    with qtbot.waitSignal(window.benchmarkFinished, timeout=TIMEOUT_MS):
        assert window.run_benchmark(["float32"])
    qtbot.waitUntil(lambda: bool(re.search(r"torch \d", window.status.versions.text())),
                    timeout=TIMEOUT_MS)
    assert re.search(r"transformers \d", window.status.versions.text())
    assert window.diagnosis is None


def test_dropping_a_folder_on_a_picker_commits_it(qtbot, tmp_path):
    picker = SourcePicker("model")
    qtbot.addWidget(picker)
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(tmp_path))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, data, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(picker.committed) as committed:
        picker.dropEvent(event)
    assert committed.args == [str(tmp_path)]
    assert picker.text() == str(tmp_path)


def test_picker_completes_from_the_cache_list(qtbot):
    picker = SourcePicker("dataset", fixed=["synthetic"])
    qtbot.addWidget(picker)
    picker.set_cached(["org/images", "org/texts"])
    picker.add_found(["org/texts", "hub/other"])
    words = picker.edit.completer().model().stringList()
    assert words == ["synthetic", "org/images", "org/texts", "hub/other"]


def test_app_main_opens_a_spec_and_exits_cleanly():
    # In a child process: main() runs the application's event loop to its end.
    code = (
        "import sys\n"
        "from PySide6.QtCore import QTimer\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from fp16studio.gui import MainWindow, app as gui_app\n"
        "def close_when_ready():\n"
        "    for w in QApplication.topLevelWidgets():\n"
        "        if isinstance(w, MainWindow) and w.isVisible() and w.spec is not None:\n"
        "            print('opened', w.spec.model, bool(app.styleSheet()))\n"
        "            w.close()\n"
        "poll = QTimer(interval=20, timeout=close_when_ready)\n"
        "poll.start()\n"
        "sys.exit(gui_app.main(['demo:healthy']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "opened models/tiny-resnet True" in out.stdout


def test_stage_progress_is_shown_without_a_synchronous_repaint(qtbot, window, count_events):
    """QProgressBar.setValue repaints at once, flushing the whole window's dirty regions with
    it; the window's progress only schedules a paint."""
    from PySide6.QtCore import QEvent

    window.show()
    window._on_busy(True)
    qtbot.waitExposed(window)
    qtbot.wait(50)
    paints = count_events(window.progress, QEvent.Type.Paint)
    window._on_progress(2, 4, "forward")
    assert paints.count == 0
    assert (window.progress.value(), window.progress.maximum()) == (2, 4)
    assert window.stage_label.text() == "forward"
    qtbot.waitUntil(lambda: paints.count > 0, timeout=5000)  # painted with the next update
    # A run's end resets it the same way: inside the result's handler, a repaint there painted
    # the new tree with it (13-18 ms of one event, issue 31).
    paints.count = 0
    window._on_busy(False)
    assert paints.count == 0
    assert window.progress.value() == 0 and window.stage_label.text() == ""


def test_a_new_stage_is_drawn_in_place_not_laid_out(qtbot, window, count_events):
    """While a job runs, a stage's words no longer than the longest so far go into the label
    as it stands: a label that took each text's width laid the whole toolbar out again at
    every stage. It widens for longer words, never narrows while the job runs, and takes no
    room when idle."""
    from PySide6.QtCore import QEvent

    window.show()
    qtbot.waitExposed(window)
    window._on_busy(True)
    window._on_progress(1, 4, "loading the model")
    qtbot.waitUntil(window.stage_label.isVisible, timeout=5000)
    widest = window.stage_label.width()
    qtbot.wait(50)
    layouts = count_events(window.toolbar, QEvent.Type.LayoutRequest)
    for step, stage in enumerate(("forward", "ok", "tokens"), start=2):
        window._on_progress(step, 4, stage)
        qtbot.wait(20)
        assert window.stage_label.width() == widest
    assert layouts.count == 0
    window._on_progress(4, 4, "loading the model and the dataset's first rows")
    assert window.stage_label.minimumWidth() > widest   # widened, at most to its cap
    window._on_busy(False)
    qtbot.waitUntil(lambda: not window.stage_label.isVisible(), timeout=5000)
