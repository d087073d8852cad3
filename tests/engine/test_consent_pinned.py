"""The window's consent covers the bytes the user was asked about (issue 22, CONTRACT §6): the
engine process runs exactly that preprocess content. A file swapped while the question is open,
or after the answer and before the run reads it (the model loads in between), is refused with a
clear line, never run; and the swapped content is not trusted by the answer given to the other."""


import pytest

from fp16studio.core import CancelToken
from fp16studio.core.spec import trust
from fp16studio.core.spec.documents import load_spec
from fp16studio.engine import messages as m
from fp16studio.engine.client import EngineClient
from fp16studio.session_state import SessionState

from tests.received_code import marking, received_spec


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def received(demo_dir, tmp_path):
    """A spec and its preprocess as received from someone else, opened in the window."""
    path = received_spec(demo_dir, tmp_path, "agreed")
    state = SessionState()
    state.start(load_spec(path), path=path)
    return state


@pytest.fixture(scope="module")
def engine():
    client = EngineClient()   # one engine process for the tests, as a window keeps one
    yield client
    client.close()


def swap(state):
    (state.path.parent / "pre.py").write_text(marking("swapped"))


def ran(state):
    marker = state.path.parent / "ran.txt"
    return marker.read_text() if marker.exists() else None


def diagnose(engine, state):
    return engine.run("diagnose", (state.spec,), {}, CancelToken(), lambda event: None)


def test_swapped_after_the_answer_it_is_refused_not_run(engine, received):
    assert received.consent(received.spec, lambda question: True).granted
    swap(received)
    ending = diagnose(engine, received)
    assert isinstance(ending, m.Failed) and not ending.detail
    assert "changed since you agreed" in ending.message and "pre.py" in ending.message
    assert ran(received) is None


def test_swapped_while_the_question_is_open_it_is_refused_and_not_trusted(engine, received):
    def answer(question):
        swap(received)          # the user reads the question; the file changes meanwhile
        return True
    assert received.consent(received.spec, answer).granted
    ending = diagnose(engine, received)
    assert isinstance(ending, m.Failed) and "changed since you agreed" in ending.message
    assert ran(received) is None
    # The yes was for the content asked about: the swapped one is asked about on its own.
    assert trust.consent_needed(received.path, received.spec)


def test_the_content_agreed_to_runs(engine, received):
    assert received.consent(received.spec, lambda question: True).granted
    assert isinstance(diagnose(engine, received), m.Result)
    assert ran(received) == "agreed"
