"""The window side of tracing a user's script (issue 13) and of comparing with float32 (issue 12)."""

import html
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from fp16studio.core.diagnostics.report import RunError
from fp16studio.core.run.compare import OutputDrift
from fp16studio.gui import MainWindow
from fp16studio.gui.roles import NODE_ROLE
from window_steps import shown

RUN_TIMEOUT_MS = 120_000


def open_window(qtbot, spec=None):
    window = MainWindow(spec)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=RUN_TIMEOUT_MS)
    return window


def listed(window):
    model = window.findingsView.model()
    return [(model.index(r, 0).data(NODE_ROLE), model.index(r, 2).data()) for r in range(model.rowCount())]


def select(window, label):
    model = window.findingsView.model()
    row = [where for _, where in listed(window)].index(label)
    window.findingsView.setCurrentIndex(model.index(row, 0))
    return model.index(row, 0).data(NODE_ROLE)


@pytest.fixture
def window(qtbot):
    return open_window(qtbot)


def test_trace_a_script_cancel_then_continue_as_a_pipeline_and_fix_it(qtbot, window):
    with qtbot.waitSignal(window.worker.jobStarted, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda job: job.kind == "trace"):
        assert window.open_script("demo:map-cast")
    assert window.act_cancel.isEnabled() and not window.act_run.isEnabled()
    with qtbot.waitSignal(window.worker.jobDone, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda job, outcome: job.kind == "trace") as done:
        window.act_cancel.trigger()
    assert done.args[1] == "cancelled"

    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        assert window.open_script("demo:map-cast")
    doc = finished.args[0]
    script = Path(doc["script"])
    assert script.name == "map_cast.py" and doc["spec"] is not None
    from fp16studio.core.diagnostics.tree import summary   # the inventory is core's, as for a run
    assert doc["inventory"] == summary(window.diagnosis.tree).to_json() == window.tensors.inventory
    # The script's own output reached the Log as it ran (it fails: the float16 model gets
    # float32 pixels).
    assert "stderr: Traceback (most recent call last):" in window.log.toPlainText()

    # Each finding names its script line; the detail shows that line and its neighbours, and
    # the fixes as code (the trace is not yet a pipeline: its fixes go into a copy of the script,
    # traced again, never into the script).
    lost = next(f for f, _ in listed(window) if f.code == "map-cast-lost")
    label = f"map_cast.py:{lost.source['line']}"
    assert select(window, label) is lost
    detail = window.findings.detail
    line = script.read_text().splitlines()[lost.source["line"] - 1]
    neighbour = script.read_text().splitlines()[lost.source["line"]]
    assert html.escape(line.strip()) in detail.source.text()
    assert html.escape(neighbour.strip()) in detail.source.text()
    assert len(detail.fix_codes) == len(lost.fixes)
    assert {b.text() for b in detail.fix_buttons} <= {"Trace a fixed copy"}
    # In the script's own names, at its line's indentation (the demo passes `input_tensor`).
    assert "        input_tensor = input_tensor.to(torch.float16)" in detail.fix_codes[0].text()

    # The form, the title and Run say what they act on: the pipeline from before the trace.
    before = window.spec.model
    assert window.form_notice.isVisible() and "the trace of map_cast.py" in window.form_notice.text()
    assert "Run, Benchmark, Compare and Export act on it" in window.form_notice.text()
    assert window.windowTitle() == f"map_cast.py (trace) · {before} — fp16studio"
    assert f"Run the pipeline in the form ({before})" in window.act_run.toolTip()

    assert window.act_continue.isEnabled()
    assert window.findings.header_buttons[window.act_continue].isVisible()
    window.act_continue.trigger()
    shown(qtbot)
    assert window.spec.to_dict() == doc["spec"]
    assert not window.act_continue.isEnabled()
    assert not window.form_notice.isVisible() and "(trace)" not in window.windowTitle()
    assert window.act_run.toolTip().startswith("Load the model and dataset")
    # Now a pipeline: the same findings, with one-click fixes on the recovered spec.
    select(window, label)
    button = detail.fix_buttons[0]
    assert button.isEnabled() and not detail.fix_codes
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert finished.args[0]["spec"]["applied_fixes"][-1]["id"] == lost.fixes[0].id
    assert "map-cast-lost" not in {f["code"] for f in finished.args[0]["findings"]}


def test_compare_with_float32_shows_the_drift_and_its_fix_applies(qtbot):
    window = open_window(qtbot, "demo:overflow")
    with qtbot.waitSignal(window.driftFinished, timeout=RUN_TIMEOUT_MS) as finished:
        window.act_drift.trigger()
    doc = finished.args[0]
    assert window.main_tabs.currentWidget() is window.drift
    view = window.drift
    assert view.model.rowCount() == len(doc["modules"]) > 0
    first = view.model.first_divergent_row
    assert view.model.index(first, 0).data() == doc["first_divergent"]
    assert view.model.index(first, 0).data(Qt.ItemDataRole.FontRole).bold()
    assert not view.model.index(first + 1, 0).data(Qt.ItemDataRole.FontRole)
    xs, sqnr = view.sqnr_curve.getData()
    assert len(xs) == len(doc["modules"])
    assert "overflows" in view.verdict.text()

    overflow = next(f for f, _ in listed(window) if f.code == "overflow")
    assert overflow.fixes[0].id == "float32-islands"

    # A script's trace shown next is not this spec's: its findings alone, its fixes as code.
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        assert window.open_script("demo:blind-half")
    assert finished.args[0]["spec"] is None   # not recovered: nothing to continue as
    assert sorted(f.code for f, _ in listed(window)) == sorted(f["code"] for f in finished.args[0]["findings"])
    assert window.findings.detail.fix_codes and {
        b.text() for b in window.findings.detail.fix_buttons} <= {"Trace a fixed copy"}
    assert not window.act_continue.isEnabled()
    assert not window.apply_fix(overflow.fixes[0].id)

    # A run of the spec: its findings and the comparison's, whose fix applies in one click to
    # the spec that was compared, and compares again.
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS):
        assert window.run_diagnosis()
    assert "overflow" in [f.code for f, _ in listed(window)]
    select(window, overflow.location)
    button = window.findings.detail.fix_buttons[0]
    assert button.isEnabled() and button.property("fixId") == "float32-islands"
    with qtbot.waitSignal(window.driftFinished, timeout=RUN_TIMEOUT_MS) as finished:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert window.spec.run_in_float32
    assert finished.args[0]["output"]["finite"]
    assert not view.stale.isVisible()


def test_a_flood_of_script_output_reaches_the_log_in_few_entries(qtbot):
    from fp16studio.gui.session_controller import SCRIPT_LINES_SHOWN, SessionController

    controller = SessionController()
    try:
        logged = []
        controller.logged.connect(lambda level, text: logged.append((level, text)))
        batch = [("stdout", f"step {i}") for i in range(1000)] + [("stderr", "warning: slow")]
        controller._on_script_output(batch)
        hidden = len(batch) - SCRIPT_LINES_SHOWN
        assert logged[0] == ("info", f"… {hidden} lines of the script's output not shown")
        shown = [line for _, text in logged[1:] for line in text.split("\n")]
        assert shown == [f"stdout: step {i}" for i in range(hidden, 1000)] + ["stderr: warning: slow"]
        assert [level for level, _ in logged[1:]] == ["info", "warning"]  # one entry per stream run
    finally:
        controller.shutdown()


def test_a_comparison_that_failed_before_any_module_is_shown_not_raised(qtbot):
    """A drift whose run failed at once (the model did not load) has no modules: the view says
    why, with empty curves (an empty mask indexed the curve as floats once)."""
    from fp16studio.core.precision.drift import DriftResult
    from fp16studio.gui.drift_view import DriftView

    view = DriftView()
    qtbot.addWidget(view)
    view.set_result(DriftResult("float16", "cpu", error=RunError(
        type="OSError", message="no such model", stage="model")))
    assert view.model.rowCount() == 0
    assert "could not be compared: no such model" in view.verdict.text()
    xs, _ = view.sqnr_curve.getData()
    assert xs is None or len(xs) == 0


def test_the_verdict_says_the_output_sqnr_as_a_number():
    """The verdict over the table says the output's SQNR in dB as the CLI does (it printed a
    function's repr once)."""
    from fp16studio.gui.drift_view import verdict

    from fp16studio.core.precision.drift import DriftResult

    result = DriftResult("float16", "cpu", first_divergent="encoder.layer.3",
                         output=OutputDrift(sqnr_db=17.25))
    assert "output SQNR 17.2 dB, under the" in verdict(result)
    assert "(output SQNR 17.2 dB)" in verdict(replace(result, ok=True))
