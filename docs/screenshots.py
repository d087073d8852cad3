"""Make the README screenshots: the window on the built-in demo, light and dark, at 1280×800 and
1600×1000 (`-1600` in the file name).

    python docs/screenshots.py              # writes docs/img/*.png and resources/help/*.png
    python docs/screenshots.py --offscreen  # no X server: Qt's offscreen platform

Where Xvfb and a window manager (openbox, or another of WINDOW_MANAGERS) are installed, each size
gets an X server of its own, that size, with the window manager running: the window is
maximised by the window manager as a user's would be, and the shot is the whole screen, title
bar included. What a user sees is then what the picture shows: a window that does not fit its
screen, or a panel pushed off it, shows in the picture as well. Without them it falls back to
the offscreen platform (and says so), where nothing refuses a size and the window is grabbed
alone. Each shot is taken after the window has settled: after pressing Run, after a benchmark,
after clicking the first fix. Look at each picture before committing it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "img"
# Help › Getting Started's pictures (fp16studio/gui/getting_started.py), shipped in the package.
HELP = Path(__file__).resolve().parent.parent / "resources" / "help"
TIMEOUT_MS = 300_000
SIZES = ((1280, 800), (1600, 1000))
WINDOW_MANAGERS = ("openbox", "xfwm4", "fluxbox", "icewm", "metacity")


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--shoot" in args:                       # a child, inside its X server (or offscreen)
        width, height = map(int, args[args.index("--shoot") + 1].split("x"))
        return shoot_all(width, height, whole_screen="--offscreen" not in args)
    server, manager = shutil.which("Xvfb"), next(filter(None, map(shutil.which, WINDOW_MANAGERS)), None)
    if "--offscreen" in args or not (server and manager):
        if "--offscreen" not in args:
            print("No Xvfb and window manager here (apt-get install xvfb openbox): taking the "
                  "shots offscreen, where the window is grabbed alone and nothing limits its size.")
        return max(_child([f"{w}x{h}", "--offscreen"], {"QT_QPA_PLATFORM": "offscreen"}) for w, h in SIZES)
    failed = 0
    for width, height in SIZES:
        with x_server(server, manager, width, height) as display:
            failed |= _child([f"{width}x{height}"], {"DISPLAY": display, "QT_QPA_PLATFORM": "xcb"})
    return failed


def _child(args, env) -> int:
    environ = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.run([sys.executable, __file__, "--shoot", *args], env={**environ, **env}).returncode


class x_server:
    """An Xvfb of `width`x`height` with a window manager, for the time of a `with`."""

    def __init__(self, server, manager, width, height):
        self.command = [server, "-displayfd", "1", "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp"]
        self.manager = manager
        self.processes = []

    def __enter__(self) -> str:
        xvfb = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.processes.append(xvfb)
        display = ":" + xvfb.stdout.readline().strip()   # -displayfd: the number it took
        wm = subprocess.Popen([self.manager], env={**os.environ, "DISPLAY": display},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.processes.append(wm)
        time.sleep(1.0)   # the window manager takes the screen before the window maps
        return display

    def __exit__(self, *exc):
        for process in reversed(self.processes):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def shoot_all(width: int, height: int, whole_screen: bool) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Keep the user's recent files and autosave out of it.
    os.environ["FP16STUDIO_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fp16studio-shots-")
    from PySide6.QtCore import QEventLoop, Qt, QTimer
    from PySide6.QtGui import QFont, QGuiApplication
    from PySide6.QtWidgets import QApplication

    from fp16studio.gui import MainWindow
    from fp16studio.gui.getting_started import PICTURE_WIDTH
    from fp16studio.gui.theme import Theme

    app = QApplication(sys.argv[:1])
    app.setFont(QFont("DejaVu Sans", 9))
    OUT.mkdir(parents=True, exist_ok=True)

    def wait_for(signal=None, condition=None):
        loop = QEventLoop()
        timer = QTimer(singleShot=True, interval=TIMEOUT_MS, timeout=loop.quit)
        timer.start()
        if signal is not None:
            signal.connect(lambda *_: loop.quit())
            loop.exec()
        else:
            poll = QTimer(interval=20, timeout=lambda: condition() and loop.quit())
            poll.start()
            loop.exec()
            poll.stop()
        if not timer.isActive():
            raise SystemExit("timed out waiting for the window")
        timer.stop()

    def settle(seconds=0.3):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.02)

    def shoot(window, name=None, help_name=None):
        """The README's picture `name`, and `help_name` Getting Started's picture of this step
        (the light 1280 pass)."""
        settle()
        screen = QGuiApplication.primaryScreen()
        # The whole screen, the window manager's frame included; offscreen, the window alone.
        picture = screen.grabWindow(0) if whole_screen else window.grab()
        if name:
            picture.save(str(OUT / f"{name}.png"))
            print("wrote", OUT / f"{name}.png", flush=True)
        if help_name and scheme == "light" and not suffix:
            HELP.mkdir(parents=True, exist_ok=True)
            small = picture.scaledToWidth(PICTURE_WIDTH, Qt.TransformationMode.SmoothTransformation)
            small.save(str(HELP / f"{help_name}.png"))
            print("wrote", HELP / f"{help_name}.png", flush=True)

    suffix = "" if width == 1280 else f"-{width}"
    for scheme in ("light", "dark"):
        Theme(app, scheme)
        window = MainWindow()
        window._ask_unsaved = lambda title, text: "discard"   # closing drops the demo's applied fix
        if whole_screen:
            window.showMaximized()   # the window manager sizes it to the screen, as a user's
        else:
            window.resize(width, height)
            window.show()
        wait_for(condition=lambda: window.spec is not None and not window.worker.pending())
        if scheme == "light" and not suffix:
            shoot(window, help_name="start-1-pick")
        window.run_diagnosis()
        wait_for(window.diagnosisFinished)
        window.bottom_tabs.setCurrentWidget(window.log)
        shoot(window, f"diagnosis-{scheme}{suffix}", "start-2-run")
        if not suffix:
            window.run_benchmark(["float32", "float16", "bfloat16"])
            wait_for(window.benchmarkFinished)
            window.compare.finish_drawing()
            shoot(window, f"compare-{scheme}", "start-4-compare")
            window.main_tabs.setCurrentWidget(window.tensors)
        if scheme == "light" and not suffix:
            window.findings.view.setCurrentIndex(window.findings.model.index(0, 0))
            fix_id = window.findings.detail.fix_buttons[0].property("fixId")
            window.apply_fix(fix_id)
            wait_for(window.diagnosisFinished)
            window.bottom_tabs.setCurrentWidget(window.history)
            window.tensors.only_problems.setChecked(False)
            shoot(window, "fixed-light", "start-3-fix")
            window.main_tabs.setCurrentWidget(window.preview)
            shoot(window, "dataset-light")
            window.main_tabs.setCurrentWidget(window.tensors)
            window.export_script(Path(tempfile.mkdtemp(prefix="fp16studio-shots-")) / "fixed.py")
            wait_for(window.exportFinished)
            window.bottom_tabs.setCurrentWidget(window.log)
            shoot(window, help_name="start-5-export")
        window.close()
        settle()
    return 0


if __name__ == "__main__":
    sys.exit(main())
