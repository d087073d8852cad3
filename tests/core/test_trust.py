"""No code runs without consent (CONTRACT §6): a spec or session the user did not write runs its
preprocess only once trusted, for that content; export never runs it; preprocess is never an
installed module."""

import json
import os
import subprocess
import sys

import pytest

from fp16studio.cli import main
from fp16studio.core import InputError, PipelineSpec
from fp16studio.core.spec import trust
from fp16studio.core.spec.documents import load_spec, save_spec
from fp16studio.core.spec.session import Session, open_session, save_session

from tests.received_code import marking, received_spec


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def received(demo_dir, tmp_path):
    """A spec and its preprocess file as received from someone else (not written by us)."""
    return received_spec(demo_dir, tmp_path)


def ran(path) -> bool:
    return (path.parent / "ran.txt").exists()


@pytest.mark.parametrize("command", [["diagnose"], ["bench", "--variants", "float32"],
                                     ["fix", "-o", "{out}.json"], ["report", "-o", "{out}.html"]])
def test_commands_that_run_it_refuse_until_trusted(received, tmp_path, capsys, command):
    args = [a.format(out=tmp_path / "out") for a in command]
    assert main([args[0], str(received), *args[1:]]) == 2
    err = capsys.readouterr().err
    assert "--trust" in err and "'fn'" in err and err.count("\n") == 1
    assert not ran(received)


def test_trust_is_asked_once_per_content(received, capsys):
    assert main(["diagnose", str(received), "--trust"]) == 0
    assert ran(received)
    assert main(["diagnose", str(received)]) == 0  # remembered
    (received.parent / "pre.py").write_text(marking() + "\n# changed\n")
    assert main(["diagnose", str(received)]) == 2  # the code changed: asked again
    assert main(["diagnose", str(received), "--trust"]) == 0
    received.write_text(received.read_text().replace("}", ', "samples": 4}'))
    assert main(["diagnose", str(received)]) == 2  # the spec changed: asked again


def test_export_never_runs_the_preprocess(received, tmp_path, capsys):
    assert main(["export", str(received), "-o", str(tmp_path / "script.py")]) == 0
    assert not ran(received)
    assert "load_preprocess()" in (tmp_path / "script.py").read_text()


def test_specs_and_sessions_written_by_the_app_are_the_users_own(received, tmp_path):
    spec = load_spec(received)
    assert trust.consent_needed(received, spec)
    saved = received.parent / "mine.json"
    save_spec(spec, saved)
    assert trust.consent_needed(saved, load_spec(saved)) is None
    session = save_session(Session(spec), tmp_path / "run.fp16studio").path
    assert trust.consent_needed(session, open_session(session).spec) is None
    assert not ran(received)


def test_a_received_session_needs_consent_and_a_spec_without_code_never(received, tmp_path):
    path = save_session(Session(load_spec(received)), tmp_path / "s.fp16studio").path
    copy = tmp_path / "from-a-colleague.fp16studio"
    copy.write_text(path.read_text().replace('"version"', '"note": 1, "version"'))
    assert trust.consent_needed(copy, open_session(copy).spec)
    trust.trust(copy, open_session(copy).spec)
    assert trust.consent_needed(copy, open_session(copy).spec) is None
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"model": "m", "dataset": "synthetic"}))
    assert trust.consent_needed(plain, load_spec(plain)) is None


def test_the_demo_folder_is_trusted(tmp_path, capsys):
    assert main(["demo", str(tmp_path / "demo")]) == 0
    spec_path = tmp_path / "demo" / "pil-preprocess.json"
    assert trust.consent_needed(spec_path, load_spec(spec_path)) is None


def _installed_file(module):
    return __import__(module, fromlist=["_"]).__file__


@pytest.mark.parametrize("preprocess", [
    "subprocess:run",                         # a module, not a file
    "os.path:join",
    "pre.py:os.system",                       # not a function name
    "pre.py:",
    "pre.txt:fn",
])
def test_preprocess_must_name_a_py_file_and_a_function(preprocess):
    with pytest.raises(InputError, match="preprocess"):
        PipelineSpec(model="m", dataset="d", preprocess=preprocess)


@pytest.mark.parametrize("module, function", [("subprocess", "run"), ("json", "loads"),
                                              ("datasets", "load_dataset")])
def test_an_installed_module_is_refused_even_when_trusted(demo_dir, tmp_path, capsys, module,
                                                          function):
    assert_library_refused(demo_dir, tmp_path, capsys, f"{_installed_file(module)}:{function}")


def assert_library_refused(demo_dir, tmp_path, capsys, preprocess):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"model": str(demo_dir / "models/tiny-resnet"),
                                "dataset": str(demo_dir / "data/images"),
                                "preprocess": preprocess}))
    assert main(["diagnose", str(path), "--trust"]) == 2
    assert "installed Python library" in capsys.readouterr().err


def test_the_issue_attack_runs_no_command(demo_dir, tmp_path):
    """subprocess.run on a row whose keys form a command line: refused, nothing executed."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"touch": "1", str(tmp_path / "pwned"): "2"}) + "\n")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"model": str(demo_dir / "models/tiny-bert"), "dataset": str(rows),
                                "preprocess": f"{subprocess.__file__}:run"}))
    for command in (["diagnose", str(path), "--trust"],
                    ["report", str(path), "-o", str(tmp_path / "r.html"), "--trust"],
                    ["export", str(path), "-o", str(tmp_path / "s.py")]):
        proc = subprocess.run([sys.executable, "-m", "fp16studio", *command],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("folder", ["lib/python3.9", "venv/lib/python3.12/site-packages/pkg",
                                    "usr/lib/python3/dist-packages"])
def test_another_pythons_library_is_refused_too(demo_dir, tmp_path, capsys, folder):
    library = tmp_path / folder
    library.mkdir(parents=True)
    (library / "subprocess.py").write_text("def run(example):\n    return example\n")
    assert_library_refused(demo_dir, tmp_path, capsys, f"{library / 'subprocess.py'}:run")


@pytest.fixture
def remote_code(demo_dir, tmp_path):
    """A received spec whose model folder carries its own code (auto_map) and says
    trust_remote_code: true; the code leaves a mark when transformers imports it."""
    import shutil

    model = tmp_path / "received" / "model"
    shutil.copytree(demo_dir / "models/tiny-bert", model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_marked.MarkedModel"}
    (model / "config.json").write_text(json.dumps(config))
    mark = model.parent / "ran.txt"  # transformers runs a copy of the code, from its own cache
    (model / "modeling_marked.py").write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n"
        "from transformers import BertForSequenceClassification\n\n\n"
        "class MarkedModel(BertForSequenceClassification):\n    pass\n")
    path = tmp_path / "received" / "spec.json"
    path.write_text(json.dumps({"model": "model", "dataset": "synthetic", "task": "sequence-classification",
                                "trust_remote_code": True}))
    return path


@pytest.mark.parametrize("command", [["diagnose"], ["drift"], ["bench", "--variants", "float32"],
                                     ["report", "-o", "{out}.html"]])
def test_a_received_spec_runs_no_model_code_without_consent(remote_code, tmp_path, capsys, command):
    args = [a.format(out=tmp_path / "out") for a in command]
    assert main([args[0], str(remote_code), *args[1:]]) == 2
    err = capsys.readouterr().err
    assert "trust_remote_code" in err and "--trust" in err and err.count("\n") == 1
    assert not ran(remote_code)


def test_consent_covers_the_model_code_and_is_asked_again_when_it_changes(remote_code, capsys):
    main(["diagnose", str(remote_code), "--trust"])
    assert ran(remote_code)
    assert trust.consent_needed(remote_code, load_spec(remote_code)) is None
    code = remote_code.parent / "model" / "modeling_marked.py"
    code.write_text(code.read_text() + "\n# changed\n")
    assert "trust_remote_code" in trust.consent_needed(remote_code, load_spec(remote_code))


def test_a_preprocess_swapped_after_consent_is_refused_not_run(received):
    """Consent is for the bytes that were read: a file changed between the question and the
    import (the model loads in between) does not run."""
    from fp16studio.core.data.user_code import load_user_function

    spec = load_spec(received)
    trust.require(received, spec, grant=True)
    (received.parent / "pre.py").write_text(marking("swapped"))
    with pytest.raises(InputError, match="changed since you agreed"):
        load_user_function(spec)
    assert not ran(received)


def test_a_preprocess_imports_its_neighbours_however_fp16studio_was_started(received, tmp_path):
    """`python -m fp16studio` has the working folder on sys.path, the `fp16studio` command does
    not: a module beside the preprocess file is found either way."""
    folder = received.parent
    (folder / "helpers.py").write_text("def same(example):\n    return example\n")
    (folder / "pre.py").write_text("from helpers import same\n\n\ndef fn(example):\n    return same(example)\n")
    # The console script's sys.path has no working folder: -I leaves it out as well.
    entry = "import sys; from fp16studio.cli import main; sys.exit(main())"
    for command in ([sys.executable, "-m", "fp16studio"], [sys.executable, "-I", "-c", entry]):
        proc = subprocess.run([*command, "diagnose", str(received), "--trust"], cwd=folder,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "FP16STUDIO_CONFIG_DIR": str(tmp_path / "config")})
        assert proc.returncode == 0, proc.stderr
