"""The engine process's side: one task at a time, in the order they arrive (Qt-free).

`fp16studio engine --stdio` serves the messages as frames (messages.py) on its stdin and
stdout: the window's own engine and one on another machine over ssh speak the same protocol.
A listener thread reads commands so that a Cancel reaches the running task's token at once;
log records of the forwarded loggers and Python warnings go back as Log messages, tagged with
the running job.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import traceback

from fp16studio.core.common.errors import Cancelled, CancelToken, InputError
from fp16studio.core.common.codec import DecodeError
from fp16studio.core.common.frames import FrameError, FrameWriter, read_frame
from fp16studio.core.common.library_logs import quiet_library_logs
from fp16studio.core.spec import trust
from . import messages as m
from .tasks import resolve, takes, types_of

ENGINE_NICENESS = 5        # scheduling priority below the window's (POSIX), as browsers' background tabs
# py.warnings: Python warnings, through logging.captureWarnings.
FORWARDED_LOGGERS = ("fp16studio", "transformers", "datasets", "py.warnings")


class _Outbox:
    """Sends messages from any thread of the engine (logging may come from helper threads)."""

    def __init__(self, stream):
        self._frames = FrameWriter(stream)

    def send(self, message):
        self._frames.write(m.to_frame(message))


class _ForwardLogs(logging.Handler):
    def __init__(self, outbox: _Outbox, current: list):
        super().__init__(logging.INFO)
        self._outbox, self._current = outbox, current

    def emit(self, record):
        try:
            text = record.getMessage()
            if record.name == "py.warnings":   # "file:line: Category: text\n  source line"
                text = text.strip().splitlines()[0]
            self._outbox.send(m.Log(self._current[0], record.name, record.levelno, text))
        except Exception:  # noqa: BLE001 - a log line must never fail a job
            self.handleError(record)


def serve_stdio() -> int:
    """Serve on stdin/stdout. What a task or a library prints goes to stderr: the process's
    stdout is the frames' alone."""
    commands = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    events = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    serve(commands, events)
    return 0


def _let_go_of_the_terminal() -> None:
    """The window's engine shares its session (client.py: its scheduling group), and so its
    terminal: whatever would read from it there (getpass, a library's prompt, a tool a task
    starts) would stop on SIGTTIN in a background process group and the window wait for ever.
    Without one, it fails instead, as in a session of its own."""
    if os.name != "posix" or os.getsid(0) == os.getpid():
        return   # no controlling terminals; a session leader's letting go would hang up its session
    import fcntl
    import termios

    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return   # none to let go of
    try:
        fcntl.ioctl(tty, termios.TIOCNOTTY)
    except OSError:
        pass     # a system that keeps it: the engine never reads it itself
    finally:
        os.close(tty)


def serve(commands, events):
    """The engine's main loop: commands and events are binary streams of frames."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl+C in the terminal is for the window
    _let_go_of_the_terminal()
    if hasattr(os, "nice"):
        # Below the window: when torch keeps every core busy (a CPU benchmark), the GUI thread
        # still gets the CPU at once. An otherwise idle machine gives the engine the same time;
        # beside busy work of the window's session a third of its share (at 10: a tenth, and
        # the demo took a minute to load instead of seconds).
        os.nice(ENGINE_NICENESS)
    quiet_library_logs()
    outbox = _Outbox(events)
    current = [0]        # the running job's id, for log lines
    tokens: dict[int, CancelToken] = {}
    runs: queue.SimpleQueue = queue.SimpleQueue()
    handler = _ForwardLogs(outbox, current)
    logging.captureWarnings(True)
    for name in FORWARDED_LOGGERS:
        logging.getLogger(name).addHandler(handler)

    def listen():
        while True:
            try:
                message = m.from_frame(read_frame(commands))
            except (EOFError, OSError):   # the window's process is gone; nothing needs saving
                os._exit(0)
            except FrameError as exc:     # not our protocol: nothing more can be read
                print(f"fp16studio engine: {exc}", file=sys.stderr, flush=True)
                os._exit(2)
            if isinstance(message, m.Quit):
                runs.put(None)
                return
            if isinstance(message, m.Cancel):
                token = tokens.get(message.job_id)
                if token is not None:
                    token.cancel()
            else:
                tokens[message.job_id] = CancelToken()
                runs.put(message)

    threading.Thread(target=listen, name="fp16studio-engine-commands", daemon=True).start()
    while (run := runs.get()) is not None:
        current[0] = run.job_id
        try:
            outbox.send(_run_one(outbox, run, tokens[run.job_id]))
        except (TypeError, FrameError) as exc:   # a result that cannot travel
            outbox.send(m.Failed(run.job_id, f"The result could not be sent back: {exc}",
                                 traceback.format_exc()))
        finally:
            tokens.pop(run.job_id, None)
            current[0] = 0


def _run_one(outbox: _Outbox, run: m.Run, token: CancelToken):
    """Run one task; returns its ending message."""
    job_id = run.job_id
    trust.agree(run.agreed.items())
    try:
        fn, types = resolve(run.task), types_of(run.task)
        try:
            args, kwargs = types.decode_arguments(run.args, run.kwargs)
        except DecodeError as exc:   # another version of us at the other end, or not us
            return m.Failed(job_id, f"The task {run.task!r} was sent arguments it cannot take: {exc}")
        if takes(fn, "progress"):
            kwargs["progress"] = lambda stage, message="": outbox.send(m.Progress(job_id, stage, message))
        if takes(fn, "cancel"):
            kwargs["cancel"] = token
        if takes(fn, "on_sample"):
            kwargs["on_sample"] = lambda payload: outbox.send(m.Sample(job_id, payload))
        value = fn(*args, **kwargs)
    except Cancelled:
        return m.Cancelled(job_id)
    except InputError as exc:
        return m.Failed(job_id, str(exc))   # the user's input, not our bug: no traceback
    except Exception as exc:  # noqa: BLE001 - the engine must survive anything a task raises
        return m.Failed(job_id, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    # Encoded out of the try: a result that cannot travel is said so by the caller.
    return m.Cancelled(job_id) if token.cancelled else m.Result(job_id, types.encode_result(value))
