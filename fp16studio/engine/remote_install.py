"""This exact fp16studio onto a box, in one step, through the user's ssh.

The wheel of the running version (built here with `pip wheel --no-deps` from the source this
program runs from, or one already built for it) is sent over the ssh channel with its SHA-256,
checked and kept in the box's ~/.cache/fp16studio/wheels/, then installed there into the chosen
Python with `pip install`: its dependencies come from the box's own index, and torch is left as
the box has it when it satisfies the range (a user's CUDA build of torch does).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from fp16studio import __version__
from fp16studio.core.common.errors import InputError
from .transport import SSH_FAILED, remote_python, ssh_command

# Run there: the wheel on stdin, checked against its hash, kept under its own name.
_RECEIVE = """\
import hashlib, os, sys
from pathlib import Path
name, digest = sys.argv[1:3]
data = sys.stdin.buffer.read()
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit("the wheel arrived damaged (its SHA-256 differs)")
folder = Path.home() / ".cache" / "fp16studio" / "wheels"
folder.mkdir(parents=True, exist_ok=True)
part = folder / (name + ".part")
part.write_bytes(data)
os.replace(part, folder / name)
print(folder / name)
"""


def this_wheel(folder: Path | None = None) -> Path:
    """The wheel of the running fp16studio: built now from the source this program runs from
    (no network: `--no-deps --no-build-isolation`), or, for an installed one, a wheel of its
    version put in ~/.cache/fp16studio/wheels/."""
    folder = folder or Path.home() / ".cache" / "fp16studio" / "wheels"
    pattern = f"fp16studio-{__version__}-*.whl"
    source = Path(__file__).resolve().parents[2]
    if not (source / "pyproject.toml").is_file():
        built = sorted(folder.glob(pattern))
        if not built:
            raise InputError(f"no wheel of fp16studio {__version__} in {folder}, and no source "
                             "to build one from: put the wheel there")
        return built[-1]
    for old in folder.glob(pattern):   # the source may have changed since: built afresh
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(folder), str(source)],
                          capture_output=True, text=True)
    built = sorted(folder.glob(pattern))
    if done.returncode != 0 or not built:
        said = (done.stderr.strip().splitlines() or ["no wheel came out"])[-1]
        raise InputError(f"cannot build the wheel of fp16studio {__version__}: {said}")
    return built[-1]


def install_on(host: str, python: str | None, wheel: Path, pip_options=(), say=print) -> None:
    """Send `wheel` to `host` and pip-install it into `python` there; InputError (one line)
    when that cannot be done."""
    words = remote_python(python)
    data = wheel.read_bytes()
    say(f"sending {wheel.name} ({len(data) // 1024} KiB) to {host}…")
    sent = subprocess.run(ssh_command(host, [*words, "-c", _RECEIVE, wheel.name,
                                             hashlib.sha256(data).hexdigest()]),
                          input=data, capture_output=True)
    if sent.returncode != 0:
        raise InputError(_why(host, "cannot send the wheel there", sent))
    there = sent.stdout.decode().strip()
    say(f"installing it into {' '.join(words)} there (its dependencies from the box's index)…")
    done = subprocess.run(ssh_command(host, [*words, "-m", "pip", "install", "-q",
                                             "--disable-pip-version-check", *pip_options, there]),
                          capture_output=True)
    if done.returncode != 0:
        raise InputError(_why(host, f"pip could not install fp16studio {__version__} there",
                              done))


def _why(host: str, what: str, done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    said = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if done.returncode == SSH_FAILED:
        what = "cannot connect"
    return f"{host}: {what}" + (f" ({said})" if said else f" (exit status {done.returncode})")
