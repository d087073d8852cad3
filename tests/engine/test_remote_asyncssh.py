"""Where there is no `ssh` program, asyncssh serves behind the same interface (the optional
extra `fp16studio[asyncssh]`; skipped where it is not installed): the window's engine on the box
through the real sshd on loopback, and a host that cannot be reached said as ssh's failure."""

import shlex
import shutil
import sys

import pytest

from fp16studio import __version__
from fp16studio.core import CancelToken
from fp16studio.engine import messages as m
from fp16studio.engine import transport
from fp16studio.engine.client import EngineClient
from fp16studio.gui.connect_dialog import REPORT_TASK, probe_outcome

pytest.importorskip("asyncssh")
BRIDGE = [sys.executable, "-m", "fp16studio.engine.remote_asyncssh"]


def report(host, python):
    client = EngineClient(engine=transport.ssh_engine(host, python))
    try:
        return client.run(REPORT_TASK, (), {}, CancelToken(), lambda event: None)
    finally:
        client.close(grace_s=5)


def test_without_an_ssh_program_the_engine_on_the_box_runs_through_asyncssh(box, monkeypatch):
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "ssh" else which(name, *a, **k))
    monkeypatch.delenv(transport.SSH_ENV, raising=False)
    assert transport.ssh_command("box", ["true"])[:4] == [*BRIDGE, "-T"]
    # The box's ssh config (`ssh -F CONFIG`), read by asyncssh.
    config = shlex.split(box.ssh_command)[-1]
    monkeypatch.setenv(transport.SSH_ENV, shlex.join([*BRIDGE, "-F", config]))
    ending = report("box", box.python)
    assert isinstance(ending, m.Result) and ending.value["fp16studio"] == __version__
    line, offer = probe_outcome("nosuchhost.invalid", "python3", report("nosuchhost.invalid", "python3"))
    assert line.startswith("nosuchhost.invalid: cannot connect (ssh: nosuchhost.invalid: ")
    assert not offer and "\n" not in line
