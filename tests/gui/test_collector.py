"""The window's garbage is collected on the GUI thread only (gui/collector.py): a cycle that
holds a Qt object is freed there however much another thread allocates, never during a pause
or an import under way on another thread, and automatic collection stays off."""

import gc
import importlib._bootstrap as bootstrap
import threading

import pytest
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QApplication

from fp16studio.core.common.gc_pause import gc_paused
from fp16studio.gui.collector import collect_on_gui_thread


class Cycle:
    """A reference cycle holding a Qt object; says on which thread it was freed."""

    def __init__(self, freed_on: list):
        self.me, self.qt, self._freed_on = self, QObject(), freed_on

    def __del__(self):
        self._freed_on.append(threading.current_thread())


def allocate_on_another_thread() -> list:
    """Past the youngest generation's threshold many times over: a collection on that thread
    wherever automatic collection is on. What it made is returned alive (freeing it would take
    the count back under the threshold)."""
    made = []
    thread = threading.Thread(target=lambda: made.extend([] for _ in range(20 * gc.get_threshold()[0])))
    thread.start()
    thread.join()
    return made


@pytest.fixture
def collector(qtbot):
    """The collector, with no window's import thread left running from an earlier test (it
    would freeze a cycle made here, or hold the collector back while it imports)."""
    for thread in threading.enumerate():
        if thread.name == "fp16studio-import":
            thread.join(30)
    qtbot.waitUntil(lambda: not bootstrap._module_locks, timeout=10_000)
    return collect_on_gui_thread(QApplication.instance())


def test_a_cycle_is_freed_on_the_gui_thread_whoever_allocates(qtbot, collector):
    freed_on = []
    gc.collect()
    Cycle(freed_on)
    alive = allocate_on_another_thread()  # noqa: F841 - kept until the collection
    assert freed_on == []
    qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)
    assert freed_on == [threading.main_thread()]
    assert not gc.isenabled()
    assert collect_on_gui_thread(QApplication.instance()) is collector   # one per process


@pytest.mark.parametrize("hold", ["pause", "import"])
def test_no_collection_during_a_pause_or_an_import_elsewhere(qtbot, collector, monkeypatch, hold):
    freed_on = []
    gc.collect()
    Cycle(freed_on)
    alive = allocate_on_another_thread()  # noqa: F841 - kept until the collection
    if hold == "pause":
        with gc_paused():
            collector.tick()
            gc_enabled_in_pause = gc.isenabled()
        assert not gc_enabled_in_pause
    else:
        with monkeypatch.context() as patched:
            patched.setattr(bootstrap, "_module_locks", {"some.module": None})
            collector.tick()
    assert freed_on == []
    assert not gc.isenabled()   # the pause ended: still off, the collector's
    collector.tick()
    assert freed_on == [threading.main_thread()]
