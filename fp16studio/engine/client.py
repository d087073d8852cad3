"""The engine process: where the window's jobs actually run (Qt-free on both sides).

Why a process behind the worker thread rather than the thread alone: importing torch and
building a model hold the GIL for tens to hundreds of milliseconds at a time, and every Qt
callback written in Python (painting a tree row, a timer) needs the GIL, so an in-process
engine stalls the window however it yields. In a child process the window keeps its GIL to
itself. It also means a crash, an out-of-memory kill or a load that ignores Cancel cannot take
the window down: the process is ended and the next job starts a fresh one.

Messages are pickles over two one-way pipes:
  to the engine:   ("run", job_id, "module:function", args, kwargs, wants_progress, streams)
                   ("cancel", job_id), or None to quit
  from the engine: ("progress", job_id, stage, message)   ("sample", job_id, payload)
                   ("log", job_id, logger, level, text)
                   and one of ("result", job_id, value)   ("failed", job_id, message, detail)
                   ("cancelled", job_id) to end each job
A job's function must be importable by name (a module-level function), since only its name
travels. Results are unpickled on the worker thread, never on the GUI thread.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import itertools
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
import types

from fp16studio.core.errors import Cancelled, CancelToken, InputError

POLL_S = 0.05              # how often a waiting worker looks at its job's cancel token
KILL_AFTER_CANCEL_S = 5.0  # a job that ignores Cancel this long ends with its process
SAMPLE_BATCH_S = 0.05      # benchmark samples reach the window at most this often
QUIT_GRACE_S = 10.0        # an engine asked to quit is ended if it has not after this long
ENGINE_NICENESS = 10       # scheduling priority below the window's (POSIX)
FORWARDED_LOGGERS = ("fp16studio", "transformers", "datasets")
ENDINGS = ("result", "failed", "cancelled")


def target_of(fn) -> str:
    """"module:function" for a function the engine process can import; ValueError otherwise."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in name or module == "__main__":
        raise ValueError(f"{name or fn!r} cannot run in the engine process: "
                         "jobs must be module-level functions of an importable module")
    return f"{module}:{name}"


class EngineProcess:
    """The window's side: starts the process on first use, runs one job at a time on the
    calling (worker) thread, and restarts the process after it died or was ended."""

    def __init__(self, kill_after_cancel_s: float = KILL_AFTER_CANCEL_S):
        self.kill_after_cancel_s = kill_after_cancel_s
        self._process = None
        self._commands = self._events = None

    def run(self, target: str, args, kwargs, token: CancelToken, *, wants_progress: bool,
            streams: bool, on_event) -> tuple:
        """Run `target` there and wait, passing ("progress", stage, message), ("log", logger,
        level, text) and ("samples", [payload, ...]) events to `on_event` as they come. Returns
        ("result", value), ("failed", message, detail) or ("cancelled",)."""
        self._ensure_started()
        job_id = next(_job_ids)
        self._commands.send(("run", job_id, target, args, kwargs, wants_progress, streams))
        cancel_sent_at = None
        samples = _SampleBatch(on_event)
        while True:
            if self._events.poll(POLL_S):
                try:
                    kind, _, *payload = self._receive()
                except (EOFError, OSError):
                    return self._ended(token)
                if kind == "sample":
                    samples.add(payload[0])
                    continue
                samples.flush()
                if kind in ENDINGS:
                    return (kind, *payload)
                on_event(kind, *payload)
            else:
                samples.flush()
                if not self._process.is_alive():
                    return self._ended(token)
            if token.cancelled:
                if cancel_sent_at is None:
                    self._commands.send(("cancel", job_id))
                    cancel_sent_at = time.monotonic()
                elif time.monotonic() - cancel_sent_at > self.kill_after_cancel_s:
                    self.kill()
                    return self._ended(token)

    def _receive(self):
        # A result can be tens of thousands of new objects (a big model's tensor tree), which
        # would trigger full garbage collections over the whole window process, holding the
        # GIL the GUI thread waits for; the objects that arrive hold no cycles to collect.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._events.recv()
        finally:
            if enabled:
                gc.enable()

    def kill(self):
        """End the process now (safe from any thread; the waiting worker sees it end)."""
        process = self._process
        try:
            if process is not None and process.is_alive():
                process.kill()
        except ValueError:  # the worker closed it meanwhile: already gone
            pass

    def close(self, grace_s: float = QUIT_GRACE_S):
        """Ask the process to quit and let it go without waiting: an interpreter that loaded
        torch takes about a second to exit, which the window should not spend frozen. A reaper
        thread ends it if it is still there after `grace_s`. Call only when no job is running
        (after the worker thread has stopped)."""
        process = self._process
        if process is None:
            return
        try:
            self._commands.send(None)
        except (OSError, ValueError):
            pass
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

    def _ensure_started(self):
        if self._process is not None and self._process.is_alive():
            return
        self._release()
        context = multiprocessing.get_context("spawn")  # never fork a process that runs Qt
        commands_out, commands_in = context.Pipe(duplex=False)
        events_out, events_in = context.Pipe(duplex=False)
        self._process = context.Process(target=serve, args=(commands_out, events_in),
                                        name="fp16studio-engine", daemon=True)
        with _main_module_hidden():
            self._process.start()
        commands_out.close()   # the child's ends; ours stay open
        events_in.close()
        self._commands, self._events = commands_in, events_out

    def _ended(self, token: CancelToken) -> tuple:
        """The process is gone: a cancel that had to end it, or a crash to report."""
        process = self._process
        process.join(1.0)
        code = process.exitcode
        self._release()
        if token.cancelled:
            return ("cancelled",)
        return ("failed", f"The engine process stopped unexpectedly ({_describe_exit(code)}). "
                          "Run again to start a fresh one.", "")

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

    def add(self, payload):
        self._pending.append(payload)
        if time.monotonic() - self._since >= SAMPLE_BATCH_S:
            self.flush()

    def flush(self):
        if self._pending:
            self._on_event("samples", self._pending)
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


# -- the engine's side ----------------------------------------------------------------------------
class _Outbox:
    """Sends events from any thread of the engine (logging may come from helper threads)."""

    def __init__(self, connection):
        self._connection = connection
        self._lock = threading.Lock()

    def send(self, *message):
        with self._lock:
            self._connection.send(message)


class _ForwardLogs(logging.Handler):
    def __init__(self, outbox: _Outbox, current: list):
        super().__init__(logging.INFO)
        self._outbox, self._current = outbox, current

    def emit(self, record):
        try:
            self._outbox.send("log", self._current[0], record.name, record.levelno, record.getMessage())
        except Exception:  # noqa: BLE001 - a log line must never fail a job
            self.handleError(record)


def serve(commands, events):
    """The engine process's main loop: one job at a time, in the order they arrive."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl+C in the terminal is for the window
    if hasattr(os, "nice"):
        # Below the window: when torch keeps every core busy (a CPU benchmark), the GUI thread
        # still gets the CPU at once. An otherwise idle machine gives the engine the same time.
        os.nice(ENGINE_NICENESS)
    outbox = _Outbox(events)
    current = [0]        # the running job's id, for log lines
    tokens: dict[int, CancelToken] = {}
    runs: queue.SimpleQueue = queue.SimpleQueue()
    handler = _ForwardLogs(outbox, current)
    for name in FORWARDED_LOGGERS:
        logging.getLogger(name).addHandler(handler)

    def listen():
        while True:
            try:
                message = commands.recv()
            except (EOFError, OSError):   # the window's process is gone; nothing needs saving
                os._exit(0)
            if message is None:           # quit, after the running job (the window waits briefly)
                runs.put(None)
                return
            if message[0] == "cancel":
                token = tokens.get(message[1])
                if token is not None:
                    token.cancel()
            else:
                tokens[message[1]] = CancelToken()
                runs.put(message)

    threading.Thread(target=listen, name="fp16studio-engine-commands", daemon=True).start()
    while (message := runs.get()) is not None:
        _, job_id, target, args, kwargs, wants_progress, streams = message
        current[0] = job_id
        try:
            _run_one(outbox, job_id, target, args, kwargs, tokens[job_id], wants_progress, streams)
        finally:
            tokens.pop(job_id, None)
            current[0] = 0


def _run_one(outbox, job_id, target, args, kwargs, token, wants_progress, streams):
    kwargs = dict(kwargs)
    if wants_progress:
        kwargs["progress"] = lambda stage, message="": outbox.send("progress", job_id, stage, message)
        kwargs["cancel"] = token
    if streams:
        kwargs["on_sample"] = lambda payload: outbox.send("sample", job_id, payload)
    try:
        module, name = target.split(":")
        fn = importlib.import_module(module)
        for part in name.split("."):
            fn = getattr(fn, part)
        result = fn(*args, **kwargs)
    except Cancelled:
        outbox.send("cancelled", job_id)
    except InputError as exc:
        # The user's input, not our bug: their message, no traceback.
        outbox.send("failed", job_id, str(exc), "")
    except Exception as exc:  # noqa: BLE001 - the engine must survive anything a job raises
        outbox.send("failed", job_id, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    else:
        if token.cancelled:
            outbox.send("cancelled", job_id)
            return
        try:
            outbox.send("result", job_id, result)
        except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
            outbox.send("failed", job_id, f"The result could not be sent back: {exc}",
                        traceback.format_exc())
