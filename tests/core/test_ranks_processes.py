"""core.common.processes, which the launcher's ranks, a traced script and the detached engine
share: a zombie is over, a group is signalled whole."""

import signal
import subprocess
import sys
import time

from fp16studio.core.common.processes import process_alive, signal_group

SLEEP = [sys.executable, "-c", "import subprocess, sys, time; "
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"]


def test_a_running_process_is_alive_and_an_unreaped_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)   # ended, not yet reaped: a zombie
    assert not process_alive(child.pid)
    child.wait()
    assert not process_alive(child.pid) and not process_alive(None)
    running = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        assert process_alive(running.pid)
    finally:
        signal_group(running.pid, signal.SIGKILL)
        running.wait()


def test_signalling_a_group_ends_the_helpers_it_started_and_a_gone_one_is_quiet():
    leader = subprocess.Popen(SLEEP, start_new_session=True)
    while len(subprocess.run(["pgrep", "-g", str(leader.pid)], capture_output=True,
                             text=True).stdout.split()) < 2:
        time.sleep(0.05)   # the leader and its helper
    signal_group(leader.pid, signal.SIGKILL)
    leader.wait()
    for _ in range(200):   # the helper, reaped by init once killed
        if not _group_left(leader.pid):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the helper outlived its group's SIGKILL")
    signal_group(leader.pid, signal.SIGKILL)   # gone: no error


def _group_left(group: int) -> bool:
    return subprocess.run(["pgrep", "-g", str(group)], capture_output=True).returncode == 0
