"""Consent covers the code where the engine runs (CONTRACT §6, issue 41): the engine reads and
digests what a run would execute (a spec's preprocess, a script to trace), the window asks with
those digests and pins them, and a file changed after the reading is refused in one line, never
run. Here the engine is this machine's; tests/gui/test_remote_consent.py goes through sshd."""

import pytest

from fp16studio.core import CancelToken
from fp16studio.core.spec import trust
from fp16studio.core.spec.documents import load_spec
from fp16studio.engine import messages as m
from fp16studio.engine.client import EngineClient
from fp16studio.engine.code_to_run import SCRIPT_CODE_TASK, SPEC_CODE_TASK
from fp16studio.session_state import SessionState

from tests.received_code import marking, received_spec


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    trust.agree(())


@pytest.fixture(scope="module")
def engine():
    client = EngineClient()
    yield client
    client.close()


def ask(engine, task, *args):
    ending = engine.run(task, args, {}, CancelToken(), lambda event: None)
    assert isinstance(ending, m.Result), ending
    return ending.value


def test_a_script_changed_after_its_reading_was_agreed_to_is_refused_not_run(engine, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(marking("agreed"))
    reading = ask(engine, SCRIPT_CODE_TASK, str(script))
    questions = []
    assert trust.consent_to(reading, lambda question: questions.append(question) or True)[0]
    assert str(script) in questions[0] and "SHA-256 " in questions[0]
    script.write_text(marking("swapped"))   # changed where it runs, after the answer
    ending = engine.run("trace", (str(script), ()), {}, CancelToken(), lambda event: None)
    assert isinstance(ending, m.Failed) and not ending.detail and "\n" not in ending.message
    assert ending.message == (f"script {script}: changed since you agreed to run it; run again "
                              "to be asked about its new content")
    assert not (tmp_path / "ran.txt").exists()
    # The same content read again is trusted now: no second question.
    script.write_text(marking("agreed"))
    assert trust.consent_to(ask(engine, SCRIPT_CODE_TASK, str(script)), lambda q: False) == (True, None)


def test_a_spec_s_code_read_by_the_engine_is_what_is_asked_about_and_pinned(engine, demo_dir, tmp_path):
    path = received_spec(demo_dir, tmp_path, "agreed")
    state = SessionState()
    state.start(load_spec(path), path=path)
    reading = ask(engine, SPEC_CODE_TASK, str(path), state.spec)
    assert reading == trust.read_code(path, state.spec)   # one reading, wherever it is made
    questions = []
    consent = state.consent(state.spec, lambda question: questions.append(question) or True, reading)
    assert consent.granted and questions == [reading.question]
    assert isinstance(diagnose(engine, state), m.Result)   # what was agreed to runs
    assert (path.parent / "ran.txt").read_text() == "agreed"
    (path.parent / "ran.txt").unlink()
    (path.parent / "pre.py").write_text(marking("swapped"))
    ending = diagnose(engine, state)
    assert isinstance(ending, m.Failed) and "changed since you agreed" in ending.message
    assert not (path.parent / "ran.txt").exists()


def diagnose(engine, state):
    return engine.run("diagnose", (state.spec,), {}, CancelToken(), lambda event: None)
