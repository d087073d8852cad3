"""What no longer belongs to the spec is marked or cleared (issue 21): after Undo/Redo and
edits, during a trace, and in a reopened session; and a fix is applied only to the spec it was
found for, while that is the current spec."""

from PySide6.QtCore import Qt

from fp16studio.gui import MainWindow
from window_steps import listed, run, shown

TIMEOUT_MS = 180_000


def open_window(qtbot, spec=None):
    window = MainWindow(spec)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None and not window.worker.pending(), timeout=TIMEOUT_MS)
    return window


def fix_cards(window):
    return [(b.isEnabled(), bool(b.property("primary"))) for b in window.findings.detail.fix_buttons]


def assert_current(window):
    assert not window.findings.notice.isVisibleTo(window.findings)
    assert not window.tensors.notice.isVisibleTo(window.tensors)
    cards = fix_cards(window)
    assert cards and all(enabled for enabled, _ in cards) and cards[0][1]   # the first: accented


def assert_stale(window):
    notice = window.findings.notice
    assert notice.isVisibleTo(window.findings) and "another version of the spec" in notice.text()
    assert window.tensors.notice.isVisibleTo(window.tensors)
    # Off (and not looking clickable: the recommended fix's card loses its accent, as
    # test_findings_panel sees in its pixels).
    assert fix_cards(window) and not any(enabled for enabled, _ in fix_cards(window))


def test_undo_and_redo_bring_back_each_specs_findings_and_an_edit_marks_them(qtbot):
    window = open_window(qtbot)
    run(qtbot, window)
    assert_current(window)
    first = listed(window)[0]
    with qtbot.waitSignal(window.diagnosisFinished, timeout=TIMEOUT_MS):
        qtbot.mouseClick(window.findings.detail.fix_buttons[0], Qt.MouseButton.LeftButton)
    fixed = window.spec
    assert_current(window)                     # the fixed spec's run (its own warnings' fixes)
    after_fix = listed(window)[0]
    fix = window.undo_stack.text(window.undo_stack.index() - 1)

    window.undo_stack.undo()                   # the spec run first: its findings are back
    shown(qtbot)
    assert window.spec != fixed and listed(window)[0] is first
    assert_current(window)
    assert "changed" not in window.status.message.text()
    assert f"Undo “{fix}”: showing this spec's findings." in window.log.toPlainText()

    window.undo_stack.redo()                   # the fixed spec: its own findings, current
    shown(qtbot)
    assert window.spec == fixed and listed(window)[0] is after_fix
    assert_current(window)
    assert "changed" not in window.status.message.text()
    assert f"Redo “{fix}”: showing this spec's findings." in window.log.toPlainText()

    window.controller.edit(window.spec.replace(samples=3), "Edit samples")
    shown(qtbot)                               # no findings of this spec: the last, marked
    assert listed(window)[0] is after_fix
    assert_stale(window)
    assert "changed" in window.status.message.text()
    # A fix of findings of another spec is refused, by the window's surface too, and says why.
    assert not window.apply_fix(after_fix.fixes[0].id) and window.spec.samples == 3
    assert "another version of the spec" in window.log.toPlainText()
    assert first.fixes[0].id not in [f["id"] for f in window.spec.applied_fixes[1:]]


def test_during_a_trace_the_pipelines_all_clear_is_not_shown(qtbot):
    window = open_window(qtbot, "demo:healthy")
    assert run(qtbot, window)["ok"]
    detail = window.findings.detail
    assert detail.title.text() == "All clear"

    with qtbot.waitSignal(window.worker.jobStarted, timeout=TIMEOUT_MS,
                          check_params_cb=lambda job: job.kind == "trace"):
        assert window.open_script("demo:map-cast")
    # Under way: nothing of the pipeline is listed or said to be clear.
    assert listed(window) == [] and detail.title.text() != "All clear"
    notice = window.findings.notice
    assert notice.isVisibleTo(window.findings) and notice.text().startswith("Tracing demo:map-cast")
    assert window.tensors.notice.isVisibleTo(window.tensors)
    with qtbot.waitSignal(window.worker.jobDone, timeout=TIMEOUT_MS,
                          check_params_cb=lambda job, outcome: job.kind == "trace"):
        window.cancel()
    # Cancelled: the pipeline's own result is back, as it was.
    assert detail.title.text() == "All clear" and not notice.isVisibleTo(window.findings)
    assert not window.tensors.notice.isVisibleTo(window.tensors)

    with qtbot.waitSignal(window.diagnosisFinished, timeout=TIMEOUT_MS) as finished:
        assert window.open_script("demo:map-cast")
    assert [f.code for f in listed(window)] and detail.title.text() != "All clear"
    assert sorted(f.code for f in listed(window)) == sorted(f["code"] for f in finished.args[0]["findings"])
    assert not notice.isVisibleTo(window.findings)


def test_a_reopened_session_shows_a_run_of_another_spec_as_stale(qtbot, tmp_path):
    """Saved after an edit, a session holds the run of the spec before it: reopened, that run's
    "All clear" is marked as another spec's, not shown as the float16 spec's."""
    window = open_window(qtbot, "demo:healthy")
    assert run(qtbot, window)["ok"]
    window.controller.edit(window.spec.replace(model_dtype="float16"), "Edit model_dtype")
    path = tmp_path / "work.fp16studio"
    assert window.save_session(path=str(path))

    other = open_window(qtbot, str(path))
    assert other.spec.model_dtype == "float16"
    assert other.findings.detail.title.text() == "All clear"
    notice = other.findings.notice
    assert notice.isVisibleTo(other.findings) and "another version of the spec" in notice.text()
    assert other.controller.state.stale and not other.controller.fixes_enabled

    # Saved with its own run, it opens as that run (said to be a saved one), fixes off.
    assert run(qtbot, window)["findings"] is not None
    window.save_session(path=str(path))
    third = open_window(qtbot, str(path))
    assert not third.controller.state.stale
    assert "saved with this session" in third.findings.notice.text()


def test_the_drift_findings_go_with_their_spec(qtbot):
    """A comparison's findings are listed while they are of the current spec: an edit takes
    them out of the list (the Drift tab marks the comparison stale), Undo brings them back."""
    window = open_window(qtbot, "demo:overflow")
    with qtbot.waitSignal(window.driftFinished, timeout=TIMEOUT_MS):
        assert window.compare_with_float32()
    assert "overflow" in [f.code for f in listed(window)]
    fix_id = next(f for f in listed(window) if f.code == "overflow").fixes[0].id
    window.controller.edit(window.spec.replace(samples=window.spec.samples + 1), "Edit samples")
    shown(qtbot)
    assert "overflow" not in [f.code for f in listed(window)]
    assert window.drift.stale.isVisibleTo(window.drift)
    assert not window.apply_fix(fix_id)
    window.undo_stack.undo()
    shown(qtbot)
    assert "overflow" in [f.code for f in listed(window)]
    assert not window.drift.stale.isVisibleTo(window.drift)
