"""The whole loop on the built-in demo: run, see the error, click its fix, run clean, undo."""

import json
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt

from fp16studio.core import PipelineSpec
from fp16studio.gui import MainWindow
from fp16studio.gui.file_actions import CANCEL, DISCARD, SAVE
from fp16studio.gui.roles import PATH_ROLE
from fp16studio.gui.tree_model import STATUS
from window_steps import listed, run, shown

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=RUN_TIMEOUT_MS)
    return window


def test_demo_loop_run_fix_run_clean_undo(qtbot, window):
    doc = run(qtbot, window)
    assert not doc["ok"]
    first = listed(window)[0]
    assert (first.severity, first.code) == ("error", "dtype-mismatch")
    assert {"ok", "spec", "device", "findings", "error", "inventory", "output"} <= set(doc)

    # The module the finding names is in the tree, marked, and shown when the finding is chosen
    # (an event after the finding's detail).
    qtbot.waitUntil(lambda: window.tensorTree.currentIndex().isValid())
    current = window.tensorTree.currentIndex()
    assert current.data(PATH_ROLE) == first.location
    assert current.siblingAtColumn(STATUS).data() == "error"
    assert current.data(Qt.ItemDataRole.FontRole).bold()

    before = window.spec
    button = window.findings.detail.fix_buttons[0]
    assert button.property("fixId") == first.fixes[0].id
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert finished.args[0]["ok"]
    assert not any(f.severity == "error" for f in listed(window))
    assert window.spec.applied_fixes[-1]["id"] == first.fixes[0].id
    assert window.spec == PipelineSpec.from_dict(finished.args[0]["spec"], base_dir=window.spec.base_dir)

    # The Changes tab shows what the fix edited; Undo and Redo step through whole specs.
    diff = window.history.diff
    keys = {diff.item(r, 0).text() for r in range(diff.rowCount())}
    assert "applied_fixes" in keys and keys - {"applied_fixes"}
    window.undo_stack.undo()
    shown(qtbot)
    assert window.spec == before
    # The findings of the spec run first are back, current: their fixes one click again.
    assert listed(window)[0] is first and window.findings.detail.fix_buttons[0].isEnabled()
    window.undo_stack.redo()
    assert window.spec.applied_fixes[-1]["id"] == first.fixes[0].id


def test_the_inventory_shown_is_cores(qtbot, window):
    """One inventory summary, core's: the run's document and the Tensors footer give what
    `tree.summary` (what `diagnose --json` reports) says of the tree that run made."""
    from fp16studio.core.diagnostics.tree import summary
    from fp16studio.core.common.units import format_bytes

    doc = run(qtbot, window)
    core = summary(window.diagnosis.tree)
    assert core.parameters > 0 and core.tensors > 0 and len(core.dtypes) > 1
    assert doc["inventory"] == core.to_json() == window.tensors.inventory
    footer = window.tensors.summary.text()
    assert footer.startswith(f"{core.parameters:,} parameters · {core.tensors:,} tensors (")
    assert footer.endswith(f" · {format_bytes(core.bytes)}")
    for dtype, count in core.dtypes.items():
        assert f"{dtype} {count:,}" in footer


def test_apply_fix_by_id_and_the_tree_survives_the_rerun(qtbot, window):
    run(qtbot, window)
    tree = window.tensorTree
    model_row = tree.model().index(0, 0)
    tree.expand(model_row)
    fix_id = listed(window)[0].fixes[0].id
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS):
        assert window.apply_fix(fix_id)
    assert tree.isExpanded(tree.model().index(0, 0))
    assert window.apply_fix("no-such-fix") is False


def test_invalid_form_value_is_marked_with_its_reason_and_not_applied(qtbot, window):
    spec = window.spec
    field = window.form.fields["device"]
    field.widget.setEditText("gpu0")
    field.widget.lineEdit().editingFinished.emit()
    assert "device" in window.form.invalid_keys()
    assert "gpu0" in window.form.invalid_keys()["device"]
    assert field.widget.property("invalid")
    assert window.spec == spec
    field.widget.setEditText("cpu")
    field.widget.lineEdit().editingFinished.emit()
    assert window.form.invalid_keys() == {}
    assert window.spec.device == "cpu"
    window.undo_stack.undo()
    assert window.spec == spec


def test_bad_input_is_shown_not_raised(qtbot, tmp_path):
    window = MainWindow({"model": str(tmp_path / "missing"), "dataset": "synthetic"})
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.diagnosisFailed, timeout=RUN_TIMEOUT_MS) as failed:
        window.run_diagnosis()
    assert "missing" in failed.args[0]
    assert "Traceback" not in window.findings.detail.message.text()
    assert "missing" in window.findings.detail.message.text()
    assert window.act_run.isEnabled()


def test_new_pipeline_starts_blank_and_asks_before_discarding(qtbot, window, monkeypatch):
    demo_model = window.spec.local_path(window.spec.model)
    window.controller.edit(window.spec.replace(samples=3), "Edit samples")
    asked = []
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: asked.append(title) or CANCEL)
    assert not window.new_pipeline()
    assert window.spec.samples == 3 and asked == ["Save changes?"]

    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: DISCARD)
    assert window.new_pipeline()
    assert window.spec == PipelineSpec(model="", dataset="synthetic")
    assert window.undo_stack.isClean() and window.session_path is None
    assert "required" in window.form.invalid_keys()["model"]
    assert not window.run_diagnosis() and not window.run_benchmark()
    assert "Choose a model first" in window.findings.detail.message.text()

    window.controller.edit(window.spec.replace(model=str(demo_model)), "Edit model")
    assert "model" not in window.form.invalid_keys()
    doc = run(qtbot, window)
    assert doc["ok"], doc["findings"]


def test_export_script_asks_before_replacing(qtbot, window, tmp_path, monkeypatch):
    target = tmp_path / "pipeline.py"

    def export():
        with qtbot.waitSignal(window.exportFinished, timeout=RUN_TIMEOUT_MS) as written:
            assert window.export_script(target)
        assert written.args == [str(target)]

    export()
    assert "from_pretrained" in target.read_text()
    target.write_text("# mine\n")
    monkeypatch.setattr(window, "_confirm", lambda title, text: False)
    assert not window.export_script(target)
    assert target.read_text() == "# mine\n"
    monkeypatch.setattr(window, "_confirm", lambda title, text: True)
    export()
    assert "from_pretrained" in target.read_text()


def test_session_round_trip(qtbot, window, tmp_path):
    doc = run(qtbot, window)
    path = tmp_path / "work.fp16studio"
    assert window.save_session(path=str(path))
    saved = json.loads(path.read_text())
    assert saved["diagnosis"]["findings"] == doc["findings"]
    other = MainWindow(str(path))
    qtbot.addWidget(other)
    qtbot.waitUntil(lambda: other.spec is not None, timeout=RUN_TIMEOUT_MS)
    # Relative paths are rebased onto the session's folder; they name the same files.
    for key in ("model", "dataset"):
        assert other.spec.local_path(getattr(other.spec, key)).resolve() == \
            window.spec.local_path(getattr(window.spec, key)).resolve()
    assert other.spec.replace(model="m", dataset="d") == window.spec.replace(model="m", dataset="d")
    assert [f.code for f in listed(other)] == [f.code for f in listed(window)]


def test_closing_during_a_run_stops_the_worker(qtbot, window):
    with qtbot.waitSignal(window.worker.jobStarted, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda job: job.kind == "diagnose"):
        window.run_diagnosis()
    window.close()
    assert window.worker.thread.isFinished()


def test_cancel_from_the_window(qtbot, window):
    with qtbot.waitSignal(window.worker.jobStarted, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda job: job.kind == "diagnose"):
        window.run_diagnosis()
    assert window.act_cancel.isEnabled() and not window.act_run.isEnabled()
    with qtbot.waitSignal(window.worker.jobDone, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda job, outcome: job.kind == "diagnose") as done:
        window.act_cancel.trigger()
    assert done.args[1] == "cancelled"
    assert window.act_run.isEnabled() and not window.act_cancel.isEnabled()


def test_the_window_process_never_imports_torch_even_after_a_run(tmp_path):
    """torch lives in the engine process only: not at start-up, and not while the demo loop
    runs (a torch object in a result would import it on arrival). The script has no
    `if __name__ == "__main__"` guard: the engine process must not run it again."""
    code = ("import sys\n"
            "from PySide6.QtWidgets import QApplication\n"
            "app = QApplication([])\n"
            "from fp16studio.gui import MainWindow\n"
            "w = MainWindow()\n"
            "w.show(); app.processEvents()\n"
            "print('torch' in sys.modules)\n"
            "done = []\n"
            "def finished(doc):\n"
            "    done.append(doc['ok'])\n"
            "    if len(done) == 1 and doc['findings']:\n"
            "        w.apply_fix(doc['findings'][0]['fixes'][0]['id'])\n"
            "    else:\n"
            "        app.quit()\n"
            "w._ask_unsaved = lambda title, text: 'discard'   # quitting asks about the fix\n"
            "w.diagnosisFinished.connect(finished)\n"
            "w.diagnosisFailed.connect(lambda message: (print(message), app.quit()))\n"
            "w.run_diagnosis()\n"
            "app.exec()\n"
            "print(done, 'torch' in sys.modules)\n"
            "w.close()\n")
    script = tmp_path / "drive_the_window.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["False", "[False, True] False"]


def test_closing_with_unsaved_changes_asks_first(qtbot, window, monkeypatch):
    window.controller.edit(window.spec.replace(samples=3), "Edit samples")
    asked = []
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: asked.append(title) or CANCEL)
    window.act_quit.trigger()                      # File → Quit, Ctrl+Q and the close button
    assert window.isVisible() and asked == ["Save changes?"]
    assert window.worker.thread.isRunning()        # nothing was shut down
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: DISCARD)
    assert window.close() and not window.isVisible()


def test_unsaved_changes_offer_save_discard_and_cancel(qtbot, window, tmp_path, monkeypatch):
    """The question has three answers: Save (then go on only if it was saved), Discard, and
    Cancel (Escape too), which keeps everything as it was."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from fp16studio.gui.file_actions import FileActions

    buttons = QMessageBox.StandardButton
    seen = []

    def answer(button):
        def click():
            box = QApplication.activeModalWidget()
            seen.append((box.windowTitle(), {box.standardButton(b) for b in box.buttons()},
                         box.defaultButton() is box.button(buttons.Save)))
            target = box.button(button) if button is not None else None
            target.click() if target is not None else box.done(0)   # never left waiting
        QTimer.singleShot(0, click)

    for button, expected in ((buttons.Save, SAVE), (buttons.Discard, DISCARD), (buttons.Cancel, CANCEL),
                             (None, CANCEL)):
        answer(button)
        # The real dialog (the window's own is replaced by the conftest's answer).
        assert FileActions._ask_unsaved(window, "Save changes?", "Unsaved.") == expected
    assert seen == [("Save changes?", {buttons.Save, buttons.Discard, buttons.Cancel}, True)] * 4

    # Save: the session is written first, then the window goes on (here: a new pipeline).
    path = tmp_path / "work.fp16studio"
    assert window.save_session(path=str(path))
    window.controller.edit(window.spec.replace(samples=3), "Edit samples")
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: SAVE)
    assert window.new_pipeline()
    from fp16studio.core.spec.session import open_session
    assert open_session(path).spec.samples == 3
    # A save that does not happen (its dialog cancelled, the disk full) keeps the changes.
    window.controller.edit(window.spec.replace(model="models/other"), "Edit model")
    monkeypatch.setattr(window, "save_session", lambda *a, **k: False)
    assert not window.new_pipeline() and window.spec.model == "models/other"
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: CANCEL)
    assert not window._may_discard() and window.controller.dirty
    monkeypatch.setattr(window, "_ask_unsaved", lambda title, text: DISCARD)


def test_a_failed_save_says_so_and_stays_unsaved(qtbot, window, tmp_path, monkeypatch):
    warned = []
    monkeypatch.setattr(window, "_warn", lambda title, text: warned.append((title, text)))
    window.controller.edit(window.spec.replace(samples=3), "Edit samples")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert not window.save_session(path=str(blocker / "work.fp16studio"))   # no such folder
    assert warned and warned[0][0] == "Cannot save" and "work.fp16studio" in warned[0][1]
    assert window.windowTitle().startswith(window.spec.model + " •")       # still unsaved
    assert window.session_path is None


def test_a_blank_pipeline_is_not_autosaved(qtbot, window):
    from fp16studio.core.common.config_folder import config_dir

    def crash_copy():
        return config_dir() / f"autosave-{window.controller.autosave_owner}.fp16studio"

    # Written off the GUI thread: the demo's spec on opening; a spec without a model has none
    # (it cannot be read back).
    qtbot.waitUntil(crash_copy().is_file)
    assert window.new_pipeline()
    qtbot.waitUntil(lambda: not crash_copy().exists())


def test_what_no_longer_belongs_to_the_spec_is_cleared(qtbot, window, tmp_path):
    run(qtbot, window)
    assert window.tensorTree.model().rowCount() > 0
    # A run that fails leaves no tree of the previous model behind.
    window.controller.edit(window.spec.replace(model=str(tmp_path / "missing")), "Edit model")
    with qtbot.waitSignal(window.diagnosisFailed, timeout=RUN_TIMEOUT_MS):
        window.run_diagnosis()
    assert window.tensorTree.model().rowCount() == 0
    assert window.diagnosis is None
    # Progress messages end with their job.
    assert window.status.message.text() == "The run failed: see the Findings panel and the Log."
    # The failure's text is shown as it is, never read as markup.
    assert window.findings.detail.message.textFormat() == Qt.TextFormat.PlainText


def test_saved_findings_offer_no_tree_to_show(qtbot, window, tmp_path):
    run(qtbot, window)
    path = tmp_path / "work.fp16studio"
    assert window.save_session(path=str(path))
    other = MainWindow(str(path))
    qtbot.addWidget(other)
    other.show()
    qtbot.waitUntil(lambda: other.spec is not None and bool(listed(other)), timeout=RUN_TIMEOUT_MS)
    assert other.tensorTree.model().rowCount() == 0
    assert not other.findings.detail.reveal.isVisible()      # nothing to show it in
    assert not other.findings.detail.fix_buttons[0].isEnabled()
    assert other.tensors.inventory == window.diagnosis_doc["inventory"]   # the saved one
