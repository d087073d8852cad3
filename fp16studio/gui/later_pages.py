"""Tabs whose page is made after the window shows, or the first time it is needed before that.

The Compare and Drift tabs draw with pyqtgraph and NumPy, whose import and plots were a third
of the window's start-up (issue 31). Their tabs hold an empty page until then; their modules are
imported on a thread of its own a moment after the window shows, and the pages are made once
that is done, a part of a page per event (a page's maker is a generator that yields between
parts and returns the page: each part some milliseconds of widgets, which the window does one at
a time, never all at once while the user waits), unless one was needed first (shown, or asked
for). The generator holds its page, never the reverse: a cycle of the two would be freed only by
a garbage collection, on whatever thread runs it, and Qt objects must go on the GUI thread.

PySide6 makes a module's Qt types on their first use, and two threads making the same type at
once crash the process (shiboken's table of types still to make is changed under the other's
feet while one runs Python, an enum's making). pyqtgraph's import makes every type of QtCore,
QtGui and QtWidgets, and crashed a CI run while the GUI thread used one for the first time. So
the GUI thread first makes every type not made yet, some milliseconds per event, and only then
does the import thread start.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from typing import Callable, Iterator, Protocol

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QStackedWidget, QTabWidget, QWidget

from .long_lived import keep_lasting_out_of_collections
from .unseen_layout import LaidOutUnseen

IDLE_CHECK_MS = 50   # how often the window looks whether the pages' modules are imported
TYPES_SLICE_S = 0.004   # the GUI thread's time per event making Qt types before the imports


class Loading(Protocol):
    """What the pages wait for: modules imported meanwhile (ImportsMeanwhile)."""

    def is_alive(self) -> bool: ...


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
    def in_parts(cls, parent: QWidget):
        """The view made a part per step as a child of `parent`: a generator that returns it
        (the window spreads the parts over events). It holds the view; the view never holds it."""
        view = cls(parent, begun=True)
        view.hide()   # until its tab is chosen, also if the window is shown again meanwhile
        for _ in view._make():
            _polish(view)
            yield
        _polish(view)
        return view


def _polish(view: QWidget):
    """The style sheet's rules worked out for the widgets of `view` made since the last call
    (a polished one returns at once)."""
    view.ensurePolished()
    for widget in view.findChildren(QWidget):
        widget.ensurePolished()


class LaterPages:
    def __init__(self, tabs: QTabWidget):
        self._tabs = tabs
        # Where a tab's page lives (the tab widget's own, not one of a page's).
        self._stack = tabs.findChild(QStackedWidget, options=Qt.FindChildOption.FindDirectChildrenOnly)
        self._waiting: dict[str, tuple[QWidget, Callable[[QWidget], Iterator]]] = {}
        self._begun: dict[str, Iterator] = {}   # the pages being made: their parts left
        self._whole: dict[str, QWidget] = {}     # made, not in their tab yet
        self._made: dict[str, QWidget] = {}
        self._unseen = LaidOutUnseen(self._stack)
        tabs.currentChanged.connect(self._on_current)

    def add(self, name: str, title: str, make: Callable[[QWidget], Iterator]):
        """A tab titled `title` whose page `make(parent)` makes as a child of `parent`, a part
        per step (a generator that returns the page), when first needed."""
        stand_in = QWidget()
        self._waiting[name] = (stand_in, make)
        self._tabs.addTab(stand_in, title)

    def page(self, name: str) -> QWidget:
        """The page, made now if it was not yet (in its tab's place, current if that was)."""
        if name not in self._made:
            page = self._whole.pop(name, None)
            if page is None:
                page = all_parts(self._begun.pop(name, None) or self._parts(name))
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

    def make_after(self, loading: Loading, then: Callable[[], None] = lambda: None):
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
            if name in self._whole:   # into its tab, then laid out, each in an event of its own
                self._unseen.add(self.page(name))
                return
            parts = self._begun.get(name)
            if parts is None:
                parts = self._begun[name] = self._parts(name)
            try:
                next(parts)
            except StopIteration as made:
                del self._begun[name]
                self._whole[name] = made.value

        timer.timeout.connect(next_part)
        timer.start()

    def _parts(self, name: str) -> Iterator:
        """The page's parts, made in the tabs' own stack."""
        return self._waiting[name][1](self._stack)

    def made(self, name: str) -> QWidget | None:
        """The page if it was made: what a page not made yet would be told, it does not need."""
        return self._made.get(name)

    def _on_current(self, index: int):
        shown = self._tabs.widget(index)
        for name, (stand_in, _) in list(self._waiting.items()):
            if stand_in is shown:
                self.page(name)


def qt_types_not_made():
    """(module, name) of every Qt type PySide6 has not made yet in the Qt modules loaded now: a
    name its module lists but does not hold yet."""
    for name, module in list(sys.modules.items()):
        if name.startswith("PySide6.Qt"):
            held = vars(module)
            yield from ((module, attr) for attr in dir(module) if attr not in held)


class ImportsMeanwhile:
    """`modules` imported on a thread of its own (the GUI thread then finds them imported), once
    the GUI thread has made every Qt type not made yet, a slice per event (the module's
    docstring says why); what the imports made is then frozen out of the collector's passes,
    when there were any (a second window finds its modules imported)."""

    def __init__(self, modules: tuple[str, ...], parent: QObject):
        self._thread = threading.Thread(target=self._load, args=(modules,), daemon=True,
                                        name="fp16studio-import")
        self._types = qt_types_not_made()
        self._making = QTimer(parent, interval=0, timeout=self._make_types)
        self._making.start()

    def is_alive(self) -> bool:
        """Whether the imports are still to come or under way."""
        return self._making.isActive() or self._thread.is_alive()

    def _make_types(self):
        until = time.perf_counter() + TYPES_SLICE_S
        for module, name in self._types:
            getattr(module, name)
            if time.perf_counter() > until:
                return
        self._making.stop()
        self._thread.start()

    @staticmethod
    def _load(modules):
        fresh = [module for module in modules if module not in sys.modules]
        for module in fresh:
            importlib.import_module(module)
        if fresh:
            keep_lasting_out_of_collections()
