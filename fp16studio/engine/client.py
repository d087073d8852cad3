"""The window's side of the engine process (Qt-free): start it, send a task, wait for its events.

Why a process: importing torch and building a model hold the GIL for tens to hundreds of
milliseconds at a time, and every Qt callback written in Python needs the GIL, so an in-process
engine stalls the window however it yields. In a child process the window keeps its GIL to
itself, and a crash, an out-of-memory kill or a load that ignores Cancel cannot take the window
down: the process is ended and the next task starts a fresh one.

The engine is `fp16studio engine --stdio` started by a transport's command: this Python here
(`local_engine`), or the same on another machine through ssh (transport.py). Messages cross as
JSON frames of the codec's documents (messages.py), never pickled. A reader thread turns the engine's frames into
messages on a queue; `EngineClient.run` blocks the calling (worker) thread on that queue, which
also gets the reader's word that the stream ended and `interrupt()`'s wake-up, so it reacts at
once to an event, a dead process or a Cancel, and does not poll.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from fp16studio.core.common.errors import CancelToken
from fp16studio.core.common.codec import DecodeError
from fp16studio.core.common.frames import FrameError, FrameWriter, decode_body, read_body
from fp16studio.core.common.gc_pause import gc_paused
from fp16studio.core.script.entry import frozen
from fp16studio.core.spec import trust
from . import messages as m
from .tasks import types_of

KILL_AFTER_CANCEL_S = 5.0  # a task that ignores Cancel this long ends with its process
SAMPLE_BATCH_S = 0.05      # benchmark samples reach the window at most this often
QUIT_GRACE_S = 10.0        # an engine asked to quit is ended if it has not after this long
REATTACH_TRIES = 3         # attaches in a row that bring nothing new before the box is given up
STDIO_ARGS = ("engine", "--stdio")
# How a job the engine could not finish begins: it crashed, or a box could not be reached.
ENGINE_LOST = "The engine process stopped unexpectedly"


def task_name(task) -> str:
    """A task name as it travels: a registered name, or "module:function" for a module-level
    function of an importable module (ValueError otherwise: only names cross the boundary)."""
    if isinstance(task, str):
        return task
    module, name = getattr(task, "__module__", None), getattr(task, "__qualname__", "")
    if not module or "<" in name or "." in name or module == "__main__":
        raise ValueError(f"{name or task!r} cannot run in the engine process: "
                         "tasks must be module-level functions of an importable module")
    return f"{module}:{name}"


# Not `python -m`: that puts the working folder first on the import path, where a file of the
# user's (a `typing_extensions.py`) would shadow what the engine imports; `-c` puts it there too,
# and the boot takes it off before anything is imported.
_BOOT = "import sys; del sys.path[0]; from fp16studio.cli import main; sys.exit(main())"


def local_engine() -> tuple[list[str], dict]:
    """The command and environment of an engine on this machine: this program itself, with
    this process's import path (a "module:function" task importable here is importable there)."""
    command = [sys.executable, *STDIO_ARGS] if frozen() else [
        sys.executable, "-c", _BOOT, *STDIO_ARGS]
    env = dict(os.environ)
    if not frozen():
        env["PYTHONPATH"] = os.pathsep.join(path or os.getcwd() for path in sys.path)
    return command, env


class _Ended:
    """The reader's last word: the engine's stream ended (`why`: "" at a clean end)."""

    def __init__(self, why: str = ""):
        self.why = why


_WAKE = object()


class EngineClient:
    """Starts the process on first use, runs one task at a time on the calling thread, and
    restarts the process after it died or was ended. `engine`: (command, environment) of the
    process that serves the protocol on its stdin/stdout (default: `local_engine()`), or a
    function that makes (command, environment, reattach) for each start, where reattach(n)
    is the (command, environment) that attaches again to that engine from its nth event
    (an engine that outlives its connection: detached.py)."""

    def __init__(self, kill_after_cancel_s: float = KILL_AFTER_CANCEL_S, engine=None):
        self.kill_after_cancel_s = kill_after_cancel_s
        self._engine = engine
        self._next_engine: tuple | None = None   # use(): the transport of the next task
        self._reattach = None
        self._received = 0         # the frames this engine sent so far (its journal's lines)
        self._job_id: int | None = None   # the job sent last (end_there cancels it)
        self._process: subprocess.Popen | None = None
        self._commands: FrameWriter | None = None
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._job_ids = itertools.count(1)

    def use(self, engine):
        """Run the next task on `engine` (a transport, as the constructor's `engine`; None: this
        computer); the engine now running is closed first, on the thread that runs tasks, so
        this is safe from any thread. A task under way ends on its engine (cancel it first)."""
        self._next_engine = (engine,)
        self.interrupt()

    def interrupt(self):
        """Wake the waiting run to look at its cancel token (safe from any thread)."""
        self._inbox.put(_WAKE)

    def run(self, task, args, kwargs, token: CancelToken, on_event) -> m.Result | m.Failed | m.Cancelled:
        """Run `task` there and wait, passing Progress and Log messages, and ("samples",
        [payload, ...]) batches, to `on_event` as they come; returns the ending message, a
        Result holding the task's typed value (its return annotation's type)."""
        name = task_name(task)
        types = types_of(name)
        args, kwargs = types.encode_arguments(args, kwargs)
        # Seconds, a minute on a busy machine: the window says so.
        if not self.started or self._next_engine is not None:
            on_event(m.Progress(0, "engine", "Starting the engine process…"))
        self._ensure_started()
        inbox = self._inbox
        job_id = self._job_id = next(self._job_ids)
        if not self._send(m.Run(job_id, name, args, kwargs, dict(trust.agreed()))):
            return self._ended(job_id, token)
        samples = _SampleBatch(on_event)
        cancel_sent_at = None
        while True:
            if token.cancelled:
                if cancel_sent_at is None:
                    self._send(m.Cancel(job_id))
                    cancel_sent_at = time.monotonic()
                elif time.monotonic() - cancel_sent_at >= self.kill_after_cancel_s:
                    self.kill()
                    return self._ended(job_id, token)
            deadline = samples.due()
            if cancel_sent_at is not None:
                kill_at = cancel_sent_at + self.kill_after_cancel_s
                deadline = kill_at if deadline is None else min(deadline, kill_at)
            try:
                message = inbox.get(timeout=None if deadline is None
                                    else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                message = _WAKE
            if isinstance(message, _Ended):
                samples.flush()
                why = message.why
                # A link that never brought a frame did not connect (ssh said why): no
                # attach would fare better.
                if self._reattach is not None and not why and not token.cancelled and self._received:
                    if self._attached_again(job_id, on_event):
                        inbox = self._inbox
                        continue
                    why = f"it could not be reached again after {REATTACH_TRIES} tries"
                return self._ended(job_id, token, why)
            if message is not _WAKE:
                self._received += 1
            if isinstance(message, m.Sample):
                samples.add(message.payload)
            elif message is not _WAKE:
                samples.flush()
                if isinstance(message, m.Result):
                    return _typed(message, types)
                if isinstance(message, m.ENDINGS):
                    return message
                on_event(message)
            samples.flush_if_due()

    def _send(self, message) -> bool:
        """False when the engine's stdin is gone (it ended)."""
        try:
            self._commands.write(m.to_frame(message))
        except (OSError, ValueError):
            return False
        return True

    def kill(self):
        """End the process now (safe from any thread; the waiting run sees it end)."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                process.kill()

    def end_there(self) -> bool:
        """The window closes while a job runs (safe from any thread): an engine that outlives
        its link (on a box) is told to cancel that job and quit, since no window comes back to
        it (killed here, its link would leave it there for a day, holding its model); its link
        is left to carry that and end (ended after QUIT_GRACE_S), and the waiting run ends now.
        False for an engine that ends with its process here: `kill` it."""
        process = self._process
        if self._reattach is None or process is None:
            return False
        self._process = None
        if self._job_id is not None:
            self._send(m.Cancel(self._job_id))
        self._send(m.Quit())
        with contextlib.suppress(OSError, ValueError):
            self._commands.close()
        threading.Thread(target=_reap, args=(process, QUIT_GRACE_S), name="fp16studio-engine-reaper",
                         daemon=True).start()
        self._inbox.put(_Ended("the window ended it"))
        return True

    def close(self, grace_s: float = QUIT_GRACE_S):
        """Ask the process to quit and let it go without waiting: an interpreter that loaded
        torch takes about a second to exit, which the window should not spend frozen. A reaper
        thread ends it if it is still there after `grace_s`. Call only when no task runs."""
        process = self._process
        if process is None:
            return
        self._send(m.Quit())
        self._process = None
        with contextlib.suppress(OSError, ValueError):
            self._commands.close()
        threading.Thread(target=_reap, args=(process, grace_s), name="fp16studio-engine-reaper",
                         daemon=True).start()

    @property
    def pid(self) -> int | None:
        """The running engine's process id here (of the ssh client, for a remote engine), or
        None (safe from any thread)."""
        process = self._process
        return process.pid if process is not None else None

    @property
    def started(self) -> bool:
        """The process is running (call from the thread that runs tasks)."""
        return self._process is not None and self._process.poll() is None

    def _ensure_started(self):
        switch, self._next_engine = self._next_engine, None
        if switch is not None:
            self.close()
            self._engine = switch[0]
        if self.started:
            return
        if callable(self._engine):
            command, env, self._reattach = self._engine()
        else:
            (command, env), self._reattach = self._engine or local_engine(), None
        self._received, self._tries = 0, 0
        self._connect(command, env)

    def _attached_again(self, job_id: int, on_event) -> bool:
        """The link to an engine that outlives it dropped: attach again from the last event
        received (what was missed is replayed); False when attaches in a row brought nothing."""
        self._tries = self._tries + 1 if self._received == self._last_attach else 1
        if self._tries > REATTACH_TRIES:
            return False
        on_event(m.Progress(job_id, "engine", "Reconnecting…"))
        with contextlib.suppress(OSError, ValueError):
            self._commands.close()
        with contextlib.suppress(OSError):
            self._process.kill()
        self._process.wait()
        self._connect(*self._reattach(self._received))
        return True

    def _connect(self, command, env):
        self._last_attach = self._received
        # A fresh inbox: nothing the last process said (its end) reaches the next one's jobs.
        self._inbox = queue.SimpleQueue()
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env,
                                   **_own_group(window_session=self._engine is None))
        self._process = process
        self._commands = FrameWriter(process.stdin)
        self._said = _Said(process.stderr)
        threading.Thread(target=_read_events, args=(process.stdout, self._inbox),
                         name="fp16studio-engine-events", daemon=True).start()

    def _ended(self, job_id: int, token: CancelToken, why: str = ""):
        """The process is gone: a cancel that had to end it, or a crash to report."""
        process = self._process
        self._process = None
        code = None
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(0 if why else 1.0)
            if code is None:   # its stream is gone and it lives on: it can serve no one
                process.kill()
                process.wait()
            with contextlib.suppress(OSError, ValueError):
                self._commands.close()
        if token.cancelled:
            return m.Cancelled(job_id)
        reason = why or _describe_exit(code)
        said = self._said.last() if process is not None else ""
        if said and not why:   # what it (or ssh: an unknown host, no fp16studio there) said last
            reason += f": {said}"
        return m.Failed(job_id, f"{ENGINE_LOST} ({reason}). "
                                "Run again to start a fresh one.")


class _Said:
    """The engine's stderr, passed on to ours line by line as it comes; the last line kept to
    say why an engine ended (a remote one's stderr is ssh's and the box's)."""

    def __init__(self, stream):
        self._last = ""
        self._done = threading.Event()
        threading.Thread(target=self._pump, args=(stream,), name="fp16studio-engine-stderr",
                         daemon=True).start()

    def _pump(self, stream):
        with stream:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip()
                if line.strip():
                    self._last = line.strip()
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    sys.stderr.write(line + "\n")
        self._done.set()

    def last(self) -> str:
        self._done.wait(1.0)   # the process ended: its last words are on their way
        return self._last


def _typed(result: m.Result, types) -> m.Result | m.Failed:
    """The result with its value read as the task's type. A result can be tens of thousands of
    new objects (a big model's tensor tree), which would trigger full garbage collections over
    the whole window process, holding the GIL the GUI thread waits for; the objects that arrive
    hold no cycles to collect."""
    try:
        with gc_paused():
            return m.Result(result.job_id, types.decode_result(result.value))
    except DecodeError as exc:   # an engine of another version, or not ours
        return m.Failed(result.job_id, f"The engine's result could not be read: {exc}")


def event_of(body: bytes):
    """The message of a frame's body from the engine (FrameError if it is none)."""
    return m.from_frame(decode_body(body, object_hook=_each_object))


def _each_object(doc: dict) -> dict:
    """json.loads' hook: a Python call per object, so that the parser (C code, which holds the
    GIL from start to end) lets the GUI thread in between the objects of a large result."""
    return doc


def _read_events(stream, inbox: queue.SimpleQueue):
    """The engine's frames as messages onto `inbox`, then one _Ended (a frame's JSON is read
    with the collector paused, as `_typed` reads its value)."""
    with stream:
        while True:
            try:
                body = read_body(stream)
                with gc_paused():   # while it decodes, not while it waits for the next
                    message = event_of(body)
            except (EOFError, OSError):
                inbox.put(_Ended())
                return
            except FrameError as exc:
                inbox.put(_Ended(f"it sent something that is not a message: {exc}"))
                return
            inbox.put(message)


def _own_group(window_session: bool) -> dict:
    """Popen keywords: the engine in a process group of its own, so that Ctrl+C in the
    terminal reaches the window (which then ends it), not the engine mid-task.

    This computer's engine stays in the window's session: under Linux's autogroup scheduling a
    session is a scheduling group of its own, where the engine's niceness would rank it against
    nothing but itself, and its torch threads would take the cores from the window as an equal.
    A transport (ssh) gets a session of its own, with no terminal: asking for a password on
    the window's terminal from a background process group, it would stop (SIGTTIN) and the
    window wait for ever; without one it asks through SSH_ASKPASS or fails in a line."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    if not window_session:
        return {"start_new_session": True}
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}


class _SampleBatch:
    """Benchmark samples handed on in batches, at most every SAMPLE_BATCH_S: a tiny model makes
    thousands a second, and one queued signal each would crowd the GUI thread's event queue."""

    def __init__(self, on_event):
        self._on_event = on_event
        self._pending: list = []
        self._since = time.monotonic()

    def due(self) -> float | None:
        """When the pending samples must go out; None when there are none."""
        return self._since + SAMPLE_BATCH_S if self._pending else None

    def add(self, payload):
        self._pending.append(payload)
        self.flush_if_due()

    def flush_if_due(self):
        if self._pending and time.monotonic() >= self._since + SAMPLE_BATCH_S:
            self.flush()

    def flush(self):
        if self._pending:
            self._on_event(("samples", self._pending))
            self._pending = []
        self._since = time.monotonic()


def _reap(process: subprocess.Popen, grace_s: float):
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _describe_exit(code) -> str:
    if code is None:
        return "it did not answer"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = ": often the system running out of memory" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"
