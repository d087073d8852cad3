"""The window process's garbage collection runs on the GUI thread, and only there.

Python starts a collection on whichever thread happens to allocate past the threshold: in the
window, the engine's worker thread, the look-up pool's threads or the import thread as often as
the GUI thread. A cycle that holds Qt wrappers (a closed window's menus, a page and its maker)
freed on one of those threads destroys its Qt objects there, and Qt objects must go on the
thread they live in: that hung the GUI tests in `test_crafted_sessions` once, and a CI run
timed out there after the import thread came. So automatic collection is off in the window
process, and a timer on the GUI thread runs what it would have run, by the same thresholds.

Two moments are skipped: a pause (`gc_paused`: a result arriving, the engine process starting)
and an import under way on another thread (a pass that freed Qt wrappers while the worker
imported through PySide's import hook hung or crashed the window in tests). A full pass, which
walks every object not frozen (long_lived.py), runs at most every FULL_EVERY_S; CPython's own
rule for when to run one (old objects grown by a quarter) cannot be read from Python.
"""

from __future__ import annotations

import gc
import importlib._bootstrap as bootstrap   # _module_locks: the imports under way
import time

from PySide6.QtCore import QObject, QTimer

from fp16studio.core.common.gc_pause import collection_off, paused

TICK_MS = 20        # how often the counts are looked at: the less piles up, the shorter a pass
FULL_EVERY_S = 5.0  # the most often a full pass runs


class GuiThreadCollector(QObject):
    def __init__(self, parent: QObject):
        super().__init__(parent)
        collection_off()
        self._last_full = time.monotonic()
        self._timer = QTimer(self, interval=TICK_MS, timeout=self.tick)
        self._timer.start()

    def tick(self):
        """Collect the youngest generation whose count is past its threshold, with the ones
        below it, as Python would have on its own."""
        if paused() or getattr(bootstrap, "_module_locks", None):
            return
        counts, thresholds = gc.get_count(), gc.get_threshold()
        if counts[0] <= thresholds[0]:
            return
        generation = 0
        if counts[1] > thresholds[1]:
            generation = 1
            if counts[2] > thresholds[2] and time.monotonic() - self._last_full >= FULL_EVERY_S:
                generation = 2
                self._last_full = time.monotonic()
        gc.collect(generation)


def collect_on_gui_thread(app: QObject) -> GuiThreadCollector:
    """The one collector of the process (on `app`, the QApplication), made on the first call."""
    existing = app.findChild(GuiThreadCollector)
    return existing or GuiThreadCollector(app)
