"""An engine that outlives its connection: what runs on a box goes on when the link drops.

    fp16studio engine --attach ID --from N

The first attach of run ID starts its engine in a session of its own (`setsid`): the same
`server.serve`, reading commands from the FIFO ~/.cache/fp16studio/runs/ID/commands and
appending every event, one frame's JSON a line, to runs/ID/events.jsonl. Each attach relays
the frames of its stdin into the FIFO, replays the journal from line N onto its stdout as
frames, then follows it until the engine has ended. A dropped ssh connection ends only the
attach; the client attaches again from the last event it got (client.EngineClient).

An engine no attach comes back to ends once it has been idle (no job under way) and alone for
FP16STUDIO_DETACHED_IDLE_S seconds (default a day): each attach marks runs/ID/attached while it
is there. Its journal stays, for an attach that comes later to replay.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from fp16studio.core.common.errors import InputError
from fp16studio.core.common.frames import HEADER_SIZE, encode_frame, frame_of, read_frame
from fp16studio.core.common.processes import process_alive
from fp16studio.core.script.entry import frozen

FOLLOW_S = 0.05   # how often a follower looks for the journal's next line
IDLE_ENV = "FP16STUDIO_DETACHED_IDLE_S"
IDLE_S = 24 * 3600   # a run's engine that no attach came back to for this long, idle, ends
HEARTBEAT_S = 30.0   # how often an attach says it is there (the mtime of runs/ID/attached)
ENDING_LINES = tuple(b'{"$":"%s"' % name.encode() for name in ("Result", "Failed", "Cancelled"))
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def run_folder(run_id: str) -> Path:
    if not _ID.fullmatch(run_id):
        raise InputError(f"--attach {run_id!r}: not a run id (letters, digits, - and _)")
    return Path.home() / ".cache" / "fp16studio" / "runs" / run_id


def serve_run(run_id: str) -> int:
    """The detached engine of run ID (`engine --serve-run ID`)."""
    from .server import serve

    folder = run_folder(run_id)
    # Read and write: the FIFO never reads as ended while no attach writes to it.
    commands = os.fdopen(os.open(folder / "commands", os.O_RDWR), "rb")
    threading.Thread(target=_end_when_forgotten, args=(folder, _idle_s()), daemon=True,
                     name="fp16studio-idle-bound").start()
    with open(folder / "events.jsonl", "ab") as journal:
        serve(commands, _JournalLines(journal))
    return 0


def _idle_s() -> float:
    try:
        return max(1.0, float(os.environ.get(IDLE_ENV) or IDLE_S))
    except ValueError:
        return IDLE_S


def _end_when_forgotten(folder: Path, idle_s: float):
    """End this engine once no attach has been there for `idle_s` and no job is under way (its
    journal's last event ends a job, or there is none): a window that never came back would
    otherwise leave it, and the model it holds, on the box for good. What it journaled stays."""
    while True:
        time.sleep(min(60.0, idle_s / 4))
        seen = max(_mtime(folder / "attached"), _mtime(folder / "events.jsonl"))
        if time.time() - seen >= idle_s and not _mid_job(folder / "events.jsonl"):
            os._exit(0)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _mid_job(journal: Path) -> bool:
    """The journal's last event is not a job's end (a job runs, or waits in a step)."""
    with open(journal, "rb") as file:
        file.seek(max(0, file.seek(0, os.SEEK_END) - 4096))
        lines = file.read().splitlines()
    return bool(lines) and not lines[-1].startswith(ENDING_LINES)


class _JournalLines:
    """A binary stream for FrameWriter that appends each frame's JSON as one line."""

    def __init__(self, file):
        self._file = file

    def write(self, frame: bytes):
        self._file.write(frame[HEADER_SIZE:] + b"\n")

    def flush(self):
        self._file.flush()

    def close(self):
        self._file.close()


def attach(run_id: str, start_at: int) -> int:
    """Relay stdin into run ID's engine (started here if it is not yet) and its journal from
    line `start_at` onto stdout, until the engine has ended."""
    folder = run_folder(run_id)
    engine = None
    if not (folder / "commands").exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "events.jsonl").touch()
        os.mkfifo(folder / "commands")
        with open(folder / "stderr.log", "ab") as log:
            program = [sys.executable] if frozen() else [sys.executable, "-m", "fp16studio"]
            engine = subprocess.Popen(
                [*program, "engine", "--serve-run", run_id],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True)
        (folder / "pid").write_text(str(engine.pid))
    pid = int((folder / "pid").read_text())

    def alive() -> bool:
        if engine is not None:    # our child: poll() reaps it (a zombie would look alive)
            return engine.poll() is None
        return process_alive(pid)

    threading.Thread(target=_relay, args=(folder / "commands",), daemon=True).start()
    threading.Thread(target=_heartbeat, args=(folder / "attached", min(HEARTBEAT_S, _idle_s() / 4)),
                     daemon=True).start()
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with open(folder / "events.jsonl", "rb") as journal, out:
        for _ in range(start_at):
            if not journal.readline().endswith(b"\n"):
                raise InputError(f"--from {start_at}: run {run_id} has fewer events")
        while True:
            where = journal.tell()
            line = journal.readline()
            if line.endswith(b"\n"):
                body = line[:-1]
                out.write(frame_of(body))
                out.flush()
                continue
            journal.seek(where)   # a line still being written: read it whole later
            if not alive():
                if journal.readline().endswith(b"\n"):   # its last words, written as it ended
                    journal.seek(where)
                    continue
                return 0
            time.sleep(FOLLOW_S)


def _heartbeat(mark: Path, every_s: float):
    """This attach is there: the engine's idle bound counts from its last beat."""
    while True:
        mark.touch()
        time.sleep(every_s)


def _relay(fifo: Path):
    """The attach's stdin into the engine's FIFO, frame by frame (a frame cut by a dropped
    link never reaches the engine)."""
    stdin = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    with open(fifo, "wb", buffering=0) as commands:
        while True:
            try:
                value = read_frame(stdin)
            except (EOFError, ValueError, OSError):
                return
            commands.write(encode_frame(value))
