"""Tabs whose page is made after the window shows, or the first time it is needed before that.

The Compare and Drift tabs draw with pyqtgraph and NumPy, whose import and plots were a third
of the window's start-up (issue 31). Their tabs hold an empty page until then; their modules are
imported on a thread of its own a moment after the window shows, and the pages are made once
that is done, a part of a page per event (a page's maker is a generator that yields between
parts and returns the page: each part some milliseconds of widgets, which the window does one at
a time, never all at once while the user waits), unless one was needed first (shown, or asked
for). The generator holds its page, never the reverse: a cycle of the two would be freed only by
a garbage collection, on whatever thread runs it, and Qt objects must go on the GUI thread.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Callable, Iterator

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QTabWidget, QWidget

from .long_lived import keep_lasting_out_of_collections

IDLE_CHECK_MS = 50   # how often the window looks whether the pages' modules are imported


def all_parts(parts):
    """Make what is left of a page made in parts (`parts`: its generator); the page."""
    while True:
        try:
            next(parts)
        except StopIteration as made:
            return made.value


class MadeInParts:
    """A view whose `_make` (a generator: it yields between parts) builds it after a bare
    `__init__(begun=True)`; its own `__init__` runs all parts unless `begun`."""

    @classmethod
    def in_parts(cls):
        """The view made a part per step: a generator that returns it (the window spreads the
        parts over events). It holds the view; the view never holds it."""
        view = cls(begun=True)
        yield from view._make()
        return view


class LaterPages:
    def __init__(self, tabs: QTabWidget):
        self._tabs = tabs
        self._waiting: dict[str, tuple[QWidget, Callable[[], Iterator]]] = {}
        self._begun: dict[str, Iterator] = {}   # the pages being made: their parts left
        self._whole: dict[str, QWidget] = {}     # made, not in their tab yet
        self._made: dict[str, QWidget] = {}
        tabs.currentChanged.connect(self._on_current)

    def add(self, name: str, title: str, make: Callable[[], Iterator]):
        """A tab titled `title` whose page `make()` makes, a part per step (a generator that
        returns the page), when first needed."""
        stand_in = QWidget()
        self._waiting[name] = (stand_in, make)
        self._tabs.addTab(stand_in, title)

    def page(self, name: str) -> QWidget:
        """The page, made now if it was not yet (in its tab's place, current if that was)."""
        if name not in self._made:
            page = self._whole.pop(name, None)
            if page is None:
                page = all_parts(self._begun.pop(name, None) or self._waiting[name][1]())
            stand_in, _ = self._waiting.pop(name)
            self._made[name] = page
            index = self._tabs.indexOf(stand_in)
            current = self._tabs.currentIndex() == index
            self._tabs.insertTab(index, page, self._tabs.tabText(index))
            if current:   # before the stand-in goes: no other tab becomes current meanwhile
                self._tabs.setCurrentIndex(index)
            self._tabs.removeTab(index + 1)
            stand_in.deleteLater()
        return self._made[name]

    def make_after(self, loading: threading.Thread, then: Callable[[], None] = lambda: None):
        """Make the pages not made yet once `loading` (their modules' import) is done, a part
        per event: what the first click on Benchmark or Compare with float32 would otherwise
        wait for, and a page at once would hold the window longer than a stall. `then()` once
        they all are."""
        timer = QTimer(self._tabs, interval=IDLE_CHECK_MS)

        def next_part():
            if loading.is_alive():
                return
            if not self._waiting:
                timer.stop()
                then()
                return
            name = next(iter(self._waiting))
            if name in self._whole:
                self.page(name)   # into its tab, in an event of its own too
                return
            parts = self._begun.get(name)
            if parts is None:
                parts = self._begun[name] = self._waiting[name][1]()
            try:
                next(parts)
            except StopIteration as made:
                del self._begun[name]
                self._whole[name] = made.value

        timer.timeout.connect(next_part)
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
    """Import `modules` on a thread of its own (the GUI thread then finds them imported); what
    the imports made is then frozen out of the collector's passes, when there were any (a
    second window finds its modules imported)."""
    def load():
        fresh = [module for module in modules if module not in sys.modules]
        for module in fresh:
            importlib.import_module(module)
        if fresh:
            keep_lasting_out_of_collections()

    loading = threading.Thread(target=load, daemon=True, name="fp16studio-import")
    loading.start()
    return loading
