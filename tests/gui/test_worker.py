"""The worker thread: results, progress, errors and cancel arrive as signals on the GUI thread."""

import threading

import pytest

from fp16studio.core import InputError
from fp16studio.gui.worker import Job, WorkerHost


@pytest.fixture
def host(qtbot):
    host = WorkerHost()
    yield host
    assert host.shutdown(5000)


def test_result_and_progress_arrive_on_the_gui_thread(qtbot, host):
    seen = []

    def work(n, progress, cancel):
        progress("model", "loading")
        progress("forward", "")
        return {"bytes": 2**40 + n, "thread": threading.current_thread().name}

    host.jobProgress.connect(lambda job, stage, message: seen.append((stage, message)))
    results = []
    with qtbot.waitSignal(host.jobDone) as done:
        job = host.submit(Job("diagnose", work, (1,), on_result=results.append))
    assert done.args == [job, "finished"]
    assert seen == [("model", "loading"), ("forward", "")]
    assert results[0]["bytes"] == 2**40 + 1          # no 32-bit truncation on the way
    assert results[0]["thread"] != threading.current_thread().name
    assert host.pending() == []


def test_input_error_is_a_message_without_traceback(qtbot, host):
    def work(progress, cancel):
        raise InputError("model 'nope': no such folder")

    errors = []
    with qtbot.waitSignal(host.jobDone):
        host.submit(Job("diagnose", work, on_error=lambda m, d: errors.append((m, d))))
    assert errors == [("model 'nope': no such folder", "")]


def test_a_crash_in_the_engine_is_reported_not_raised(qtbot, host):
    def work(progress, cancel):
        raise RuntimeError("boom")

    with qtbot.waitSignal(host.jobFailed) as failed:
        host.submit(Job("diagnose", work))
    message, detail = failed.args[1:]
    assert message == "RuntimeError: boom"
    assert "Traceback" in detail and "boom" in detail


def test_cancel_stops_a_running_job(qtbot, host):
    started = threading.Event()
    release = threading.Event()

    def work(progress, cancel):
        started.set()
        progress("model", "loading")
        release.wait(10)
        cancel.check()            # the engine checks between steps
        return "not reached"

    def on_progress(job, stage, message):
        job.token.cancel()
        release.set()

    host.jobProgress.connect(on_progress)
    results, cancelled = [], []
    with qtbot.waitSignal(host.jobDone) as done:
        host.submit(Job("diagnose", work, on_result=results.append,
                        on_cancel=lambda: cancelled.append(True)))
    assert done.args[1] == "cancelled" and cancelled == [True] and results == []


def test_a_result_that_arrives_after_cancel_is_discarded(qtbot, host):
    release = threading.Event()

    def work(progress, cancel):
        progress("model", "")
        release.wait(10)
        return "late"             # a step that cannot stop, e.g. from_pretrained

    def on_progress(job, stage, message):
        host.cancel("diagnose")
        release.set()

    host.jobProgress.connect(on_progress)
    results = []
    with qtbot.waitSignal(host.jobDone) as done:
        host.submit(Job("diagnose", work, on_result=results.append))
    assert done.args[1] == "cancelled" and results == []


def test_jobs_run_in_order_and_helpers_take_no_progress(qtbot, host):
    order = []
    host.submit(Job("cache", lambda: order.append("cache"), wants_progress=False))
    with qtbot.waitSignal(host.jobDone, check_params_cb=lambda job, outcome: job.kind == "diagnose"):
        host.submit(Job("diagnose", lambda progress, cancel: order.append("diagnose")))
    assert order == ["cache", "diagnose"]
