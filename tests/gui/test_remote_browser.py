"""With the engine on a box, the form's Browse buttons (model, dataset, preprocess) list the
box's folders through the engine (engine/remote_files.py), never this computer's file dialog.
The engine here is this machine's, standing in for the box; test_remote_window.py browses the
box's own home through sshd."""

import pytest
from PySide6.QtWidgets import QFileDialog

from fp16studio.core import PipelineSpec
from fp16studio.engine.remote_files import list_folder
from fp16studio.gui.remote_browser import Browse
from fp16studio.gui.spec_form import SpecForm
from fp16studio.gui.worker import WorkerHost

TIMEOUT_MS = 60_000


@pytest.fixture
def form(qtbot, monkeypatch):
    def local_dialog(*args):
        raise AssertionError("this computer's file dialog opened for a box")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", local_dialog)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", local_dialog)
    worker = WorkerHost()
    form = SpecForm()
    qtbot.addWidget(form)
    browse = Browse(worker)
    browse.on_host("box")
    form.browse_with(browse)
    form.set_spec(PipelineSpec(model="m", dataset="synthetic", preprocess="old.py:fn"))
    yield form
    assert worker.shutdown(5000)


def shows(qtbot, dialog, folder):
    """Wait until `dialog` lists `folder` (the engine answers on its own time)."""
    qtbot.waitUntil(lambda: dialog.listing is not None and dialog.listing.path == str(folder),
                    timeout=TIMEOUT_MS)
    return dialog.listing


def names(dialog):
    return [dialog.entries.item(i).text().split()[0] for i in range(dialog.entries.count())]


def test_the_pickers_browse_the_engine_s_folders(qtbot, form, tmp_path):
    (tmp_path / "models/tiny").mkdir(parents=True)
    (tmp_path / "models/notes.txt").write_text("x")
    (tmp_path / "pre.py").write_text("def fn(example):\n    return example\n")
    edited = []
    form.specEdited.connect(lambda spec, key: edited.append((key, getattr(spec, key))))

    # The model's folder: files are not offered, a double-clicked folder is entered.
    form.model_picker.edit.setText(str(tmp_path / "models"))
    form.model_picker.folder_button.click()
    dialog = form.browse.dialog
    shows(qtbot, dialog, tmp_path / "models")
    assert dialog.path.text() == str(tmp_path / "models") and names(dialog) == ["tiny/"]
    dialog.entries.itemActivated.emit(dialog.entries.item(0))
    assert shows(qtbot, dialog, tmp_path / "models/tiny").parent == str(tmp_path / "models")
    dialog.choose_button.click()
    assert edited == [("model", str(tmp_path / "models/tiny"))]

    # The preprocess file: .py files only; the function named before is kept.
    form.preprocess_browse.trigger()   # the field names old.py, not here: its home first
    dialog = form.browse.dialog
    dialog.path.setText(str(tmp_path))
    dialog.path.returnPressed.emit()
    shows(qtbot, dialog, tmp_path)
    assert names(dialog) == ["models/", "pre.py"]
    dialog.entries.itemActivated.emit(dialog.entries.item(1))
    assert edited[-1] == ("preprocess", f"{tmp_path / 'pre.py'}:fn")


def test_a_listing_says_where_it_is_and_refuses_what_is_no_folder(tmp_path):
    (tmp_path / "data.csv").write_text("a\n1\n")
    listing = list_folder(str(tmp_path / "data.csv"))   # a file's path: its folder
    assert listing.path == str(tmp_path) and [(e.name, e.folder, e.size) for e in listing.entries] \
        == [("data.csv", False, 4)]
    assert "Home" in listing.places
    with pytest.raises(Exception, match="no such folder"):
        list_folder(str(tmp_path / "gone/deeper"))
