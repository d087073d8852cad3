"""The GUI tests' monkeypatch (conftest.py) refuses to swap at a class a method of ours that
overrides a Qt method: PySide keeps the Python method it found for a C++ virtual, and a swap
undone left it calling a freed function (a theme switch in a later test crashed the process)."""

import pytest

from fp16studio.gui.trace_dialog import TraceDialog
from fp16studio.gui.tree_model import TensorTreeModel


def test_an_override_of_a_qt_method_is_not_swapped_at_its_class(monkeypatch):
    with pytest.raises(AssertionError, match="through a subclass"):
        monkeypatch.setattr(TensorTreeModel, "data", lambda self, index, role=0: None)
    assert "lambda" not in repr(TensorTreeModel.data)


def test_methods_of_ours_alone_and_qt_methods_we_do_not_override_are_swapped(monkeypatch):
    monkeypatch.setattr(TensorTreeModel, "row_cells", lambda self, index: [])
    monkeypatch.setattr(TraceDialog, "exec", lambda self: 0)
    assert TraceDialog.exec(None) == 0 and TensorTreeModel.row_cells(None, None) == []
