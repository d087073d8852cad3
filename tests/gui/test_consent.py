"""The window asks before a spec it did not write runs its preprocess (CONTRACT §6), once per
content; a spec with no code, or one it wrote itself, runs without a question."""

import json

import pytest

from fp16studio.core import PipelineSpec, trust
from fp16studio.gui.session_controller import SessionController


def received_spec(tmp_path):
    (tmp_path / "pre.py").write_text("def fn(example):\n    return example\n")
    path = tmp_path / "shared.json"
    path.write_text(json.dumps({"model": "m", "dataset": "synthetic", "preprocess": "pre.py:fn"}))
    return path, PipelineSpec.load(path)


@pytest.fixture
def controllers():
    made = []
    yield made
    for controller in made:
        controller.shutdown()


def controller_for(made, path, answer):
    controller = SessionController()
    made.append(controller)
    controller.session_path = path
    questions = []

    def ask(question):
        questions.append(question)
        return answer
    controller.ask_consent = ask
    return controller, questions


def test_a_received_spec_runs_nothing_until_the_user_says_so(qtbot, controllers, tmp_path):
    path, spec = received_spec(tmp_path)
    controller, questions = controller_for(controllers, path, answer=False)
    with qtbot.waitSignal(controller.diagnosisFailed):
        assert not controller._consented(spec)
    assert "pre.py" in questions[0] and trust.consent_needed(path, spec)


def test_consent_is_asked_once_per_content(qtbot, controllers, tmp_path):
    path, spec = received_spec(tmp_path)
    controller, questions = controller_for(controllers, path, answer=True)
    assert controller._consented(spec) and controller._consented(spec)
    assert len(questions) == 1
    (tmp_path / "pre.py").write_text("def fn(example):\n    return dict(example)\n")
    assert controller._consented(spec) and len(questions) == 2


def test_no_code_or_no_file_no_question(qtbot, controllers, tmp_path):
    path, spec = received_spec(tmp_path)
    controller, questions = controller_for(controllers, path, answer=False)
    assert controller._consented(spec.replace(preprocess=None))
    controller.session_path = None          # built in the form: the user's own
    assert controller._consented(spec) and not questions
