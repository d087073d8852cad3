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


def test_a_form_field_too_narrow_for_its_path_shows_both_ends_and_the_whole_in_its_tooltip(qtbot):
    from fp16studio.gui.pickers import SourcePicker

    picker = SourcePicker("model")
    qtbot.addWidget(picker)
    path = "/home/someone/models/google-bert/bert-base-uncased-finetuned-sst2"
    picker.edit.setText(path)
    picker.resize(160, 30)
    picker.show()
    qtbot.waitExposed(picker)
    edit = picker.edit
    assert edit.is_elided() and edit.toolTip() == path and edit.text() == path
    assert not edit.grab().isNull()                    # drawn elided, the text itself whole
    picker.resize(900, 30)
    qtbot.waitUntil(lambda: edit.width() > 600)
    assert not edit.is_elided() and edit.toolTip() == ""
