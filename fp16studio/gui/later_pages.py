"""Tabs whose page is made after the window shows, or the first time it is needed before that.

The Compare and Drift tabs draw with pyqtgraph and NumPy, whose import and plots were a third
of the window's start-up (issue 31). Their tabs hold an empty page until then; their modules are
imported on a thread of its own a moment after the window shows, and the pages are made once
that is done, one per event, unless one was needed first (shown, or asked for).
"""

from __future__ import annotations

import importlib
import threading
from typing import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QTabWidget, QWidget

IDLE_CHECK_MS = 50   # how often the window looks whether the pages' modules are imported


class LaterPages:
    def __init__(self, tabs: QTabWidget):
        self._tabs = tabs
        self._waiting: dict[str, tuple[QWidget, Callable[[], QWidget]]] = {}
        self._made: dict[str, QWidget] = {}
        tabs.currentChanged.connect(self._on_current)

    def add(self, name: str, title: str, make: Callable[[], QWidget]):
        """A tab titled `title` whose page `make()` returns when first needed."""
        stand_in = QWidget()
        self._waiting[name] = (stand_in, make)
        self._tabs.addTab(stand_in, title)

    def page(self, name: str) -> QWidget:
        """The page, made now if it was not yet (in its tab's place, current if that was)."""
        if name not in self._made:
            stand_in, make = self._waiting.pop(name)
            page = self._made[name] = make()
            index = self._tabs.indexOf(stand_in)
            current = self._tabs.currentIndex() == index
            self._tabs.insertTab(index, page, self._tabs.tabText(index))
            if current:   # before the stand-in goes: no other tab becomes current meanwhile
                self._tabs.setCurrentIndex(index)
            self._tabs.removeTab(index + 1)
            stand_in.deleteLater()
        return self._made[name]

    def make_after(self, loading: threading.Thread):
        """Make the pages not made yet once `loading` (their modules' import) is done, one per
        event: each is tens of milliseconds of widgets, which the first click on Benchmark or
        Compare with float32 would otherwise wait for."""
        timer = QTimer(self._tabs, interval=IDLE_CHECK_MS)

        def next_page():
            if loading.is_alive():
                return
            if not self._waiting:
                timer.stop()
                return
            self.page(next(iter(self._waiting)))

        timer.timeout.connect(next_page)
        timer.start()

    def made(self, name: str) -> QWidget | None:
        """The page if it was made: what a page not made yet would be told, it does not need."""
        return self._made.get(name)

    def _on_current(self, index: int):
        shown = self._tabs.widget(index)
        for name, (stand_in, _) in list(self._waiting.items()):
            if stand_in is shown:
                self.page(name)


def import_meanwhile(*modules: str) -> threading.Thread:
    """Import `modules` on a thread of its own (the GUI thread then finds them imported)."""
    def load():
        for module in modules:
            importlib.import_module(module)

    loading = threading.Thread(target=load, daemon=True, name="fp16studio-import")
    loading.start()
    return loading
