"""The window shows a traced training script's steps and its gradients (issue 20, part 6)."""

from pathlib import Path

from fp16studio.gui import MainWindow

RUN_TIMEOUT_MS = 180_000
SCRIPT = Path(__file__).parent.parent / "scripts" / "train_adam_half.py"


def test_a_traced_training_script_shows_its_steps_and_gradients(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=RUN_TIMEOUT_MS)
    assert not window.findings.steps.isVisible()
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        assert window.open_script(str(SCRIPT))
    assert [s["finite"] for s in finished.args[0]["steps"]] == [True, False]
    line = window.findings.steps
    assert line.isVisible()
    assert "inf/NaN first at step 0, optimizer" in line.text()
    model = window.tensorTree.model()
    top = [model.index(r, 0, window.tensorTree.rootIndex()).data() for r in range(model.rowCount(
        window.tensorTree.rootIndex()))]
    assert any("gradients" in str(name) for name in top), top

    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS):
        assert window.run_diagnosis()   # the demo spec's own run: no steps of a script
    assert not line.isVisible()
