"""A result shown in turns, an event each: between two, the window repaints and serves the
user, so a result is several short waits of the window, not one long one (issue 31)."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QTimer


class Turns(QObject):
    """Runs the parts given to `start` one per event; `then()` after the last."""

    def __init__(self, parent: QObject, then: Callable[[], None] = lambda: None):
        super().__init__(parent)
        self._left: list[Callable[[], None]] = []
        self._then = then
        self._next = QTimer(self, singleShot=True, interval=0, timeout=self._take)

    @property
    def pending(self) -> bool:
        return bool(self._left)

    def start(self, *parts: Callable[[], None]):
        """Run `parts` from the next event on, instead of what was left."""
        self._left[:] = parts
        self._next.start()

    def finish(self):
        """Run what is left now."""
        self._next.stop()
        if not self._left:
            return
        while self._left:
            self._left.pop(0)()
        self._then()

    def drop(self):
        """Forget what is left (`then` is not run)."""
        self._next.stop()
        self._left.clear()

    def _take(self):
        self._left.pop(0)()
        if self._left:
            self._next.start()
        else:
            self._then()
