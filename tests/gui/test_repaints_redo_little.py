"""What a repaint does again (issue 43: no stall over 50 ms under load): checked as mechanisms,
never timed (benchmarks/gui_responsiveness.py measures the stalls). A repaint of the tensor tree
works out no cell and elides no text it did before, until what the cells show changes; a panel
whose body grows or shrinks repaints what moved, not what stayed where it was."""

import copy

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from fp16studio.core.diagnostics.tree_index import TreeIndex
from fp16studio.gui.fit import MeasuredLabel, VerticalScrollArea
from fp16studio.gui import tree_model
from fp16studio.gui.tree_model import DTYPE, NAME, PATH_ROLE, TensorTreeModel
from fp16studio.gui.tree_panel import TensorPanel


def shown_panel(qtbot, tree) -> TensorPanel:
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 400)
    panel.show()
    qtbot.waitExposed(panel)
    panel.set_tree(tree, TreeIndex(tree))
    panel.tree.expandAll()
    panel.tree.viewport().grab()   # the first paint: every cell in view worked out
    return panel


def cell_at(model, index):
    """What the painter draws at `index` of the source model."""
    return model.row_cells(index)[index.column()]


def counting(monkeypatch, owner, name) -> list:
    calls = []
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *args: (calls.append(args[1:]), original(*args))[1])
    return calls


def test_a_repaint_of_unchanged_cells_works_out_none_of_them_again(qtbot, make_tree, monkeypatch):
    panel = shown_panel(qtbot, make_tree())
    worked_out = counting(monkeypatch, TensorTreeModel, "_text")
    panel.tree.viewport().grab()
    assert worked_out == []


def test_what_changes_a_cell_is_shown_at_the_next_repaint(qtbot, make_tree, monkeypatch):
    """Each change of what a cell shows (a finding's rows bold, a colour mode, a re-run's
    figures) is in the cells asked for after it, though the cells before it were kept."""
    tree = make_tree()
    panel = shown_panel(qtbot, tree)
    model = panel.model
    layer0 = next(model.index(r, 0, model.index(0, 0)) for r in range(model.rowCount(model.index(0, 0)))
                  if model.index(r, 0, model.index(0, 0)).data() == "layer0")
    w0 = model.index(0, 0, layer0)
    w0_dtype = w0.siblingAtColumn(DTYPE)
    assert not cell_at(model, w0).bold   # each cell asked (and kept) before the change
    model.set_highlighted({"layer0.w0"})
    assert cell_at(model, w0).bold

    assert cell_at(model, layer0).color is None
    model.set_colour_by("headroom", {"layer0": 2.0})
    assert cell_at(model, layer0).color is not None

    assert cell_at(model, w0_dtype).text == "float32"
    rerun = copy.deepcopy(tree)
    rerun.children[0].children[0].children[0].dtype = "bfloat16"   # Net > layer0 > w0
    model.set_tree(rerun, TreeIndex(rerun))
    assert cell_at(model, w0_dtype).text == "bfloat16"


def test_a_repaint_elides_no_text_it_elided_before(qtbot, make_tree, monkeypatch):
    panel = shown_panel(qtbot, make_tree())
    panel.tree.setColumnWidth(NAME, 60)   # names cut: each one elided
    panel.tree.viewport().grab()
    elided = counting(monkeypatch, QFontMetrics, "elidedText")
    panel.tree.viewport().grab()
    assert elided == []


def test_a_panel_whose_body_grows_repaints_what_moved_not_what_stayed(qtbot, count_events):
    body = QWidget()
    layout = QVBoxLayout(body)
    top, bottom = QLabel("stays where it is"), QLabel("grows\n" * 12)   # taller than the area
    layout.addWidget(top)
    layout.addWidget(bottom)
    layout.addStretch(1)
    area = VerticalScrollArea(body)
    qtbot.addWidget(area)
    area.resize(300, 150)
    area.show()
    qtbot.waitExposed(area)
    qtbot.wait(20)
    counter = count_events(top, QEvent.Type.Paint)
    height = body.height()
    bottom.setText("grows\n" * 24)
    qtbot.waitUntil(lambda: body.height() > height)
    qtbot.wait(20)
    assert counter.count == 0


def test_a_wrapped_label_lays_its_text_out_once_per_width(qtbot, monkeypatch):
    """A layout asks a word-wrapped label's height for its width several times per change (the
    finding's detail: QLabel lays its rich text out anew each time); the label answers from
    what it measured until its text or font changes."""
    measured = counting(monkeypatch, MeasuredLabel, "measure")
    label = MeasuredLabel("<b>evidence</b> " + "words " * 40, wordWrap=True)
    qtbot.addWidget(label)
    height = label.heightForWidth(200)
    assert label.heightForWidth(200) == height and label.heightForWidth(200) == height
    assert measured == [(200,)]
    label.setText("<b>evidence</b> " + "words " * 80)
    assert label.heightForWidth(200) > height
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * 2)
    label.setFont(font)
    label.heightForWidth(200)
    assert measured == [(200,)] * 3


def test_the_finding_detail_measures_its_wrapped_labels_once_per_width(qtbot):
    from fp16studio.gui.findings_panel import FindingDetail

    detail = FindingDetail()
    qtbot.addWidget(detail)
    assert all(isinstance(label, MeasuredLabel) for label in (detail.title, detail.evidence, detail.fixes_label))


class BarsAtPaint(QObject):
    """Whether the tree's sideways scroll bar was shown at each paint of its viewport."""

    def __init__(self, tree):
        super().__init__(tree)
        self.tree, self.sideways = tree, []
        tree.viewport().installEventFilter(self)

    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.Paint:
            self.sideways.append(self.tree.horizontalScrollBar().isVisible())
        return False


def test_rows_that_need_a_vertical_bar_leave_no_sideways_bar_painted_for_a_moment(qtbot, make_tree):
    """The columns fill the tree's width; rows past its height scroll in the vertical bar's
    track, which is always there (test_tree_columns): the tree is never laid out and painted
    with a sideways bar that goes again in the next one."""
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 330)
    panel.show()
    qtbot.waitExposed(panel)
    tree = make_tree(modules=4)
    panel.set_tree(tree, TreeIndex(tree))
    qtbot.wait(50)
    assert panel.tree.verticalScrollBar().maximum() == 0
    bars = BarsAtPaint(panel.tree)
    panel.tree.expandAll()
    qtbot.waitUntil(lambda: panel.tree.verticalScrollBar().maximum() > 0)
    qtbot.wait(50)
    assert bars.sideways and not any(bars.sideways)
    assert not panel.tree.horizontalScrollBar().isVisible()


def test_the_cells_kept_are_bounded(make_tree, monkeypatch):
    """A scroll through a large model keeps a few screens of cells, not all of them."""
    monkeypatch.setattr(tree_model, "CELLS_KEPT", 10)
    model = TensorTreeModel()
    model.set_tree(make_tree(wide=40))
    top = model.index(0, 0)
    while model.canFetchMore(top):
        model.fetchMore(top)
    big = next(model.index(r, 0, top) for r in range(model.rowCount(top)) if model.index(r, 0, top).data() == "big")
    model.fetchMore(big)
    for row in range(40):
        cell_at(model, model.index(row, NAME, big))
        assert len(model._cells) <= 10
    assert cell_at(model, model.index(39, NAME, big)).text == "p39"


def test_columns_fitted_to_a_new_result_are_painted_once(qtbot, make_tree, count_events):
    """A result, or rows that bring the vertical scroll bar, change what the columns hold: they
    are fitted before the paint that shows the rows, and that paint is the only one. (QTreeView
    repaints a resized column again an event after the resize, by then already painted: the
    whole tree, the widest part of the window's repaint, drawn twice per result.)"""
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 330)
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.wait(20)
    paints = count_events(panel.tree.viewport(), QEvent.Type.Paint)
    tree = make_tree(modules=4)
    panel.set_tree(tree, TreeIndex(tree))
    qtbot.waitUntil(lambda: paints.count > 0)
    qtbot.wait(50)
    assert paints.count == 1
    paints.count = 0
    panel.tree.expandAll()   # rows past the tree's height: the vertical bar takes some width
    qtbot.waitUntil(lambda: panel.tree.verticalScrollBar().isVisible() and paints.count > 0)
    qtbot.wait(50)
    assert paints.count == 1


def test_a_result_with_the_same_dtypes_and_devices_leaves_their_choosers_as_they_were(qtbot, make_tree,
                                                                                         count_events):
    """A re-run (the fix applied, Run again) lists the dtypes and devices the last run listed:
    their choosers are not emptied and filled again, and so not repainted."""
    tree = make_tree()
    panel = shown_panel(qtbot, tree)
    panel.dtype_filter.setCurrentIndex(panel.dtype_filter.findData("float16"))
    qtbot.wait(20)
    paints = [count_events(chooser, QEvent.Type.Paint) for chooser in (panel.dtype_filter, panel.device_filter)]
    rerun = copy.deepcopy(tree)
    panel.set_tree(rerun, TreeIndex(rerun))
    qtbot.wait(50)
    assert [counter.count for counter in paints] == [0, 0]
    assert panel.dtype_filter.currentData() == "float16"


def test_a_stale_note_coming_and_going_draws_no_row_of_the_tree_again(qtbot, make_tree, count_events):
    """An edit makes the tree stale and the next run current again: the note that says so
    moves none of the rows drawn, so none is drawn again (the rows a taller view uncovers are)."""
    panel = shown_panel(qtbot, make_tree())
    qtbot.wait(50)   # the paints its showing asked for
    viewport = panel.tree.viewport()
    height = viewport.height()
    paints = count_events(viewport, QEvent.Type.Paint)
    panel.set_notice("This tree is of another version of the spec: Run to see the current one's.")
    qtbot.waitUntil(lambda: viewport.height() < height)
    qtbot.wait(20)
    assert paints.rects == []
    shorter = viewport.height()
    panel.set_notice(None)
    qtbot.waitUntil(lambda: viewport.height() == height)
    qtbot.wait(20)
    assert paints.rects and all(rect.top() >= shorter for rect in paints.rects)


def test_a_result_draws_its_tree_once_though_its_first_finding_is_revealed(qtbot, count_events):
    """Choosing the first finding (a turn after the tree) reveals its module in the tree: the
    tree came expanded and scrolled to it, so only its row is drawn again, selected."""
    from fp16studio.gui import MainWindow
    from window_steps import run

    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None and not window.worker.pending(), timeout=180_000)
    viewport = window.tensors.tree.viewport()
    paints = count_events(viewport, QEvent.Type.Paint)
    run(qtbot, window)
    qtbot.wait(50)
    current = window.tensors.tree.currentIndex()
    first = window.controller.state.located[window.findings.model.findings()[0].location]
    assert current.isValid() and current.data(PATH_ROLE) == first.path
    whole = [rect for rect in paints.rects if rect.height() >= viewport.height() - 1]
    assert len(whole) == 1, [rect.getRect() for rect in paints.rects]


def test_the_rows_height_is_asked_of_the_style_once_per_font(qtbot, make_tree):
    """Every cell's size hint has the row's height, which the style works out from every role
    of the cell (a dozen calls through the proxy): asked once for plain rows and once for bold
    ones (a finding's), not for each cell the view measures."""
    from PySide6.QtWidgets import QStyledItemDelegate

    from fp16studio.gui.delegates import TensorCellDelegate

    asked = []

    class CountingStyle(QStyledItemDelegate):   # the style's answer, under the painter's
        def sizeHint(self, option, index):
            asked.append(index)
            return super().sizeHint(option, index)

    class Counted(TensorCellDelegate, CountingStyle):
        pass

    tree = make_tree()
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.tree.setItemDelegate(Counted(panel.tree.cell_of, panel.tree))
    panel.set_tree(tree, TreeIndex(tree))
    panel.model.set_highlighted({"layer0.w0"})
    panel.tree.expandAll()
    for column in range(panel.proxy.columnCount()):
        panel.tree.resizeColumnToContents(column)
    assert 1 <= len(asked) <= 2
