"""A run's engine that outlives its connection ends when no attach comes back (the idle bound,
FP16STUDIO_DETACHED_IDLE_S), and not while one is there."""

import os
import subprocess
import sys
import time
from pathlib import Path

WAIT_S = 120   # how long the test waits for what it expects (never an assert on time)


def gone(pid: int) -> bool:
    try:   # a zombie (no init reaps it in a container) is gone too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def wait_for(condition):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.1)


def test_an_engine_no_attach_comes_back_to_ends_once_idle(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), FP16STUDIO_DETACHED_IDLE_S="1")
    attach = subprocess.Popen([sys.executable, "-m", "fp16studio", "engine", "--attach", "r1"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env)
    try:
        pid_file = tmp_path / ".cache/fp16studio/runs/r1/pid"
        wait_for(pid_file.is_file)
        pid = int(pid_file.read_text())
        time.sleep(3)   # three idle bounds with its attach there: it stays
        assert not gone(pid)
    finally:
        attach.kill()   # the link drops, and no attach comes back
        attach.wait()
    wait_for(lambda: gone(pid))
