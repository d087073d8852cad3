"""Whether the window can open here, asked before Qt is: without a display, or without a library
Qt's xcb plugin needs, Qt aborts the process (exit 134) with advice to reinstall it. The frozen
program carries those libraries itself (PyInstaller collects what the plugin links, and the
plugin loads those copies): there, one in the bundle counts as installed."""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

# What Qt 6's xcb plugin loads, and the Debian/Ubuntu package that ships each library.
XCB_LIBRARIES = {
    "xcb-cursor": "libxcb-cursor0", "xcb-icccm": "libxcb-icccm4", "xcb-keysyms": "libxcb-keysyms1",
    "xcb-image": "libxcb-image0", "xcb-render-util": "libxcb-render-util0",
    "xcb-shape": "libxcb-shape0", "xcb-randr": "libxcb-randr0", "xcb-xkb": "libxcb-xkb1",
    "xkbcommon-x11": "libxkbcommon-x11-0",
}
# Platforms that need no screen (tests, screenshots) or bring their own.
_HEADLESS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "vkkhrdisplay", "minimalegl")
WITHOUT_ONE = "without one, the command line works: fp16studio diagnose demo:map-cast"


def bundled_library(name: str, bundle: str | None = None) -> bool:
    """Whether the frozen program's folder (`sys._MEIPASS`) holds lib`name`.so*."""
    bundle = bundle or getattr(sys, "_MEIPASS", None)
    return bool(bundle) and any(Path(bundle).glob(f"lib{name}.so*"))


def why_no_window(environ=os.environ, platform: str = sys.platform,
                  find_library=ctypes.util.find_library, bundled=bundled_library) -> str | None:
    """None when the window can open; else one line: what is missing and what works without it."""
    if platform != "linux":
        return None
    chosen = environ.get("QT_QPA_PLATFORM", "").split(":")[0].strip().lower()
    if chosen.startswith(_HEADLESS) or (chosen.startswith("wayland") and environ.get("WAYLAND_DISPLAY")):
        return None
    if not environ.get("DISPLAY"):
        hint = " (WAYLAND_DISPLAY is set: try QT_QPA_PLATFORM=wayland)" if environ.get("WAYLAND_DISPLAY") else ""
        return ("the window needs a desktop session, and there is no display here (DISPLAY is not "
                f"set){hint}; {WITHOUT_ONE}")
    missing = [package for library, package in XCB_LIBRARIES.items()
               if not find_library(library) and not bundled(library)]
    if missing:
        return (f"the window needs system libraries that are not installed: {' '.join(missing)} "
                f"(e.g. sudo apt-get install {' '.join(missing)}); {WITHOUT_ONE}")
    return None
