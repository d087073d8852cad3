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


def test_a_script_of_this_computer_is_sent_to_a_run_folder_there_and_its_copy_chosen(
        qtbot, tmp_path, monkeypatch):
    import hashlib

    from fp16studio.gui.remote_browser import RemoteFileDialog

    monkeypatch.setenv("HOME", str(tmp_path / "box-home"))   # the engine's, standing in for the box's
    script = tmp_path / "here" / "train.py"
    script.parent.mkdir()
    script.write_bytes(b"print('trained')\r\n# \xc3\xa9 and no newline at the end")
    worker = WorkerHost()
    try:
        dialog = RemoteFileDialog(worker, "box", "Trace a Python script", "", False, (".py",),
                                  send_filter="Python scripts (*.py)")
        qtbot.addWidget(dialog)
        assert not dialog.send_button.isHidden()
        with qtbot.waitSignal(dialog.chosen, timeout=TIMEOUT_MS) as chosen:
            dialog.send(str(script))
        digest = hashlib.sha256(script.read_bytes()).hexdigest()
        copy = tmp_path / "box-home/.cache/fp16studio/runs" / digest[:16] / "train.py"
        assert chosen.args == [str(copy)] and copy.read_bytes() == script.read_bytes()
        plain = RemoteFileDialog(worker, "box", "Choose a folder", "", True)
        qtbot.addWidget(plain)
        assert plain.send_button.isHidden()   # only a script to trace is sent
    finally:
        assert worker.shutdown(5000)


def test_what_arrives_damaged_or_names_another_folder_is_refused(tmp_path, monkeypatch):
    import base64
    import hashlib

    from fp16studio.engine.remote_files import receive_script

    monkeypatch.setenv("HOME", str(tmp_path))
    data = b"print(1)\n"
    content, digest = base64.b64encode(data).decode(), hashlib.sha256(data).hexdigest()
    with pytest.raises(Exception, match="arrived damaged"):
        receive_script("a.py", base64.b64encode(b"print(2)\n").decode(), digest)
    with pytest.raises(Exception, match="not a script's name"):
        receive_script("../a.py", content, digest)
    assert not (tmp_path / ".cache").exists()
