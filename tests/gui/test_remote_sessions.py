"""Session files are this computer's, whichever engine serves: Open, Save and Recent read and
write them here, a session made with the engine on a host remembers that host, and opening it
with another engine offers that host (its paths are the host's). The engine here stands in for
the box's (`ssh_detached_engine` made this computer's): no sshd is needed to see which machine
reads the file and what is offered."""

import json

import pytest

from fp16studio.core.spec.session import open_session, recent_files
from fp16studio.core.spec.value import PipelineSpec
from fp16studio.gui import MainWindow, connect_dialog
from fp16studio.gui.connect_dialog import CONNECT_THERE, STAY

SPEC = {"model": "/srv/models/bert-on-the-box", "dataset": "data/texts.jsonl"}


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(connect_dialog, "ssh_detached_engine", lambda host, python: None)
    window = MainWindow(PipelineSpec.from_dict(SPEC))
    qtbot.addWidget(window)
    yield window
    window.controller.shutdown()


def test_a_session_saved_on_a_host_names_it_and_keeps_the_host_s_paths_and_folder(window, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data/texts.jsonl").write_text("{}\n")   # the same name here is not the box's
    window.engine_choice.connect_to("gpu1", "~/venvs/train/bin/python")
    window.controller.start_with(PipelineSpec.from_dict(SPEC, base_dir=tmp_path))
    path = tmp_path / "saved" / "on-gpu1.fp16studio"
    path.parent.mkdir()
    assert window.save_session(path=str(path))
    document = json.loads(path.read_text())
    assert (document["host"], document["remote_python"]) == ("gpu1", "~/venvs/train/bin/python")
    assert document["spec"]["dataset"] == "data/texts.jsonl"   # not rebased onto this computer
    # ... and read again from the folder the box read it from (a demo's cache there, say)
    assert document["host_folder"] == str(tmp_path)
    assert open_session(path).spec.base_dir == str(tmp_path)
    assert recent_files() == [path]   # the recent list is this computer's


def test_open_with_the_engine_on_a_host_reads_the_file_here(window, tmp_path, monkeypatch):
    window.engine_choice.connect_to("box", "python3")
    path = tmp_path / "made-on-box.fp16studio"
    path.write_text(json.dumps({"fp16studio_session": 1, "version": "0", "spec": SPEC,
                                "host": "box", "remote_python": "python3"}))
    jobs = []
    window.worker.jobStarted.connect(lambda job: jobs.append(job.kind))
    window.controller.open_path(str(path))
    assert window.controller.state.path == path   # adopted at once: nothing asked of the box
    assert window.spec.model == SPEC["model"] and "open" not in jobs
    assert recent_files() == [path]


def test_a_spec_made_here_opened_with_the_engine_on_a_host_says_its_files_stay_here(
        window, tmp_path):
    """The box reads a plain spec's paths as its own: files that exist here are named, once."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data/texts.jsonl").write_text("{}\n")
    path = tmp_path / "here.json"
    path.write_text(json.dumps(SPEC))
    window.engine_choice.connect_to("box", "python3")
    logged = []
    window.controller.logged.connect(lambda level, text: logged.append((level, text)))
    window.controller.open_path(str(path))     # read here, at once: nothing asked of the box
    assert window.controller.state.path == path
    warnings = [text for level, text in logged if level == "warning"]
    assert len(warnings) == 1 and "data/texts.jsonl" in warnings[0] and "box" in warnings[0]
    assert "bert-on-the-box" not in warnings[0]    # not a file here: the box's own, maybe


def made_on_gpu1(tmp_path):
    path = tmp_path / "made-on-gpu1.fp16studio"
    path.write_text(json.dumps({"fp16studio_session": 1, "version": "0", "spec": SPEC,
                                "host": "gpu1", "remote_python": "python3.12"}))
    return path


@pytest.mark.parametrize("answer, engine, opened", [
    (CONNECT_THERE, "gpu1", True), (STAY, "box", True), (None, "box", False)])
def test_a_session_made_on_another_host_offers_that_host(window, tmp_path, monkeypatch,
                                                         answer, engine, opened):
    window.engine_choice.connect_to("box", "python3")
    path, asked = made_on_gpu1(tmp_path), []
    monkeypatch.setattr(window.engine_choice, "ask_where",
                        lambda *offered: asked.append(offered) or answer)
    window.controller.open_path(str(path))
    assert asked == [("gpu1", "python3.12", path.name)]
    assert window.engine_choice.host == engine
    assert window.controller.engine_where == (("gpu1", "python3.12") if engine == "gpu1"
                                              else ("box", "python3"))
    assert (window.controller.state.path == path) is opened
    if not opened:   # the window keeps what it had
        assert window.spec == PipelineSpec.from_dict(SPEC) and window.controller.state.path is None


def test_the_engine_here_reads_which_host_a_session_was_made_on(tmp_path, monkeypatch):
    """With the engine on this computer, the engine reads the file (engine.tasks: open) and
    the host comes through its document."""
    from fp16studio.engine.tasks import open_source, types_of

    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    types = types_of("open")
    sent = types.encode_result(open_source(str(made_on_gpu1(tmp_path)), progress=print))
    opened = types.decode_result(json.loads(json.dumps(sent)))
    assert (opened.host, opened.remote_python) == ("gpu1", "python3.12")


def test_a_session_of_the_engine_now_serving_asks_nothing(window, tmp_path, monkeypatch):
    window.engine_choice.connect_to("gpu1", "python3")
    window.save_session(path=str(tmp_path / "here.fp16studio"))
    document = json.loads((tmp_path / "here.fp16studio").read_text())
    del document["remote_python"]   # a host without its Python: the default one there
    (tmp_path / "here.fp16studio").write_text(json.dumps(document))
    monkeypatch.setattr(window.engine_choice, "ask_where", lambda *offered: pytest.fail(offered))
    window.controller.open_path(str(tmp_path / "here.fp16studio"))
    assert open_session(tmp_path / "here.fp16studio").host == "gpu1"
    assert window.controller.state.path == tmp_path / "here.fp16studio"


def test_a_folder_of_this_computer_dropped_on_a_picker_is_no_path_on_the_box(qtbot, tmp_path):
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    from fp16studio.gui.pickers import SourcePicker

    picker = SourcePicker("model")
    qtbot.addWidget(picker)
    picker.browse.on_host("box")
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(tmp_path))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, data, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    committed = []
    picker.committed.connect(committed.append)
    picker.dropEvent(event)
    assert committed == [] and picker.text() == ""


def test_a_crash_copy_made_on_a_host_offers_that_host(window, monkeypatch):
    from fp16studio.core.spec.documents import Session

    asked = []
    monkeypatch.setattr(window.engine_choice, "ask_where", lambda *offered: asked.append(offered))
    restored = Session(PipelineSpec.from_dict({**SPEC, "samples": 2}), host="gpu1",
                       remote_python="python3")
    window.restore_session(restored)
    assert asked == [("gpu1", "python3", "the restored session")]
    assert window.spec == PipelineSpec.from_dict(SPEC)   # declined: not adopted
