"""No code runs without consent (CONTRACT §6): a spec or session the user did not write runs its
preprocess only once trusted, for that content; export never runs it; preprocess is never an
installed module."""

import json
import subprocess
import sys

import pytest

from fp16studio.cli import main
from fp16studio.core import InputError, PipelineSpec, trust
from fp16studio.core.session import Session, open_session, save_session

# A preprocess that leaves a mark when its file is executed: proof that code ran.
MARKING = ("import pathlib\n"
           "pathlib.Path(__file__).with_name('ran.txt').write_text('ran')\n\n\n"
           "def fn(example):\n    return example\n")


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def received(demo_dir, tmp_path):
    """A spec and its preprocess file as received from someone else (not written by us)."""
    folder = tmp_path / "received"
    folder.mkdir()
    (folder / "pre.py").write_text(MARKING)
    path = folder / "spec.json"
    path.write_text(json.dumps({"model": str(demo_dir / "models/tiny-resnet"),
                                "dataset": str(demo_dir / "data/images"),
                                "preprocess": "pre.py:fn"}))
    return path


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
    (received.parent / "pre.py").write_text(MARKING + "\n# changed\n")
    assert main(["diagnose", str(received)]) == 2  # the code changed: asked again
    assert main(["diagnose", str(received), "--trust"]) == 0
    received.write_text(received.read_text().replace("}", ', "samples": 4}'))
    assert main(["diagnose", str(received)]) == 2  # the spec changed: asked again


def test_export_never_runs_the_preprocess(received, tmp_path, capsys):
    assert main(["export", str(received), "-o", str(tmp_path / "script.py")]) == 0
    assert not ran(received)
    assert "load_preprocess()" in (tmp_path / "script.py").read_text()


def test_specs_and_sessions_written_by_the_app_are_the_users_own(received, tmp_path):
    spec = PipelineSpec.load(received)
    assert trust.consent_needed(received, spec)
    saved = received.parent / "mine.json"
    spec.save(saved)
    assert trust.consent_needed(saved, PipelineSpec.load(saved)) is None
    session = save_session(Session(spec), tmp_path / "run.fp16studio").path
    assert trust.consent_needed(session, open_session(session).spec) is None
    assert not ran(received)


def test_a_received_session_needs_consent_and_a_spec_without_code_never(received, tmp_path):
    path = save_session(Session(PipelineSpec.load(received)), tmp_path / "s.fp16studio").path
    copy = tmp_path / "from-a-colleague.fp16studio"
    copy.write_text(path.read_text().replace('"version"', '"note": 1, "version"'))
    assert trust.consent_needed(copy, open_session(copy).spec)
    trust.trust(copy, open_session(copy).spec)
    assert trust.consent_needed(copy, open_session(copy).spec) is None
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"model": "m", "dataset": "synthetic"}))
    assert trust.consent_needed(plain, PipelineSpec.load(plain)) is None


def test_the_demo_folder_is_trusted(tmp_path, capsys):
    assert main(["demo", str(tmp_path / "demo")]) == 0
    spec_path = tmp_path / "demo" / "pil-preprocess.json"
    assert trust.consent_needed(spec_path, PipelineSpec.load(spec_path)) is None


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
