"""The window asks before a spec it did not write runs its preprocess (CONTRACT §6), once per
content; a spec with no code, or one it wrote itself, runs without a question.

Driven through the public surface (Run, Benchmark, Compare with float32): what is checked is
whether a job reaches the worker, not what a helper returns. The jobs are caught, not run."""

import json

import pytest

from fp16studio.gui import MainWindow
from fp16studio.session_state import NO_MODEL

OPEN_TIMEOUT_MS = 120_000
RUNS = {"run_diagnosis": "diagnose", "run_benchmark": "bench", "compare_with_float32": "drift"}


def received_spec(tmp_path, preprocess="pre.py:fn"):
    """A spec file from elsewhere (not written by fp16studio) whose preprocess is a .py file."""
    (tmp_path / "pre.py").write_text("def fn(example):\n    return example\n")
    path = tmp_path / "shared.json"
    spec = {"model": "m", "dataset": "synthetic"}
    if preprocess:
        spec["preprocess"] = preprocess
    path.write_text(json.dumps(spec))
    return path


def open_window(qtbot, monkeypatch, spec, answer):
    """The window on `spec`, the user answering `answer`; returns it with the questions asked
    and the run jobs submitted to the worker (caught: nothing runs)."""
    window = MainWindow(str(spec) if not isinstance(spec, dict) else spec)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.spec is not None, timeout=OPEN_TIMEOUT_MS)
    questions, submitted = [], []

    def ask(question):
        questions.append(question)
        return answer
    window.controller.ask_consent = ask

    def submit(job):
        if job.kind in RUNS.values():
            submitted.append(job.kind)
        return job
    monkeypatch.setattr(window.worker, "submit", submit)
    return window, questions, submitted


@pytest.mark.parametrize("action", sorted(RUNS))
def test_declined_nothing_runs(qtbot, monkeypatch, tmp_path, action):
    window, questions, submitted = open_window(qtbot, monkeypatch, received_spec(tmp_path), False)
    with qtbot.waitSignal(window.diagnosisFailed) as failed:
        assert getattr(window, action)() is False
    assert submitted == []
    assert len(questions) == 1 and "pre.py" in questions[0] and "'fn'" in questions[0]
    assert "not trusted" in failed.args[0]


@pytest.mark.parametrize("action", sorted(RUNS))
def test_accepted_it_runs_and_is_not_asked_again(qtbot, monkeypatch, tmp_path, action):
    window, questions, submitted = open_window(qtbot, monkeypatch, received_spec(tmp_path), True)
    assert getattr(window, action)() is True
    assert submitted == [RUNS[action]] and len(questions) == 1
    assert getattr(window, action)() is True           # trusted now: no second question
    assert submitted == [RUNS[action]] * 2 and len(questions) == 1


def test_a_changed_preprocess_file_is_asked_about_again(qtbot, monkeypatch, tmp_path):
    window, questions, submitted = open_window(qtbot, monkeypatch, received_spec(tmp_path), True)
    assert window.run_diagnosis() and window.run_diagnosis()
    assert len(questions) == 1
    (tmp_path / "pre.py").write_text("def fn(example):\n    return dict(example)\n")
    window.controller.ask_consent = lambda question: questions.append(question) or False
    assert not window.run_diagnosis()
    assert len(questions) == 2 and submitted == ["diagnose"] * 2


def test_no_code_or_no_file_no_question(qtbot, monkeypatch, tmp_path):
    # A spec file without a preprocess runs nothing of the user's: nothing to ask.
    window, questions, submitted = open_window(
        qtbot, monkeypatch, received_spec(tmp_path, preprocess=None), False)
    assert window.run_diagnosis() and submitted == ["diagnose"] and not questions
    # A spec built here (the form, the Python API) is the user's own.
    received_spec(tmp_path)
    window, questions, submitted = open_window(
        qtbot, monkeypatch, {"model": "m", "dataset": "synthetic",
                             "preprocess": str(tmp_path / "pre.py") + ":fn"}, False)
    assert window.run_benchmark() and submitted == ["bench"] and not questions


def test_a_blank_pipeline_is_not_asked_about_but_told_what_is_missing(qtbot, monkeypatch, tmp_path):
    window, questions, submitted = open_window(qtbot, monkeypatch, received_spec(tmp_path), True)
    window.controller.new_pipeline()
    with qtbot.waitSignal(window.diagnosisFailed) as failed:
        assert not window.run_diagnosis()
    assert failed.args == [NO_MODEL] and not questions and not submitted
