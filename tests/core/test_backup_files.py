"""A NAME.bak of the user's is never replaced (issue 22): Save keeps the old session beside it
under the first free NAME.N.bak and says so; the command line refuses in one line. A backup
fp16studio made itself is replaced as before, so backups do not pile up."""

import json

import pytest

from fp16studio.cli import main
from fp16studio.core import PipelineSpec
from fp16studio.core.spec.documents import Session
from fp16studio.core.spec.session import save_session

MINE = "my own notes, not fp16studio's\n"


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))


def session(samples):
    return Session(PipelineSpec(model="m", dataset="synthetic", samples=samples))


def saved_samples(path):
    return json.loads(path.read_text())["spec"]["samples"]


def test_save_keeps_the_users_bak_and_the_old_session_beside_it(tmp_path):
    path = tmp_path / "work.fp16studio"
    save_session(session(1), path)
    (tmp_path / "work.fp16studio.bak").write_text(MINE)
    saved = save_session(session(2), path)
    assert (tmp_path / "work.fp16studio.bak").read_text() == MINE
    assert saved.kept_as == tmp_path / "work.fp16studio.1.bak"
    assert saved_samples(saved.kept_as) == 1 and saved_samples(path) == 2
    # The next save replaces its own backup, not the user's: no pile of backups.
    assert save_session(session(3), path).kept_as == saved.kept_as
    assert saved_samples(saved.kept_as) == 2
    assert sorted(p.name for p in tmp_path.glob("work.fp16studio*")) == [
        "work.fp16studio", "work.fp16studio.1.bak", "work.fp16studio.bak"]


def test_saving_over_a_users_file_twice_keeps_that_file(tmp_path):
    """Save As onto a spec of the user's keeps it as NAME.bak; the next Save must not replace
    that backup (it is the user's file, not a session fp16studio saved)."""
    path = tmp_path / "spec.json"
    path.write_text(MINE)
    assert save_session(session(1), path).kept_as == tmp_path / "spec.json.bak"
    assert save_session(session(2), path).kept_as == tmp_path / "spec.json.1.bak"
    assert (tmp_path / "spec.json.bak").read_text() == MINE
    assert saved_samples(tmp_path / "spec.json.1.bak") == 1


def test_a_folder_named_like_the_backup_is_left_alone(tmp_path):
    path = tmp_path / "work.fp16studio"
    save_session(session(1), path)
    (tmp_path / "work.fp16studio.bak").mkdir()
    assert save_session(session(2), path).kept_as == tmp_path / "work.fp16studio.1.bak"


def test_the_sessions_own_backup_is_replaced_as_before(tmp_path):
    path = tmp_path / "work.fp16studio"
    for samples in (1, 2, 3):
        saved = save_session(session(samples), path)
    assert saved.kept_as == tmp_path / "work.fp16studio.bak"
    assert saved_samples(saved.kept_as) == 2


def export(output, *more):
    return main(["export", "demo:map-cast", "-o", str(output), *more])


def test_the_command_line_refuses_to_replace_a_users_bak(tmp_path, capsys):
    script = tmp_path / "pipeline.py"
    assert export(script) == 0
    written = script.read_text()
    (tmp_path / "pipeline.py.bak").write_text(MINE)
    capsys.readouterr()
    assert export(script) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pipeline.py.bak" in err and "move it away" in err, err
    assert (tmp_path / "pipeline.py.bak").read_text() == MINE and script.read_text() == written


def test_force_keeps_the_users_file_once_and_never_replaces_that_backup(tmp_path, capsys):
    """--force keeps the user's file as NAME.bak; a later run (the output is now the command's
    own kind, no --force needed) must not replace that backup with its own earlier output."""
    notes = tmp_path / "notes.txt"
    notes.write_text(MINE)
    assert export(notes, "--force") == 0
    assert (tmp_path / "notes.txt.bak").read_text() == MINE
    capsys.readouterr()
    assert export(notes) == 2
    assert "notes.txt.bak" in capsys.readouterr().err
    assert (tmp_path / "notes.txt.bak").read_text() == MINE


def test_the_commands_own_backup_is_replaced_as_before(tmp_path):
    script = tmp_path / "pipeline.py"
    assert export(script) == 0 and export(script) == 0 and export(script) == 0
    assert "fp16studio" in (tmp_path / "pipeline.py.bak").read_text()
    assert not list(tmp_path.glob("pipeline.py.*.bak"))
