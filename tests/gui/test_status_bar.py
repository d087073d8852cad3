"""The status bar at 1024 wide (issue 43): where the engine runs is said once (by the Engine
selector, the label beside it adds only the GPUs), and the message, what to do next, stays whole
while the versions and the memory beside it shrink to an ellipsis."""

from PySide6.QtWidgets import QApplication, QComboBox, QLabel, QMainWindow

from fp16studio.core.diagnostics.report import Environment
from fp16studio.gui.status_bar import THIS_COMPUTER, StatusInfo

LONG_VERSIONS = Environment(torch="2.13.0+cpu", transformers="5.24.0", cuda=None)


def a_window(qtbot, width=1024):
    window = QMainWindow()
    qtbot.addWidget(window)
    status = StatusInfo(window.statusBar())
    selector = QComboBox()
    selector.addItem(THIS_COMPUTER)
    status.put_engine_selector(selector)
    window.resize(width, 300)
    window.show()
    return window, status


def said(window) -> list[str]:
    """The texts a person sees in the status bar: each visible label's and choice's."""
    bar = window.statusBar()
    texts = [w.text() for w in bar.findChildren(QLabel) if w.isVisible()]
    return texts + [w.currentText() for w in bar.findChildren(QComboBox) if w.isVisible()]


def test_where_the_engine_runs_is_said_once(qtbot):
    window, status = a_window(qtbot)
    status.set_engine(None)
    assert sum(THIS_COMPUTER in text for text in said(window)) == 1
    status.set_engine_report({"torch": "2.13.0", "gpus": [{"name": "H200", "used": 2**30, "total": 2**37}]})
    assert sum(THIS_COMPUTER in text for text in said(window)) == 1
    assert status.engine.isVisible() and status.engine.text().startswith("GPU 0 H200")


def test_the_message_stays_whole_while_the_labels_beside_it_shrink(qtbot):
    window, status = a_window(qtbot)
    status.set_environment(LONG_VERSIONS)
    status.memory.setText("RAM engine 517.4 MiB · window 157.8 MiB · GPU 12.0 GiB reserved")
    status.message.setText("Findings to fix: see the Findings panel.")
    QApplication.processEvents()
    assert not status.message.is_elided()
    assert status.versions.is_elided() and status.versions.toolTip() == status.versions.text()
    # A message longer than a bar can give it is elided, whole on hover, never widening the window.
    status.message.setText("The spec changed since the last run: " + "press Run to see its findings " * 8)
    QApplication.processEvents()
    assert status.message.is_elided() and status.message.toolTip() == status.message.text()
    assert window.minimumSizeHint().width() <= 1024
