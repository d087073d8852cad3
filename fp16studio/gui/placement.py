"""Where the window opens, and how big: where the user left it (remembered in window.ini), else
1280x800 or the screen's available room less a window manager's frame, whichever is smaller. A
fixed 1280x800 on a 1280x800 screen put the status bar under the bottom edge: the title bar
takes its height from the screen, not from the window."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QWidget

from .file_actions import settings

PREFERRED = QSize(1280, 800)
# A title bar and borders, which the window manager adds outside the size asked for (openbox's
# title bar is 26 px, GNOME's 37): a guess, until the window is shown.
FRAME = QSize(16, 48)
GEOMETRY = "geometry"


def place(window: QWidget):
    """Give a new window the size and place it was closed with, or its first size on its screen."""
    saved = settings().value(GEOMETRY)
    if saved is not None and window.restoreGeometry(saved):   # Qt keeps it on a screen
        return
    room = window.screen().availableGeometry()
    window.resize(PREFERRED.boundedTo(room.size() - FRAME))
    window.move(room.topLeft())


def remember(window: QWidget):
    settings().setValue(GEOMETRY, window.saveGeometry())
