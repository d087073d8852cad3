"""One long-lived worker thread that drives the engine process, and a pool for quick look-ups.

The GUI thread submits a `Job` (an engine task by name, its arguments and a cancel token) and
gets plain snapshots back over queued signals; it never waits for the worker and never imports
torch. The worker thread hands each job to the engine process (fp16studio.engine), where the
loaded model, the CUDA context and torch's thread-local state live, relays its progress, samples
and log lines, and reads its result (a JSON frame of the task's declared type, engine.tasks), so
the GUI thread keeps the GIL to itself.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from fp16studio.core import CancelToken
from fp16studio.core.common.gc_pause import gc_paused
from fp16studio.engine import messages as m
from fp16studio.engine.client import KILL_AFTER_CANCEL_S, EngineClient, task_name


@dataclass
class Job:
    """An engine task (fp16studio.engine.tasks) run in the engine process: `task` is its name,
    or a module-level function (tests, extensions); only the name travels. The task gets
    `progress`, `cancel` and `on_sample` where its signature asks for them. Callbacks run on the
    GUI thread; `on_samples` gets what the task's `on_sample` sent (a benchmark's live samples, a
    script's output lines) as lists, at most every 50 ms: a fast stream is handled in batches.
    `on_arrival`, if given, runs on the worker thread with the result and returns what
    `on_result` gets: work on the result that would otherwise hold the GUI thread.

    `kind` groups jobs: a look-up kind (`supersede=True`) keeps only the latest job pending.
    `lasting` says the result is many objects that live long (a tensor tree): garbage collection
    is paused until `on_arrival` has taken it, so no pass walks it on its way in (long_lived.py).
    """

    kind: str
    task: str | Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    supersede: bool = False
    on_result: Callable[[Any], None] | None = None
    on_error: Callable[[str, str], None] | None = None
    on_cancel: Callable[[], None] | None = None
    on_samples: Callable[[list], None] | None = None
    on_arrival: Callable[[Any], Any] | None = None
    lasting: bool = False
    token: CancelToken = field(default_factory=CancelToken)
    id: int = field(default_factory=itertools.count(1).__next__)

    def __post_init__(self):
        self.task = task_name(self.task)   # refuse a lambda here, not later on the worker


class _Worker(QObject):
    """Lives on the worker thread; runs one job at a time, in the order submitted."""

    started = Signal(object)                # job
    progress = Signal(object, str, str)     # job, stage, message
    samples = Signal(object, object)        # job, [payload, ...]
    finished = Signal(object, object)       # job, result
    failed = Signal(object, str, str)       # job, one-line message, detail (traceback or "")
    cancelled = Signal(object)              # job

    def __init__(self, engine: EngineClient):
        super().__init__()
        self.engine = engine

    @Slot(object)
    def run(self, job: Job):
        if job.token.cancelled:
            self.cancelled.emit(job)
            return
        self.started.emit(job)

        def relay(event):
            if isinstance(event, m.Progress):
                self.progress.emit(job, event.stage, event.message)
            elif isinstance(event, m.Log):   # into this process's logging (the Log panel)
                logging.getLogger(event.logger).log(event.level, "%s", event.text)
            else:                            # ("samples", [payload, ...])
                self.samples.emit(job, event[1])

        with gc_paused() if job.lasting else contextlib.nullcontext():
            ending = self._ending(job, relay)
        if isinstance(ending, m.Failed):
            self.failed.emit(job, ending.message, ending.detail)
        elif isinstance(ending, m.Cancelled) or job.token.cancelled:
            # Also a result that arrived after Cancel (from a step that cannot stop, such as a
            # from_pretrained): discarded, as promised.
            self.cancelled.emit(job)
        else:
            self.finished.emit(job, ending.value)

    def _ending(self, job: Job, relay):
        """The job's result as `on_arrival` made it, or how it failed or was cancelled."""
        try:
            ending = self.engine.run(job.task, job.args, job.kwargs, job.token, on_event=relay)
        except Exception as exc:  # noqa: BLE001 - e.g. no process could start: say so, stay up
            ending = m.Failed(0, f"The engine process could not run the job: {exc}",
                              traceback.format_exc())
        if job.on_arrival is not None and isinstance(ending, m.Result) and not job.token.cancelled:
            try:
                ending = m.Result(ending.job_id, job.on_arrival(ending.value))
            except Exception as exc:  # noqa: BLE001 - a bug in the callback: the job fails, said
                ending = m.Failed(0, f"The result could not be read: {exc}", traceback.format_exc())
        return ending


class WorkerHost(QObject):
    """The GUI-thread side: owns the thread and the engine process, submits jobs, routes
    results to their callbacks.

    `busy` jobs (diagnose, benchmark) are the ones Run/Cancel care about; helper jobs (cache
    scans, previews) run the same way but do not light up the progress bar.
    """

    jobStarted = Signal(object)
    jobProgress = Signal(object, str, str)
    jobDone = Signal(object, str)           # job, outcome: "finished" | "failed" | "cancelled"
    jobFailed = Signal(object, str, str)
    _submit = Signal(object)

    def __init__(self, parent=None, kill_after_cancel_s: float = KILL_AFTER_CANCEL_S):
        super().__init__(parent)
        self.engine = EngineClient(kill_after_cancel_s)
        self._thread = QThread()
        self._thread.setObjectName("fp16studio-worker")
        self._worker = _Worker(self.engine)
        self._worker.moveToThread(self._thread)
        self._submit.connect(self._worker.run)
        self._worker.started.connect(self._on_started)
        self._worker.progress.connect(self._on_progress)
        self._worker.samples.connect(self._on_samples)
        self._worker.finished.connect(self._on_finished)
        self._worker.failed.connect(self._on_failed)
        self._worker.cancelled.connect(self._on_cancelled)
        self._pending: dict[int, Job] = {}
        self._started: set[int] = set()   # the pending jobs the worker has begun
        self._thread.start()

    # -- submitting -----------------------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        if job.supersede:   # latest wins: an older look-up of this kind is no longer wanted
            self.cancel(job.kind)
        self._pending[job.id] = job
        self._submit.emit(job)
        return job

    def pending(self, kind: str | None = None) -> list[Job]:
        return [job for job in self._pending.values() if kind is None or job.kind == kind]

    def cancel(self, kind: str | None = None):
        """Cancel the pending jobs (of `kind`). One still queued behind another is done at once:
        it will never start, so Run and Cancel need not wait for the job ahead of it."""
        for job in self.pending(kind):
            job.token.cancel()
            if job.id not in self._started:
                self._on_cancelled(job)
        self.engine.interrupt()

    def shutdown(self, timeout_ms: int = 10000) -> bool:
        """Cancel everything, end the engine process and stop the thread; True when it stopped
        in time. A running job is not waited for: its process is ended at once, which is safe
        because the engine holds nothing that needs saving (one on a box is told to end)."""
        busy = bool(self._pending)
        self.cancel()
        if busy and not self.engine.end_there():
            self.engine.kill()
        self._thread.quit()
        stopped = self._thread.wait(timeout_ms)
        if stopped:
            self.engine.close()
        return stopped

    @property
    def thread(self) -> QThread:
        return self._thread

    # -- results (GUI thread) -------------------------------------------------------------------
    def _on_started(self, job):
        if job.id in self._pending:   # not one cancelled while it was queued
            self._started.add(job.id)
            self.jobStarted.emit(job)

    def _on_progress(self, job, stage, message):
        if not job.token.cancelled:
            self.jobProgress.emit(job, stage, message)

    def _on_samples(self, job, payloads):
        if not job.token.cancelled and job.on_samples:
            job.on_samples(payloads)

    def _on_finished(self, job, result):
        if not self._done(job):
            return
        if job.on_result:
            job.on_result(result)
        self.jobDone.emit(job, "finished")

    def _on_failed(self, job, message, detail):
        if not self._done(job):
            return
        if job.on_error:
            job.on_error(message, detail)
        self.jobFailed.emit(job, message, detail)
        self.jobDone.emit(job, "failed")

    def _on_cancelled(self, job):
        if not self._done(job):
            return
        if job.on_cancel:
            job.on_cancel()
        self.jobDone.emit(job, "cancelled")

    def _done(self, job) -> bool:
        """Forget the job; False when it was done already (cancelled while queued, and said
        then: what the worker reports of it later is not passed on)."""
        self._started.discard(job.id)
        return self._pending.pop(job.id, None) is not None
