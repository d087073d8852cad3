"""With no usable display the app says so in one line and exits 2, instead of Qt's abort."""

import os
import subprocess
import sys

from fp16studio.display import XCB_LIBRARIES, why_no_window


def everything(name):
    return f"lib{name}.so"


def test_no_display_is_one_line_naming_what_works_without_one():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    proc = subprocess.run([sys.executable, "-m", "fp16studio"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("fp16studio: ")
    assert "no display" in proc.stderr and "fp16studio diagnose demo:map-cast" in proc.stderr


def test_a_missing_xcb_library_is_named_with_its_package():
    def without_icccm(name):
        return None if name in ("xcb-icccm", "xcb-keysyms") else everything(name)

    line = why_no_window({"DISPLAY": ":0"}, "linux", without_icccm)
    assert "libxcb-icccm4 libxcb-keysyms1" in line and "demo:map-cast" in line
    assert why_no_window({"DISPLAY": ":0"}, "linux", everything) is None
    assert set(XCB_LIBRARIES.values()) >= {"libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"}


def test_headless_platforms_wayland_and_other_systems_need_no_x_display():
    assert why_no_window({"QT_QPA_PLATFORM": "offscreen"}, "linux", lambda n: None) is None
    assert why_no_window({"QT_QPA_PLATFORM": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, "linux",
                         lambda n: None) is None
    assert "QT_QPA_PLATFORM=wayland" in why_no_window({"WAYLAND_DISPLAY": "wayland-0"}, "linux", everything)
    assert why_no_window({}, "darwin", lambda n: None) is None
