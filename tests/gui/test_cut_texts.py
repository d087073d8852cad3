"""Text a panel has no room for is cut visibly and whole a hover away (issue 43 item 6): a
combo box's current text ends in an ellipsis with the whole text in its tooltip (never cut
mid-letter, "image-classificati"), a table's name column takes a share of the width with its
paths elided in the middle, and any cell whose text is cut shows it whole on hover."""

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QHelpEvent, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QApplication, QTableView, QToolTip

from fp16studio.gui.fit import ShrinkingComboBox, WholeCellTips, share_the_width
from fp16studio.gui.spec_form import SpecForm

LONG = "resnet.encoder.stages.3.layers.1.shortcut.convolution"


def test_a_narrow_combo_says_it_is_cut_and_holds_its_whole_text_a_hover_away(qtbot):
    combo = ShrinkingComboBox(toolTip="What the task means")
    qtbot.addWidget(combo)
    combo.addItems(["auto", "image-classification"])
    combo.setCurrentIndex(1)
    combo.resize(combo.sizeHint())
    combo.show()
    assert not combo.is_elided() and combo.toolTip() == "What the task means"
    combo.resize(combo.minimumSizeHint().width() + 10, combo.height())
    assert combo.is_elided()
    assert combo.toolTip().startswith("image-classification\n")
    assert combo.toolTip().endswith("What the task means")   # its own tooltip kept


def test_the_forms_combos_elide_with_their_whole_text_in_the_tooltip(qtbot):
    form = SpecForm()
    qtbot.addWidget(form)
    form.resize(300, 600)
    form.show()
    task = form.fields["task"].widget
    task.setCurrentIndex(task.findData("image-classification"))
    task.resize(task.minimumSizeHint())
    assert isinstance(task, ShrinkingComboBox) and task.is_elided()
    assert task.toolTip().startswith("image-classification")
    device = form.fields["device"].widget   # editable: its line edit elides in the middle
    device.setEditText("cuda:0,cuda:1,cuda:2,cuda:3,cuda:4,cuda:5")
    device.resize(device.minimumSizeHint())
    assert device.lineEdit().is_elided() and device.lineEdit().toolTip() == device.currentText()


def table_of(qtbot, width):
    model = QStandardItemModel(0, 5)
    model.setHorizontalHeaderLabels(["Module", "Class", "Max |diff|", "SQNR dB", "Non-finite"])
    for row in range(4):
        model.appendRow([QStandardItem(f"{LONG}.{row}"), QStandardItem("Conv2d"),
                         QStandardItem("0.0012"), QStandardItem("66.6"), QStandardItem("0")])
    view = QTableView()
    qtbot.addWidget(view)
    view.setModel(model)
    share_the_width(view, {0: 0.45})
    view.resize(width, 300)
    view.show()
    qtbot.waitExposed(view)
    return view


def test_a_tables_name_column_leaves_its_figures_in_view_and_a_cut_name_is_whole_on_hover(qtbot):
    view = table_of(qtbot, 420)
    room = view.viewport().width()
    assert view.columnWidth(0) <= 0.45 * room + 1
    assert view.textElideMode() == Qt.TextElideMode.ElideMiddle
    index = view.model().index(0, 0)
    rect = view.visualRect(index)
    event = QHelpEvent(QEvent.Type.ToolTip, rect.center(), view.viewport().mapToGlobal(rect.center()))
    QApplication.sendEvent(view.viewport(), event)
    assert QToolTip.text() == f"{LONG}.0"
    QToolTip.hideText()
    # A wide table gives the names all the room they need: nothing cut, no tip.
    wide = table_of(qtbot, 1400)
    assert wide.columnWidth(0) >= wide.sizeHintForColumn(0)
    tips = wide.findChild(WholeCellTips)
    assert [tips.cut_text(wide.model().index(0, column)) for column in range(5)] == [""] * 5
    assert view.findChild(WholeCellTips).cut_text(index) == f"{LONG}.0"


def test_a_choice_set_with_the_signals_blocked_still_has_its_whole_text_on_hover(qtbot):
    """The form shows a spec with its fields' signals blocked: the tooltip is worked out
    when it is asked for, not kept by signals."""
    combo = ShrinkingComboBox()
    qtbot.addWidget(combo)
    combo.addItems(["auto", "image-classification"])
    combo.show()
    combo.resize(combo.minimumSizeHint())
    combo.blockSignals(True)
    combo.setCurrentIndex(1)
    combo.blockSignals(False)
    assert combo.is_elided() and combo.toolTip() == "image-classification"
    event = QHelpEvent(QEvent.Type.ToolTip, combo.rect().center(), combo.mapToGlobal(combo.rect().center()))
    QApplication.sendEvent(combo, event)
    assert QToolTip.text() == "image-classification"
