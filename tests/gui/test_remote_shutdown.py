"""A window closed while a job runs on a box ends that job's engine there: it outlives its link
by design (a dropped link loses nothing), so without a word it would stay a day, holding its
model. The box here is this machine under a home of its own, its engine the detached one
(`engine --attach`) that ssh starts there."""

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import engine_jobs as work

from fp16studio.engine.client import local_engine
from fp16studio.gui.worker import Job, WorkerHost

WAIT_S = 120   # how long the test waits for what it expects (never an assert on time)


def detached_engine(home: Path):
    """ssh_detached_engine without ssh: each start an engine that outlives its connection."""
    _, env = local_engine()
    env["HOME"] = str(home)

    def start():
        attach = [sys.executable, "-m", "fp16studio", "engine", "--attach", uuid.uuid4().hex[:16]]
        return attach, env, lambda n: ([*attach, "--from", str(n)], env)
    return start


def gone(pid: int) -> bool:
    try:   # a zombie (no init reaps it in a container) is gone too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_a_window_closed_mid_job_ends_the_job_s_engine_on_the_box(qtbot, tmp_path):
    host = WorkerHost()
    host.engine.use(detached_engine(tmp_path))
    with qtbot.waitSignal(host.jobProgress, timeout=WAIT_S * 1000,
                          check_params_cb=lambda job, stage, message: stage == "model"):
        host.submit(Job("diagnose", work.wait_for_cancel))
    pid = int(next(tmp_path.glob(".cache/fp16studio/runs/*/pid")).read_text())
    try:
        assert host.shutdown(5000)
        deadline = time.monotonic() + WAIT_S
        while not gone(pid):
            assert time.monotonic() < deadline, "the box's engine is still there"
            time.sleep(0.1)
    finally:
        if not gone(pid):   # the box goes: its engine with it
            os.kill(pid, signal.SIGTERM)
