"""A real OpenSSH server on 127.0.0.1, for fp16studio on another machine (the tests' `box`
fixture, benchmarks/remote_first_progress.py).

`running_box(folder)` starts `sshd -D` on a free loopback port (never another address) with a
host key and a client key made for it, and gives an ssh config whose host `box` reaches it; the
box's fp16studio is this checkout (its Python, its import path, a home folder of its own).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parents[1]


class NoSshd(RuntimeError):
    """OpenSSH is not installed, or sshd did not start."""


@dataclass
class Box:
    ssh_command: str     # FP16STUDIO_SSH_COMMAND: ssh with the box's config
    python: str          # --remote-python: this checkout's fp16studio there
    home: Path           # the box's home folder for fp16studio (runs/, the config)

    def env(self, **more) -> dict:
        return dict(os.environ, FP16STUDIO_SSH_COMMAND=self.ssh_command, **more)


def _sshd() -> str:
    found = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)), None)
    if found is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        raise NoSshd("OpenSSH is needed (sshd, ssh, ssh-keygen): "
                     "apt-get install openssh-server openssh-client (.ci/run does)")
    return os.path.abspath(found)   # sshd re-executes itself: an absolute path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_box(folder: Path):
    sshd = _sshd()
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)],
                       check=True)
    (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
    user, port = getpass.getuser(), _free_port()
    (folder / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {folder}/host_key
PidFile {folder}/sshd.pid
AuthorizedKeysFile {folder}/authorized_keys
AllowUsers {user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
""")
    host_key = (folder / "host_key.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (folder / "ssh_config").write_text(f"""\
Host box
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {folder}/client_key
    IdentitiesOnly yes
    UserKnownHostsFile {folder}/known_hosts
    StrictHostKeyChecking yes
    BatchMode yes
    LogLevel ERROR
""")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)   # its privilege separation folder
    log = open(folder / "sshd.log", "wb")
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(folder / "sshd_config")],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise NoSshd(f"sshd did not start: {(folder / 'sshd.log').read_text()}")
                time.sleep(0.1)
        home = folder / "home"
        home.mkdir()
        path = os.pathsep.join([str(REPO), str(REPO / "tests")])
        yield Box(ssh_command=f"ssh -F {folder / 'ssh_config'}",
                  python=f"env PYTHONPATH={path} HOME={home} {sys.executable}", home=home)
    finally:
        server.terminate()
        server.wait(10)
        log.close()
        _end_detached_engines(folder / "home")


def _end_detached_engines(home: Path):
    """The box's detached engines (`engine --attach`) outlive their link by design, for a day
    while idle: a window closed mid-job leaves one. The box goes: they go with it."""
    import signal

    from fp16studio.core.common.processes import process_alive

    for pid_file in home.glob(".cache/fp16studio/runs/*/pid"):
        pid = int(pid_file.read_text())
        if process_alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
