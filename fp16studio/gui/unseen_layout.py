"""Tab pages laid out before their tab first shows them, unseen, at the size the tab shows pages.

A hidden widget's children are laid out only once it shows: the Compare tab's first show, as
Benchmark was pressed, laid out every widget of its page and set its charts' ranges (8 of the
press's 20 ms on the GUI thread). A page given here is laid out in an event of its own soon
after, and again once the tabs' size settles after a change (the window resized), until its
tab first shows it.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QRect, QTimer
from PySide6.QtWidgets import QStackedWidget, QWidget

SETTLE_MS = 200   # a resize's last step this long ago: the user let go of the window's edge
SETTLE_PASSES = 5   # of a page's layout requests: each may post its parent's and children's


class LaidOutUnseen(QObject):
    """The pages of `stack` (a tab widget's own) given to `add`, laid out a page per event while
    their geometry differs from the shown page's, until shown."""

    def __init__(self, stack: QStackedWidget):
        super().__init__(stack)
        self._stack = stack
        self._pages: list[QWidget] = []
        self._timer = QTimer(self, singleShot=True, timeout=self._next)
        stack.installEventFilter(self)
        stack.currentChanged.connect(self._on_current)

    def add(self, page: QWidget):
        self._pages.append(page)
        self._timer.start(0)

    def eventFilter(self, _watched, event) -> bool:
        if event.type() == QEvent.Type.Resize and self._pages:
            self._timer.start(SETTLE_MS)   # again: a window dragged wider waits for its end
        return False

    def _on_current(self, index: int):
        shown = self._stack.widget(index)
        self._pages = [page for page in self._pages if page is not shown]

    def _next(self):
        shown = self._stack.currentWidget()
        if shown is None or not shown.isVisible():
            return   # the window shows later: its first resize comes here again
        for page in self._pages:
            if page.geometry() != shown.geometry():
                lay_out_unseen(page, shown.geometry())
                self._timer.start(0)   # the next page in an event of its own
                return


def lay_out_unseen(page: QWidget, geometry: QRect):
    """`page` (hidden) laid out at `geometry`, never drawn. A widget never shown has its
    children laid out at its first show only, and a hidden widget's layouts wait for its show:
    so it is shown, its layouts' requests answered until its widgets stay where they are (a
    scroll area's layout asks its content's again), and hidden, all in this event and with
    updates off: nothing of it is drawn, nothing beneath it drawn again."""
    widgets = [page, *page.findChildren(QWidget)]
    page.setGeometry(geometry)
    page.setUpdatesEnabled(False)
    page.show()
    placed = None
    for _ in range(SETTLE_PASSES):
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        now = [widget.geometry() for widget in widgets]
        if now == placed:
            break
        placed = now
    page.hide()
    page.setUpdatesEnabled(True)
