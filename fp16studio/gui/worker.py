"""One long-lived worker thread for everything that may take more than a frame.

The loaded model, the CUDA context and torch's thread-local state (inference mode, autocast) all
live on that one thread, so every engine call goes through it. The GUI thread submits a `Job`
(a plain function plus a cancel token) and gets plain snapshots back over queued signals; it
never waits for the worker and never imports torch.
"""

from __future__ import annotations

import itertools
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from fp16studio.core import Cancelled, CancelToken, InputError


@dataclass
class Job:
    """`fn(*args, progress=..., cancel=..., **kwargs)` run on the worker thread.

    `progress` and `cancel` are passed only when `wants_progress` is set (helpers such as a
    cache scan take neither). Callbacks run on the GUI thread.
    """

    kind: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    wants_progress: bool = True
    on_result: Callable[[Any], None] | None = None
    on_error: Callable[[str, str], None] | None = None
    on_cancel: Callable[[], None] | None = None
    token: CancelToken = field(default_factory=CancelToken)
    id: int = field(default_factory=itertools.count(1).__next__)


class _Worker(QObject):
    """Lives on the worker thread; runs one job at a time, in the order submitted."""

    started = Signal(object)                # job
    progress = Signal(object, str, str)     # job, stage, message
    finished = Signal(object, object)       # job, result
    failed = Signal(object, str, str)       # job, one-line message, detail (traceback or "")
    cancelled = Signal(object)              # job

    @Slot(object)
    def run(self, job: Job):
        if job.token.cancelled:
            self.cancelled.emit(job)
            return
        self.started.emit(job)
        kwargs = dict(job.kwargs)
        if job.wants_progress:
            kwargs["progress"] = lambda stage, message="": self.progress.emit(job, stage, message)
            kwargs["cancel"] = job.token
        try:
            result = job.fn(*job.args, **kwargs)
        except Cancelled:
            self.cancelled.emit(job)
        except InputError as exc:
            # The user's input, not our bug: their message, no traceback.
            self.failed.emit(job, str(exc), "")
        except Exception as exc:  # noqa: BLE001 - a worker must survive anything the engine raises
            self.failed.emit(job, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        else:
            if job.token.cancelled:
                # Cancelled while a step that cannot stop (a from_pretrained) was running:
                # its result is discarded, as promised.
                self.cancelled.emit(job)
            else:
                self.finished.emit(job, result)


class WorkerHost(QObject):
    """The GUI-thread side: owns the thread, submits jobs, routes results to their callbacks.

    `busy` jobs (diagnose, benchmark) are the ones Run/Cancel care about; helper jobs (cache
    scans, previews) run on the same thread but do not light up the progress bar.
    """

    jobStarted = Signal(object)
    jobProgress = Signal(object, str, str)
    jobDone = Signal(object, str)           # job, outcome: "finished" | "failed" | "cancelled"
    jobFailed = Signal(object, str, str)
    _submit = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("fp16studio-worker")
        self._worker = _Worker()
        self._worker.moveToThread(self._thread)
        self._submit.connect(self._worker.run)
        self._worker.started.connect(self.jobStarted)
        self._worker.progress.connect(self._on_progress)
        self._worker.finished.connect(self._on_finished)
        self._worker.failed.connect(self._on_failed)
        self._worker.cancelled.connect(self._on_cancelled)
        self._pending: dict[int, Job] = {}
        self._thread.start()

    # -- submitting -----------------------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        self._pending[job.id] = job
        self._submit.emit(job)
        return job

    def pending(self, kind: str | None = None) -> list[Job]:
        return [job for job in self._pending.values() if kind is None or job.kind == kind]

    def cancel(self, kind: str | None = None):
        for job in self.pending(kind):
            job.token.cancel()

    def shutdown(self, timeout_ms: int = 30000) -> bool:
        """Cancel everything and stop the thread; True when it stopped in time."""
        self.cancel()
        self._thread.quit()
        return self._thread.wait(timeout_ms)

    @property
    def thread(self) -> QThread:
        return self._thread

    # -- results (GUI thread) -------------------------------------------------------------------
    def _on_progress(self, job, stage, message):
        if not job.token.cancelled:
            self.jobProgress.emit(job, stage, message)

    def _on_finished(self, job, result):
        self._pending.pop(job.id, None)
        if job.on_result:
            job.on_result(result)
        self.jobDone.emit(job, "finished")

    def _on_failed(self, job, message, detail):
        self._pending.pop(job.id, None)
        if job.on_error:
            job.on_error(message, detail)
        self.jobFailed.emit(job, message, detail)
        self.jobDone.emit(job, "failed")

    def _on_cancelled(self, job):
        self._pending.pop(job.id, None)
        if job.on_cancel:
            job.on_cancel()
        self.jobDone.emit(job, "cancelled")
