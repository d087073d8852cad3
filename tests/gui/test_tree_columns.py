"""The tensor tree's columns at the widths the Tensors tab has at 1280 and 1024 (issue 43): each
as wide as its contents within the tab's width, Name and Shape first; what does not fit folds
(Abs-max, Device, Size) or is cut with its whole text on hover; a column the user sized stays."""

from PySide6.QtCore import QEvent, QModelIndex
from PySide6.QtWidgets import QApplication

from fp16studio.core.diagnostics.tree import TensorNode
from fp16studio.gui.tree_model import NAME, SHAPE
from fp16studio.gui.tree_panel import NAME_MIN_PX, TensorPanel

LONG_NAME = "ResNetForImageClassification"
LONG_SHAPE = (4, 3, 224, 224)


def a_pipeline(make_tree):
    root = make_tree()
    model = root.children[0]
    model.name = LONG_NAME
    model.add(TensorNode("pixel_values", "pixel_values", "input", shape=LONG_SHAPE, dtype="float32",
                         device="cpu", bytes=4 * 3 * 224 * 224 * 4))
    return root


def panel_at(qtbot, make_tree, width):
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(width, 500)
    panel.show()
    panel.set_tree(a_pipeline(make_tree))
    qtbot.waitUntil(lambda: panel.model.rowCount(panel.model.index(0, 0)) > 0)
    for _ in range(2):
        QApplication.processEvents()
    return panel


def shown_width(panel) -> int:
    header = panel.tree.header()
    return sum(header.sectionSize(c) for c in range(header.count()) if not header.isSectionHidden(c))


def whole(panel, column) -> bool:
    """Every loaded row's text of `column` fits its cell (nothing for the hover to complete)."""
    tree, tips = panel.tree, panel.tips
    found, stack = [], [QModelIndex()]
    while stack:
        parent = stack.pop()
        for row in range(panel.proxy.rowCount(parent)):
            index = panel.proxy.index(row, column, parent)
            if tree.visualRect(index).isValid():
                found.append(tips.cut_text(index) == "")
            stack.append(panel.proxy.index(row, 0, parent))
    return bool(found) and all(found)


def test_at_1280_names_and_shapes_are_whole_and_every_column_in_view(qtbot, make_tree):
    panel = panel_at(qtbot, make_tree, 640)   # the Tensors tab at 1280x800
    assert shown_width(panel) <= panel.tree.viewport().width()
    assert whole(panel, SHAPE) and whole(panel, NAME)


def test_at_1024_the_columns_fit_the_tab_and_shapes_stay_whole(qtbot, make_tree):
    panel = panel_at(qtbot, make_tree, 390)   # the Tensors tab at 1024x700
    header = panel.tree.header()
    assert shown_width(panel) <= panel.tree.viewport().width()
    assert panel.tree.horizontalScrollBar().maximum() == 0
    assert whole(panel, SHAPE)
    assert header.sectionSize(NAME) >= NAME_MIN_PX


def test_a_cut_name_is_whole_on_hover_and_a_column_the_user_sized_stays(qtbot, make_tree):
    panel = panel_at(qtbot, make_tree, 300)
    header = panel.tree.header()
    assert header.sectionSize(NAME) >= NAME_MIN_PX
    top = panel.proxy.index(0, NAME)
    assert panel.tips.cut_text(top) in ("", LONG_NAME)
    header.resizeSection(SHAPE, 150)   # as a drag of its edge does
    panel.resize(640, 500)
    QApplication.processEvents()
    assert header.sectionSize(SHAPE) == 150


def test_rows_turned_bold_are_measured_again_and_a_narrow_status_is_its_chip(qtbot, make_tree):
    from fp16studio.gui.tree_model import STATUS

    from fp16studio.gui.tree_model import DTYPE

    panel = panel_at(qtbot, make_tree, 390)
    panel.model.set_highlighted({"pixel_values", "model"})   # a finding names them: bold
    qtbot.waitUntil(lambda: whole(panel, SHAPE) and whole(panel, DTYPE))
    assert panel.tree.horizontalScrollBar().maximum() == 0
    status = panel.proxy.index(0, STATUS)   # the model's row, its chip alone: the word on hover
    if panel.tree.header().sectionSize(STATUS) < panel.tree.content_width(STATUS):
        assert panel.tips.cut_text(status) == status.data()


def test_fitting_the_columns_asks_the_delegate_nothing(qtbot, make_tree):
    """The columns are measured from the rows' cells, one call into the model per row in view:
    the delegate's sizeHint (its style's, per cell and role) held each result 20-30 ms."""
    panel = panel_at(qtbot, make_tree, 640)
    delegate, asked = panel.tree.itemDelegate(), []
    size_hint = delegate.sizeHint
    delegate.sizeHint = lambda *args: (asked.append(args[1].column()), size_hint(*args))[1]
    rows = []
    row_cells = panel.tree._row_cells
    panel.tree._row_cells = lambda index: (rows.append(index), row_cells(index))[1]
    panel.tree.fit_columns()
    assert asked == []
    assert 0 < len(rows) <= panel.tree.viewport().height() // panel.tree.visualRect(rows[0]).height() + 1


def test_rows_that_overflow_the_tree_leave_its_width_as_it_was(qtbot, make_tree, count_events):
    """A result's rows that overflow the tree brought its scroll bar after they were drawn: the
    rows narrower, the tree drawn whole again and its columns fitted again (issue 43's stalls).
    The scroll bar's track is always there, so the rows keep the width they were drawn at."""
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(640, 300)
    panel.show()
    panel.set_tree(make_tree(modules=1, params=1))
    QApplication.processEvents()
    viewport = panel.tree.viewport()
    width, resizes = viewport.width(), count_events(viewport, QEvent.Type.Resize)
    panel.set_tree(make_tree(modules=40, params=2))
    for _ in range(3):
        QApplication.processEvents()
    assert viewport.height() < panel.tree.visualRect(panel.proxy.index(0, 0)).height() * 40
    assert viewport.width() == width and resizes.count == 0
