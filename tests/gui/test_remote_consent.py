"""A script the window traces on a box is asked about with its digest, read on the box by the
engine there (the engine here stands in for the box's: tests/gui/test_remote_window.py goes
through sshd for a spec's preprocess); declined, nothing is traced."""

import hashlib

from fp16studio.gui.session_controller import SessionController

from tests.received_code import marking

TIMEOUT_MS = 60_000


def test_a_trace_on_the_box_is_asked_about_with_the_digest_read_there(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    script = tmp_path / "train.py"
    script.write_text(marking())
    controller = SessionController()
    controller.engine_host = "box"
    questions, traces = [], []
    controller.ask_consent = lambda question: questions.append(question) or False
    controller.worker.jobStarted.connect(lambda job: job.kind == "trace" and traces.append(job))
    try:
        with qtbot.waitSignal(controller.diagnosisFailed, timeout=TIMEOUT_MS) as failed:
            assert controller.run_trace(str(script), ("--epochs", "1"))
        assert failed.args == ["Not run: the script on the box was not trusted."]
        digest = hashlib.sha256(script.read_bytes()).hexdigest()
        assert questions == [f"On box: the script {script} (SHA-256 {digest[:16]}…)"]
        assert not traces and not controller.worker.pending("trace")
        assert not (tmp_path / "ran.txt").exists()
    finally:
        controller.shutdown()
