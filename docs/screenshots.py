"""Make the README screenshots: the window on the built-in demo, light and dark, at 1280×800 and
1600×1000 (`-1600` in the file name).

    python docs/screenshots.py            # writes docs/img/*.png

Runs offscreen (no display needed). Each shot is taken after the window has settled, so what
you see is what a user sees after pressing Run, and after clicking the first fix.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "img"
TIMEOUT_MS = 300_000
SIZES = ((1280, 800), (1600, 1000))


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Keep the user's recent files and autosave out of it.
    os.environ["FP16STUDIO_CONFIG_DIR"] = tempfile.mkdtemp(prefix="fp16studio-shots-")
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtGui import QFont
    from PySide6.QtWidgets import QApplication

    from fp16studio.gui import MainWindow
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

    def settle():
        for _ in range(5):
            app.processEvents()

    def shoot(window, name):
        settle()
        path = OUT / f"{name}.png"
        window.grab().save(str(path))
        print("wrote", path)

    for (width, height), scheme in [(size, scheme) for size in SIZES for scheme in ("light", "dark")]:
        suffix = "" if width == 1280 else f"-{width}"
        Theme(app, scheme)
        window = MainWindow()
        window._confirm = lambda title, text: True   # closing discards the demo's applied fix
        window.resize(width, height)
        window.show()
        wait_for(condition=lambda: window.spec is not None and not window.worker.pending())
        window.run_diagnosis()
        wait_for(window.diagnosisFinished)
        window.bottom_tabs.setCurrentWidget(window.log)
        shoot(window, f"diagnosis-{scheme}{suffix}")
        if not suffix:
            window.run_benchmark(["float32", "float16", "bfloat16"])
            wait_for(window.benchmarkFinished)
            shoot(window, f"compare-{scheme}")
            window.main_tabs.setCurrentWidget(window.tensors)
        if scheme == "light" and not suffix:
            window.findings.view.setCurrentIndex(window.findings.model.index(0, 0))
            fix_id = window.findings.detail.fix_buttons[0].property("fixId")
            window.apply_fix(fix_id)
            wait_for(window.diagnosisFinished)
            window.bottom_tabs.setCurrentWidget(window.history)
            window.tensors.only_problems.setChecked(False)
            shoot(window, "fixed-light")
            window.main_tabs.setCurrentWidget(window.preview)
            shoot(window, "dataset-light")
        window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
