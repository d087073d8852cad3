"""The one-line label of the status bar and the panels (fit.ElidedLabel): its tooltip has the
whole text only while the text is cut, and setting the text it already shows changes nothing
(the status bar's memory figure is set every few seconds: no tooltip event, no relayout)."""

from PySide6.QtCore import QEvent, QObject

from fp16studio.gui.fit import ElidedLabel


class Events(QObject):
    def __init__(self, watched):
        super().__init__()
        self.seen = []
        watched.installEventFilter(self)

    def eventFilter(self, _obj, event):
        self.seen.append(event.type())
        return False


def test_the_tooltip_is_the_whole_text_only_while_it_is_cut(qtbot):
    label = ElidedLabel("RAM 512 MB")
    qtbot.addWidget(label)
    label.show()   # a hidden widget is told of a resize only when shown
    label.resize(400, 20)
    assert label.toolTip() == ""
    label.resize(30, 20)
    assert label.toolTip() == "RAM 512 MB"
    label.setText("RAM 1.2 GB")
    assert label.toolTip() == "RAM 1.2 GB" and label.text() == "RAM 1.2 GB"
    label.resize(400, 20)
    assert label.toolTip() == ""


def test_the_same_text_again_changes_nothing(qtbot):
    label = ElidedLabel("RAM 512 MB")
    qtbot.addWidget(label)
    label.show()   # a hidden widget is told of a resize only when shown
    label.resize(30, 20)
    events = Events(label)
    label.setText("RAM 512 MB")
    assert events.seen == []
    label.setText("RAM 513 MB")
    assert QEvent.Type.ToolTipChange in events.seen
