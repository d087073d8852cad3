"""The tensor tree draws a row no state is drawn on in one call into Python
(TensorTreeView.drawRow): pixel for pixel what the view's own drawRow draws, which calls the
delegate once per cell. Compared in both themes, every colour mode, at odd and even scroll
offsets, with bold rows, a selected and a current row, narrow columns and a disabled view."""

import pytest
from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QPalette

from fp16studio.core.diagnostics.tree_index import TreeIndex
from fp16studio.gui import theme, tree_panel
from fp16studio.gui.tree_model import COLOUR_BY
from fp16studio.gui.tree_panel import TensorPanel


def drawn_both_ways(panel, monkeypatch):
    """The tree's viewport drawn by its drawRow, then by the view's own (no paint's shared
    state: every row goes to QTreeView.drawRow); and how many rows took the one-call way."""
    rows = []
    painting = tree_panel._Painting

    def counted(view):
        found = painting(view)
        plain = found.plain
        found.plain = lambda *args: (rows.append(plain(*args)), rows[-1])[1]
        return found

    monkeypatch.setattr(tree_panel, "_Painting", counted)
    ours = panel.tree.viewport().grab().toImage()
    monkeypatch.setattr(tree_panel, "_Painting", lambda view: None)
    theirs = panel.tree.viewport().grab().toImage()
    monkeypatch.setattr(tree_panel, "_Painting", painting)
    return ours, theirs, sum(rows)


@pytest.fixture
def panel(qtbot, qapp, make_tree):
    made = TensorPanel()
    qtbot.addWidget(made)
    made.resize(900, 300)
    made.show()
    qtbot.waitExposed(made)
    tree = make_tree(modules=8, params=3, problem_at="layer1.w1")
    made.set_tree(tree, TreeIndex(tree))
    made.tree.expandAll()
    made.model.set_highlighted(["layer1.w1", "layer3"])
    yield made
    qapp.setStyleSheet("")
    qapp.setPalette(QPalette())


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_rows_drawn_in_one_call_are_the_views_own_pixel_for_pixel(panel, qapp, monkeypatch, scheme):
    theme.Theme(qapp, scheme)
    bar = panel.tree.verticalScrollBar()
    one_call = 0
    for kind in COLOUR_BY:
        panel.model.set_colour_by(kind, {"layer0": 2.0, "layer1": 40.0, "layer2": 12.5})
        for scrolled in (0, 1, 3):
            bar.setValue(min(scrolled, bar.maximum()))
            ours, theirs, rows = drawn_both_ways(panel, monkeypatch)
            assert ours == theirs, (kind, scrolled)
            one_call += rows
    assert one_call > 100   # the rows did take the one-call way


def test_rows_with_a_state_and_narrow_columns_are_drawn_as_the_view_draws_them(panel, monkeypatch):
    tree = panel.tree
    second = tree.model().index(1, 0, tree.model().index(0, 0))
    tree.selectionModel().setCurrentIndex(second, QItemSelectionModel.SelectionFlag.ClearAndSelect
                                          | QItemSelectionModel.SelectionFlag.Rows)
    tree.setFocus()
    ours, theirs, rows = drawn_both_ways(panel, monkeypatch)
    assert ours == theirs and rows > 0
    tree.clearSelection()
    ours, theirs, _ = drawn_both_ways(panel, monkeypatch)   # current, not selected
    assert ours == theirs
    for width in (300, 160, 60):   # names cut; then a first column narrower than its indent
        panel.resize(width, 300)
        tree.header().resizeSection(0, width // 3)
        ours, theirs, _ = drawn_both_ways(panel, monkeypatch)
        assert ours == theirs, width
    tree.setEnabled(False)
    ours, theirs, rows = drawn_both_ways(panel, monkeypatch)
    assert ours == theirs and rows == 0
