"""fp16studio on another machine, through the user's own `ssh` (their config, agent, keys,
ProxyJump): no port is opened on either side, and the channel carries the same frames as the
local engine's pipe.

    ssh -T HOST -- PYTHON -m fp16studio engine --stdio

`FP16STUDIO_SSH_COMMAND` (as git's GIT_SSH_COMMAND) replaces `ssh`: a program and its options,
such as `ssh -F ~/.ssh/lab_config`. Where there is no `ssh` program, asyncssh (if installed)
serves behind the same command line (remote_asyncssh.py). PYTHON is a command line for the
box's shell: `python3`, a venv's python, or `env VAR=value python3`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import uuid

from fp16studio.core.common.errors import InputError
from fp16studio.core.script.entry import frozen

SSH_ENV = "FP16STUDIO_SSH_COMMAND"
DEFAULT_REMOTE_PYTHON = "python3"
_HOME_PATH = re.compile(r"~/[\w./+-]*")
SSH_FAILED = 255   # what ssh exits with when it could not connect (the command's own code else)


def ssh_command(host: str, remote: list[str]) -> list[str]:
    """The local command that runs `remote` (its words) on `host`."""
    if not host or host.startswith("-"):
        raise InputError(f"--host {host!r}: not a host name")
    ssh = shlex.split(os.environ[SSH_ENV]) if os.environ.get(SSH_ENV) else default_ssh()
    if not ssh:
        raise InputError(f"{SSH_ENV} is empty: set it to an ssh command, or unset it")
    options = ["-T"]
    if sys.platform == "win32":
        # Win32-OpenSSH has no ControlMaster, and a ControlPath in the user's config breaks
        # every ssh.exe started after the first.
        options += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return [*ssh, *options, host, "--", " ".join(map(_quoted, remote))]


def default_ssh() -> list[str]:
    """`ssh`; where there is none (a Windows without OpenSSH, a slim container) and asyncssh is
    installed, the same interface through asyncssh (remote_asyncssh.py)."""
    from . import remote_asyncssh

    if shutil.which("ssh") is None and not frozen() and remote_asyncssh.available():
        return remote_asyncssh.command()
    return ["ssh"]


def _quoted(word: str) -> str:
    """A word for the box's shell, as is; `~/...` left for that shell to expand to the box's
    home (`--remote-python '~/venvs/train/bin/python'`)."""
    return word if _HOME_PATH.fullmatch(word) else shlex.quote(word)


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


def config_hosts(path: str | os.PathLike | None = None) -> list[str]:
    """The hosts an ssh config names (default ~/.ssh/config, and the files it Includes), in
    their order: read here, never by asking the network. Patterns (`*`, `?`, `!`) are no hosts
    to connect to and are left out."""
    import glob
    from pathlib import Path

    ssh_folder = Path.home() / ".ssh"
    hosts: list[str] = []

    def read(file: Path, depth: int):
        try:
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:   # no config yet, or one we may not read: no hosts from it
            return
        for line in lines:
            try:
                words = shlex.split(line, comments=True)
            except ValueError:   # an unbalanced quote: ssh would refuse the file too
                continue
            if not words:
                continue
            key, values = words[0].lower(), words[1:]
            if "=" in words[0]:   # `Host=name`
                key, _, first = words[0].partition("=")
                key, values = key.lower(), [first, *values] if first else values
            if key == "host":
                hosts.extend(v for v in values if not any(c in v for c in "*?!"))
            elif key == "include" and depth < 8:
                for pattern in values:
                    pattern = os.path.expanduser(pattern)
                    if not os.path.isabs(pattern):
                        pattern = str(ssh_folder / pattern)
                    for found in sorted(glob.glob(pattern)):
                        read(Path(found), depth + 1)

    read(Path(path) if path is not None else ssh_folder / "config", 0)
    return list(dict.fromkeys(hosts))
