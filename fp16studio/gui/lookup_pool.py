"""Torch-free look-ups (cache scan, model info, Hub search) on a small thread pool.

They never wait behind a diagnosis or a benchmark in the engine, and the latest look-up of a
kind wins (as Orange does): the result of one that a newer one superseded is dropped. The
functions (fp16studio.engine.lookups) read file headers and the Hub with a bounded time, so a
pool thread holds the GIL only briefly.
"""

from __future__ import annotations

import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from fp16studio.core import InputError


class LookupPool(QObject):
    _done = Signal(object, int, bool, object)   # kind, generation, ok, result or message

    def __init__(self, parent=None, workers: int = 2):
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fp16studio-lookup")
        self._latest: dict[str, int] = {}
        self._callbacks: dict[tuple[str, int], tuple] = {}
        self._done.connect(self._deliver)   # queued: emitted on a pool thread

    def submit(self, kind: str, fn: Callable[..., Any], args: tuple = (),
               on_result: Callable[[Any], None] | None = None,
               on_error: Callable[[str], None] | None = None):
        generation = self._latest.get(kind, 0) + 1
        self._latest[kind] = generation
        self._callbacks = {key: value for key, value in self._callbacks.items() if key[0] != kind}
        self._callbacks[(kind, generation)] = (on_result, on_error)
        self._pool.submit(self._run, kind, generation, fn, args)

    def pending(self) -> int:
        return len(self._callbacks)

    def _run(self, kind, generation, fn, args):
        if self._latest.get(kind) != generation:
            return                          # superseded before it started
        try:
            result, ok = fn(*args), True
        except InputError as exc:
            result, ok = str(exc), False
        except Exception as exc:  # noqa: BLE001 - a look-up must never take the window down
            result, ok = f"{type(exc).__name__}: {exc}", False
            traceback.print_exc()
        try:
            self._done.emit(kind, generation, ok, result)
        except RuntimeError:   # the window went away meanwhile
            pass

    def _deliver(self, kind, generation, ok, result):
        callbacks = self._callbacks.pop((kind, generation), None)
        if callbacks is None:
            return                          # superseded: latest wins
        on_result, on_error = callbacks
        if ok and on_result:
            on_result(result)
        elif not ok and on_error:
            on_error(result)

    def shutdown(self):
        self._latest = {kind: -1 for kind in self._latest}
        self._callbacks.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
