"""Specs the validation once let through to a crash (issue 22): each is bad input, exit 2 with
one line naming what is wrong, never exit 3."""

import json

import pytest

from fp16studio.cli import main

BASE = {"model": "m", "dataset": "synthetic"}


def nested(levels):
    value = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.parametrize("keys, words", [
    ({"model_dtype": None}, ["model_dtype"]),
    ({"applied_fixes": [{"id": "x", "title": "y", "edits": 5}]}, ["applied_fixes.edits"]),
    ({"applied_fixes": [{"edits": 5}]}, ["applied_fixes", "'id'"]),
    ({"applied_fixes": 5}, ["applied_fixes"]),
    # Nested past what freezing the spec can walk (it once ran out of recursion: exit 3).
    ({"applied_fixes": [{"id": "x", "title": "y", "edits": nested(600)}]}, ["nested too deeply"]),
])
@pytest.mark.parametrize("command", ["diagnose", "export"])
def test_a_spec_the_validation_once_missed_is_bad_input(tmp_path, capsys, command, keys, words):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**BASE, **keys}))
    extra = ["-o", str(tmp_path / "out.py")] if command == "export" else []
    assert main([command, str(spec), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fp16studio: ") and err.count("\n") == 1, err
    assert "internal error" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_a_toml_spec_nested_too_deeply_is_bad_input(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('model = "m"\ndataset = "synthetic"\n'
                    f"applied_fixes = [{{id = \"x\", title = \"y\", edits = {'{a = ' * 200}1{' }' * 200}}}]\n")
    assert main(["diagnose", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err, err


def test_a_session_nested_too_deeply_is_bad_input(tmp_path, capsys):
    session = tmp_path / "s.fp16studio"
    session.write_text(json.dumps({"fp16studio_session": 1, "spec": BASE,
                                   "diagnosis": {"findings": [{"evidence": nested(600)}]}}))
    assert main(["diagnose", str(session)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err, err
