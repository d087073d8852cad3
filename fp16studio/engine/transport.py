"""fp16studio on another machine, through the user's own `ssh` (their config, agent, keys,
ProxyJump): no port is opened on either side, and the channel carries the same frames as the
local engine's pipe.

    ssh -T HOST -- PYTHON -m fp16studio engine --stdio

`FP16STUDIO_SSH_COMMAND` (as git's GIT_SSH_COMMAND) replaces `ssh`: a program and its options,
such as `ssh -F ~/.ssh/lab_config`. PYTHON is a command line for the box's shell: `python3`, a
venv's python, or `env VAR=value python3`.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid

from fp16studio.core.common.errors import InputError

SSH_ENV = "FP16STUDIO_SSH_COMMAND"
DEFAULT_REMOTE_PYTHON = "python3"
SSH_FAILED = 255   # what ssh exits with when it could not connect (the command's own code else)


def ssh_command(host: str, remote: list[str]) -> list[str]:
    """The local command that runs `remote` (its words) on `host`."""
    if not host or host.startswith("-"):
        raise InputError(f"--host {host!r}: not a host name")
    ssh = shlex.split(os.environ.get(SSH_ENV) or "ssh")
    if not ssh:
        raise InputError(f"{SSH_ENV} is empty: set it to an ssh command, or unset it")
    options = ["-T"]
    if sys.platform == "win32":
        # Win32-OpenSSH has no ControlMaster, and a ControlPath in the user's config breaks
        # every ssh.exe started after the first.
        options += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return [*ssh, *options, host, "--", " ".join(shlex.quote(word) for word in remote)]


def remote_python(python: str | None) -> list[str]:
    """The box's Python as words of a command line (`--remote-python`)."""
    words = shlex.split(python or DEFAULT_REMOTE_PYTHON)
    if not words:
        raise InputError("--remote-python: empty")
    return words


def ssh_engine(host: str, python: str | None = None) -> tuple[list[str], dict]:
    """(command, environment) of an engine on `host`, for EngineClient."""
    command = ssh_command(host, [*remote_python(python), "-m", "fp16studio", "engine", "--stdio"])
    return command, dict(os.environ)


def ssh_detached_engine(host: str, python: str | None = None):
    """For EngineClient: each start, an engine on `host` that outlives its connection (a new
    run id), and how to attach to it again from its nth event."""
    def start():
        run_id = uuid.uuid4().hex[:16]
        engine = [*remote_python(python), "-m", "fp16studio", "engine", "--attach", run_id]
        return (ssh_command(host, engine), dict(os.environ),
                lambda n: (ssh_command(host, [*engine, "--from", str(n)]), dict(os.environ)))
    return start
