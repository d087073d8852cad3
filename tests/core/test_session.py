import json

import pytest

from fp16studio.core import InputError, PipelineSpec
from fp16studio.core.common import config_folder
from fp16studio.core.common.config_folder import config_dir
from fp16studio.core.spec import session as sessions
from fp16studio.core.spec.documents import Session
from fp16studio.core.spec.documents import load_spec
from fp16studio.core.spec.session import (add_recent, autosave, clear_autosave,
                                          open_session, recent_files, restore_autosave, save_session)

DIAGNOSIS = {"ok": False, "device": "cpu", "findings": [{"code": "dtype-mismatch"}]}
BENCH = {"device": "cpu", "variants": [{"name": "float32", "ok": True}]}


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    folder = tmp_path / "config"
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(folder))
    return folder


@pytest.fixture
def project(tmp_path):
    """A spec file with relative local paths, as users keep them next to their data."""
    folder = tmp_path / "project"
    (folder / "model").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "prep.py").write_text("def fn(example):\n    return example\n")
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps({"model": "model", "dataset": "data", "preprocess": "prep.py:fn",
                                     "model_dtype": "fp16"}))
    return load_spec(spec_path)


def test_round_trip_keeps_spec_findings_and_bench(tmp_path, project):
    saved = save_session(Session(project, DIAGNOSIS, BENCH), tmp_path / "project" / "run.fp16studio")
    assert saved.path == tmp_path / "project" / "run.fp16studio" and saved.saved_at
    opened = open_session(saved.path)
    assert opened.spec == project
    assert (opened.diagnosis, opened.bench) == (DIAGNOSIS, BENCH)
    # Saved next to the spec: relative paths stay relative (the folder stays portable).
    document = json.loads(saved.path.read_text())
    assert document["fp16studio_session"] == 1 and document["spec"]["model"] == "model"
    assert {"version", "saved_at"} <= set(document)


def test_spec_load_reads_a_session_file(tmp_path, project):
    path = save_session(Session(project, DIAGNOSIS), tmp_path / "project" / "s.fp16studio").path
    assert load_spec(path) == project


def test_saving_in_another_folder_keeps_local_paths_valid(tmp_path, project):
    elsewhere = tmp_path / "elsewhere" / "s.fp16studio"
    elsewhere.parent.mkdir()
    spec = open_session(save_session(Session(project), elsewhere).path).spec
    assert spec.local_path(spec.model) == (tmp_path / "project" / "model").resolve()
    assert spec.local_path(spec.dataset) == (tmp_path / "project" / "data").resolve()
    assert spec.preprocess == f"{(tmp_path / 'project' / 'prep.py').resolve()}:fn"


def test_hub_ids_are_not_rebased(tmp_path):
    spec = PipelineSpec(model="org/name", dataset="user/set", base_dir=str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    saved = save_session(Session(spec), tmp_path / "b" / "s.fp16studio")
    assert open_session(saved.path).spec.model == "org/name"


def test_second_save_keeps_previous_file_as_bak(tmp_path, project):
    path = tmp_path / "project" / "s.fp16studio"
    save_session(Session(project, DIAGNOSIS), path)
    first = path.read_text()
    save_session(Session(project.replace(model_dtype="bfloat16")), path)
    assert path.with_name("s.fp16studio.bak").read_text() == first
    assert open_session(path).spec.model_dtype == "bfloat16"
    assert not list(path.parent.glob(".*.tmp"))


def _disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device")


def _half_written(self, text, *args, **kwargs):
    """The disk fills halfway through writing: what is there is a truncated file."""
    with open(self, "w", encoding="utf-8") as handle:
        handle.write(text[: len(text) // 2])
    _disk_full()


@pytest.mark.parametrize("failure", ["while writing", "at the rename", "and at the clean-up"])
def test_failed_save_leaves_the_old_file(tmp_path, project, monkeypatch, failure):
    """The writer fails after the temporary file is (partly) written: the old file is intact,
    no temporary file is left, and the error is an InputError even when the clean-up fails."""
    path = tmp_path / "project" / "s.fp16studio"
    save_session(Session(project, DIAGNOSIS), path)
    before = path.read_text()
    path_type, rename = type(path), type(path).replace

    def rename_fails_onto_the_session(self, target):  # the .bak is still kept as usual
        if target == path:
            _disk_full()
        return rename(self, target)

    if failure == "while writing":
        monkeypatch.setattr(path_type, "write_text", _half_written)
    else:
        monkeypatch.setattr(path_type, "replace", rename_fails_onto_the_session)
    if failure == "and at the clean-up":
        monkeypatch.setattr(path_type, "unlink", _disk_full)
    with pytest.raises(InputError, match="No space left"):
        save_session(Session(project.replace(model_dtype="bfloat16")), path)
    monkeypatch.undo()
    assert path.read_text() == before
    if failure != "and at the clean-up":
        assert not list(path.parent.glob(".*.tmp"))


def test_plain_spec_opens_as_a_session_without_findings(project):
    opened = open_session(project.base_dir + "/spec.json")
    assert opened.spec == project and opened.diagnosis is None and opened.bench is None


@pytest.mark.parametrize("text, message", [
    ("{not json", "not a session"),
    ('{"fp16studio_session": 99, "spec": {}}', "format 99"),
    ('{"fp16studio_session": 1, "spec": {"model": "m", "dataset": "d", "colour": 1}}', "unknown key"),
])
def test_bad_files_are_input_errors(tmp_path, text, message):
    path = tmp_path / "bad.fp16studio"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        open_session(path)


def test_recent_files_newest_first_deduplicated_and_bounded(tmp_path, config):
    files = [tmp_path / f"{i}.fp16studio" for i in range(sessions.RECENT_LIMIT + 2)]
    for path in files:
        path.write_text("{}")
        add_recent(path)
    add_recent(files[0])
    recent = recent_files()
    assert recent[0] == files[0] and len(recent) == sessions.RECENT_LIMIT
    assert len(set(recent)) == len(recent)
    files[-1].unlink()
    assert files[-1] not in recent_files()
    assert (config / "recent.json").is_file()


def test_open_and_save_record_recent_files(tmp_path, project):
    path = save_session(Session(project), tmp_path / "project" / "s.fp16studio").path
    assert recent_files() == [path]
    open_session(project.base_dir + "/spec.json")
    assert recent_files()[0].name == "spec.json"


def test_corrupt_recent_list_is_ignored(config):
    config.mkdir()
    (config / "recent.json").write_text("[oops")
    assert recent_files() == []


def test_autosave_restore_and_clear(tmp_path, project):
    assert restore_autosave() is None
    opened = save_session(Session(project, DIAGNOSIS), tmp_path / "project" / "s.fp16studio")
    edited = Session(project.replace(model_dtype="bfloat16"), DIAGNOSIS, BENCH, path=opened.path)
    autosave(edited)
    restored = restore_autosave()
    assert restored.spec.model_dtype == "bfloat16" and restored.bench == BENCH
    # The autosave lives in the config folder, yet the spec still finds the user's files.
    assert restored.spec.local_path(restored.spec.model) == (tmp_path / "project" / "model").resolve()
    assert restored.path == opened.path
    clear_autosave()
    assert restore_autosave() is None


def test_unreadable_autosave_is_not_restored(config):
    config.mkdir()
    (config / "autosave.fp16studio").write_text('{"fp16studio_session": 1, "spec": 3}')
    assert restore_autosave() is None


def test_config_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("FP16STUDIO_CONFIG_DIR")
    monkeypatch.setattr(config_folder.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_dir() == tmp_path / "xdg" / "fp16studio"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config_dir() == tmp_path / "home" / ".config" / "fp16studio"


def test_each_window_has_its_own_autosave(project):
    """Two windows of one process: closing one keeps the other's crash copy, and a copy is
    offered for restoring only once its process is gone."""
    from fp16studio.core.spec.session import autosave_owner, clear_orphan_autosaves

    first, second = autosave_owner(1), autosave_owner(2)
    autosave(Session(project.replace(model_dtype="float16")), first)
    autosave(Session(project.replace(model_dtype="bfloat16")), second)
    clear_autosave(first)
    files = sorted(p.name for p in config_dir().iterdir() if p.name.startswith("autosave"))
    assert files == [f"autosave-{second}.fp16studio"]
    assert restore_autosave() is None                 # its window (this process) still runs
    dead = config_dir() / files[0].replace(second.partition("-")[0], "999999999", 1)
    (config_dir() / files[0]).rename(dead)            # as if its process had crashed
    assert restore_autosave().spec.model_dtype == "bfloat16"
    clear_orphan_autosaves()
    assert restore_autosave() is None and not dead.exists()
