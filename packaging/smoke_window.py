"""A window Run of the frozen program, for packaging/smoke.sh: the window opens (offscreen),
Run diagnoses its demo pipeline, File → Trace Script traces demo:map-cast, and it closes.

The frozen program has no Python of its own to run this with, but `fp16studio trace` runs a
script in its bundled Python, where the window's code is:

    QT_QPA_PLATFORM=offscreen dist/fp16studio/fp16studio trace packaging/smoke_window.py

(`python packaging/smoke_window.py` runs it from a source tree.) The window's engine process
starts as the frozen program, as it does for a user. Prints one line per step and
"smoke-window: ok"; exits 1 on the first step that fails.
"""

import os
import sys
import time

LIMIT_S = 300.0


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from fp16studio.gui import MainWindow

    app = QApplication.instance() or QApplication([sys.argv[0]])
    # Closing asks before discarding unsaved work, and a received spec asks before its code
    # runs: modal dialogs nobody answers offscreen.
    MainWindow._confirm = lambda self, title, text: True
    MainWindow._ask_unsaved = lambda self, title, text: "discard"
    start = time.perf_counter()
    window = MainWindow()
    window.show()
    print(f"window: open in {time.perf_counter() - start:.2f} s", flush=True)
    failures = []
    steps = iter([("Run (the demo pipeline)", window.run_diagnosis, "findings"),
                  ("File → Trace Script (demo:map-cast)",
                   lambda: window.open_script("demo:map-cast"), "script")])
    current = {}

    def next_step():
        step = next(steps, None)
        if step is None:
            window.close()
            app.quit()
            return
        name, begin, key = step
        current.update(name=name, key=key, start=time.perf_counter())
        if not begin():
            fail(f"{name}: did not start")

    def finished(doc):
        seconds = time.perf_counter() - current["start"]
        if current["key"] not in doc:
            return fail(f"{current['name']}: the document has no {current['key']!r}")
        codes = [finding["code"] for finding in doc.get("findings", [])]
        print(f"window: {current['name']}: {'ok' if doc.get('ok') else 'problems found'} "
              f"{codes} in {seconds:.2f} s", flush=True)
        QTimer.singleShot(0, next_step)

    def fail(message):
        failures.append(message)
        print(f"window: FAILED: {message}", flush=True)
        window.close()
        app.quit()

    window.diagnosisFinished.connect(finished)
    window.diagnosisFailed.connect(lambda message: fail(f"{current.get('name')}: {message}"))
    QTimer.singleShot(0, next_step)
    QTimer.singleShot(int(LIMIT_S * 1000), lambda: fail(f"no answer within {LIMIT_S:g} s"))
    app.exec()
    print("smoke-window: " + ("FAILED" if failures else "ok"), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
