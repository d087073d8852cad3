"""The window's side of the engine process (Qt-free): start it, send a task, wait for its events.

Why a process: importing torch and building a model hold the GIL for tens to hundreds of
milliseconds at a time, and every Qt callback written in Python needs the GIL, so an in-process
engine stalls the window however it yields. In a child process the window keeps its GIL to
itself, and a crash, an out-of-memory kill or a load that ignores Cancel cannot take the window
down: the process is ended and the next task starts a fresh one.

`EngineClient.run` blocks the calling (worker) thread in `multiprocessing.connection.wait` on
the event pipe, the process's sentinel and a wake-up pipe that `interrupt()` writes to, so it
reacts at once to an event, a dead process or a Cancel, and does not poll.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import signal
import sys
import threading
import time
import types
from multiprocessing.connection import wait

from fp16studio.core.common.errors import CancelToken
from fp16studio.core.common.gc_pause import gc_paused
from fp16studio.core.spec import trust
from . import messages as m

KILL_AFTER_CANCEL_S = 5.0  # a task that ignores Cancel this long ends with its process
SAMPLE_BATCH_S = 0.05      # benchmark samples reach the window at most this often
QUIT_GRACE_S = 10.0        # an engine asked to quit is ended if it has not after this long


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


class EngineClient:
    """Starts the process on first use, runs one task at a time on the calling thread, and
    restarts the process after it died or was ended."""

    def __init__(self, kill_after_cancel_s: float = KILL_AFTER_CANCEL_S):
        self.kill_after_cancel_s = kill_after_cancel_s
        self._process = None
        self._commands = self._events = None
        self._wake_in, self._wake_out = multiprocessing.Pipe(duplex=False)

    def interrupt(self):
        """Wake the waiting run to look at its cancel token (safe from any thread)."""
        with contextlib.suppress(OSError, ValueError):
            self._wake_out.send_bytes(b"")

    def run(self, task, args, kwargs, token: CancelToken, on_event) -> m.Result | m.Failed | m.Cancelled:
        """Run `task` there and wait, passing Progress and Log messages, and ("samples",
        [payload, ...]) batches, to `on_event` as they come; returns the ending message."""
        if not self.started:   # seconds, a minute on a busy machine: the window says so
            on_event(m.Progress(0, "engine", "Starting the engine process…"))
        self._ensure_started()
        job_id = next(_job_ids)
        self._commands.send(m.Run(job_id, task_name(task), tuple(args), tuple(kwargs.items()),
                                  trust.agreed()))
        samples = _SampleBatch(on_event)
        cancel_sent_at = None
        while True:
            if token.cancelled:
                if cancel_sent_at is None:
                    self._commands.send(m.Cancel(job_id))
                    cancel_sent_at = time.monotonic()
                elif time.monotonic() - cancel_sent_at >= self.kill_after_cancel_s:
                    self.kill()
                    return self._ended(job_id, token)
            deadline = samples.due()
            if cancel_sent_at is not None:
                kill_at = cancel_sent_at + self.kill_after_cancel_s
                deadline = kill_at if deadline is None else min(deadline, kill_at)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait([self._events, self._process.sentinel, self._wake_in], timeout)
            if self._wake_in in ready:
                while self._wake_in.poll():
                    self._wake_in.recv_bytes()
            if self._events in ready:   # read what is there before believing the sentinel
                try:
                    message = self._receive()
                except (EOFError, OSError):
                    return self._ended(job_id, token)
                if isinstance(message, m.Sample):
                    samples.add(message.payload)
                else:
                    samples.flush()
                    if isinstance(message, m.ENDINGS):
                        return message
                    on_event(message)
            elif self._process.sentinel in ready:
                return self._ended(job_id, token)
            samples.flush_if_due()

    def _receive(self):
        # A result can be tens of thousands of new objects (a big model's tensor tree), which
        # would trigger full garbage collections over the whole window process, holding the
        # GIL the GUI thread waits for; the objects that arrive hold no cycles to collect.
        with gc_paused():
            return self._events.recv()

    def kill(self):
        """End the process now (safe from any thread; the waiting run sees it end)."""
        process = self._process
        try:
            if process is not None and process.is_alive():
                process.kill()
        except ValueError:  # the worker closed it meanwhile: already gone
            pass

    def close(self, grace_s: float = QUIT_GRACE_S):
        """Ask the process to quit and let it go without waiting: an interpreter that loaded
        torch takes about a second to exit, which the window should not spend frozen. A reaper
        thread ends it if it is still there after `grace_s`. Call only when no task runs."""
        process = self._process
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._commands.send(m.Quit())
        self._process = None       # forget it first: _release must not close it under the reaper
        self._release()
        threading.Thread(target=_reap, args=(process, grace_s), name="fp16studio-engine-reaper",
                         daemon=True).start()

    @property
    def pid(self) -> int | None:
        """The running engine's process id, or None (safe from any thread)."""
        process = self._process
        try:
            return process.pid if process is not None else None
        except ValueError:  # closed by the worker thread meanwhile
            return None

    @property
    def started(self) -> bool:
        """The process is running (call from the thread that runs tasks)."""
        return self._process is not None and self._process.is_alive()

    def _ensure_started(self):
        if self.started:
            return
        from .server import serve

        self._release()
        context = multiprocessing.get_context("spawn")  # never fork a process that runs Qt
        commands_out, commands_in = context.Pipe(duplex=False)
        events_out, events_in = context.Pipe(duplex=False)
        self._process = context.Process(target=serve, args=(commands_out, events_in),
                                        name="fp16studio-engine", daemon=True)
        # No collection meanwhile: in a window, a pass on the GUI thread that frees Qt
        # wrappers while this thread imports through PySide's import hook (pickling the process
        # for spawn) has hung or crashed the window in tests.
        with gc_paused(), _main_module_hidden():
            self._process.start()
        commands_out.close()   # the child's ends; ours stay open
        events_in.close()
        self._commands, self._events = commands_in, events_out

    def _ended(self, job_id: int, token: CancelToken):
        """The process is gone: a cancel that had to end it, or a crash to report."""
        process = self._process
        process.join(1.0)
        code = process.exitcode
        self._release()
        if token.cancelled:
            return m.Cancelled(job_id)
        return m.Failed(job_id, f"The engine process stopped unexpectedly ({_describe_exit(code)}). "
                                "Run again to start a fresh one.")

    def _release(self):
        for end in (self._commands, self._events):
            if end is not None:
                end.close()
        if self._process is not None and self._process.exitcode is not None:
            self._process.close()
        self._process = None
        self._commands = self._events = None


_job_ids = itertools.count(1)


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


def _reap(process, grace_s: float):
    process.join(grace_s)
    if process.is_alive():
        process.kill()
        process.join()


@contextlib.contextmanager
def _main_module_hidden():
    """Start a process without running the window's `__main__` again in it: spawn re-imports
    the main script in the child, and a script that drives the window (CONTRACT §5) without an
    `if __name__ == "__main__"` guard would open a second window there and never serve."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


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
