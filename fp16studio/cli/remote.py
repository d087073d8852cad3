"""`--host HOST`: the command runs on the box, through the user's own ssh, and prints here what
a run there prints: the same document, the same exit code, its lines on stderr as they come.

Paths (a spec, its model and dataset, `-o`) are the box's. `trace` sends a local script to the
box first, with its SHA-256, into ~/.cache/fp16studio/runs/<hash>/ (a run folder of its own,
checked there before anything runs), and traces that copy.

Until the box's fp16studio answers, what the connection says is held: a host ssh cannot reach,
or a box without fp16studio for that Python, is one line and exit 2, not ssh's or a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import threading
from pathlib import Path

from ..core.common.errors import InputError
from ..core.demo.pipelines import DEMO_PREFIX
from ..engine.transport import SSH_FAILED, remote_python, ssh_command
from .process import BAD_INPUT

HOST_COMMANDS = ("diagnose", "fix", "bench", "drift", "fp8", "trace", "report")
# The box's fp16studio says it is running with this line on stderr, which is not passed on.
READY = "\x1efp16studio-remote-ready"
# Run there: fp16studio's own command line, once it said it is there.
_RUN = ("import sys; import fp16studio; from fp16studio.cli import main; "
        f"print({READY!r}, fp16studio.__version__, file=sys.stderr, flush=True); "
        "sys.exit(main(sys.argv[1:]))")
# Run there to receive a script: its content on stdin, checked against its hash, written once
# (engine/remote_files.py: received, as the window's scripts are).
_RECEIVE = ("import sys; from fp16studio.engine.remote_files import received; "
            "print(received(sys.argv[1], sys.stdin.buffer.read(), sys.argv[2]))")
_NO_FP16STUDIO = "No module named 'fp16studio'"


def run_on_host(args, argv: list[str]) -> int:
    """Run `argv` (the command line less --host and --remote-python) on args.host."""
    try:
        python = remote_python(args.remote_python)
        if args.command == "trace":
            argv = _with_script_sent(args, argv, python)
        return _run(args.host, [*python, "-c", _RUN, *argv], python)
    except InputError as exc:
        print(f"fp16studio: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fp16studio: interrupted", file=sys.stderr)
        return 130


def without_host(argv: list[str]) -> list[str]:
    """The command line as the box runs it: --host and --remote-python left out (never after
    `--`, where the words are a traced script's own)."""
    out, words = [], iter(argv)
    for word in words:
        if word == "--":
            out += [word, *words]
            break
        if word in ("--host", "--remote-python"):
            next(words, None)
        elif not word.startswith(("--host=", "--remote-python=")):
            out.append(word)
    return out


def _run(host: str, remote: list[str], python: list[str]) -> int:
    stdin = subprocess.DEVNULL if sys.stdin is None or sys.stdin.isatty() else sys.stdin
    child = subprocess.Popen(ssh_command(host, remote), stdin=stdin, stdout=sys.stdout.buffer,
                             stderr=subprocess.PIPE)
    said = _HeldUntilReady(child.stderr)
    code = child.wait()
    said.join()
    if not said.ready:
        raise InputError(_why_not(host, python, code, said.held))
    return code


class _HeldUntilReady:
    """The box's stderr: held until its fp16studio says it runs, then passed on as it comes."""

    def __init__(self, stream):
        self.ready = False
        self.held: list[str] = []
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream):
        with stream:
            for raw in iter(stream.readline, b""):
                if self.ready:
                    sys.stderr.buffer.write(raw)
                    sys.stderr.flush()
                elif raw.startswith(READY.encode()):
                    self.ready = True
                else:
                    self.held.append(raw.decode("utf-8", "replace").strip())

    def join(self):
        self._thread.join(timeout=10)


def _why_not(host: str, python: list[str], code: int, held: list[str]) -> str:
    said = next((line for line in reversed(held) if line), "")
    if code == SSH_FAILED:
        return f"--host {host}: cannot connect" + (f" ({said})" if said else "")
    command = " ".join(python)
    return (f"--host {host}: no fp16studio for {command} there"
            + (f" ({said})" if said else f" (exit status {code})")
            + "; install it into that Python (docs/remote.md) or name another with "
            "--remote-python")


def _with_script_sent(args, argv: list[str], python: list[str]) -> list[str]:
    """A local script is sent to the box and traced there; a demo or a path that is not a file
    here is the box's."""
    script = args.script
    path = Path(script).expanduser()
    if script.startswith(DEMO_PREFIX) or not path.is_file():
        return argv
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    sent = subprocess.run(ssh_command(args.host, [*python, "-c", _RECEIVE, path.name, digest]),
                          input=data, capture_output=True)
    if sent.returncode != 0:
        said = sent.stderr.decode("utf-8", "replace").strip().splitlines()
        if sent.returncode == SSH_FAILED or any(_NO_FP16STUDIO in line for line in said):
            raise InputError(_why_not(args.host, python, sent.returncode, said))
        raise InputError(f"--host {args.host}: cannot send {path.name} there"
                         + (f" ({said[-1]})" if said else ""))
    there = sent.stdout.decode().strip()
    out = list(argv)
    with contextlib.suppress(ValueError):
        out[out.index(script)] = there
    return out


def cmd_remote_install(args) -> int:
    """`fp16studio remote-install HOST`: this exact version into the box's Python."""
    from ..engine.remote_install import install_on, this_wheel

    def say(line):
        print(f"fp16studio: {line}", file=sys.stderr, flush=True)

    wheel = this_wheel()
    install_on(args.target, args.remote_python, wheel, ("--no-deps",) if args.no_deps else (),
               say)
    print(f"installed fp16studio {wheel.name.split('-')[1]} into "
          f"{' '.join(remote_python(args.remote_python))} on {args.target}")
    return 0
