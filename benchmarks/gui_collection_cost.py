"""What one full pass of Python's garbage collector costs the GUI thread once the window is made,
with the window's start-up frozen out of the collector's passes (as the app does once its import
thread is done and once its last chart page is made, gui/long_lived.py) and without.

A pass holds the GIL over every object it walks: the window keeps some 85 000 for its life.
Each mode runs in a process of its own: the window is made offscreen, its pages are waited for,
then ROUNDS passes are timed in the GUI thread's CPU time (a load stretches wall time, not this).

    python benchmarks/gui_collection_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODES = ("not-frozen", "frozen")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)   # one child's
    args = parser.parse_args(argv)
    if args.mode:
        print(json.dumps(_measure(args.mode, args.rounds)))
        return 0
    for mode in MODES:
        child = subprocess.run([sys.executable, __file__, "--mode", mode, "--rounds", str(args.rounds)],
                               capture_output=True, text=True, timeout=300,
                               env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
        figures = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"{mode:>10}: {figures['tracked']:>6} objects tracked, {figures['frozen']:>6} frozen; "
              f"a full pass {figures['median_ms']:.2f} ms of CPU (median; "
              f"{min(figures['cpu_ms']):.2f}-{max(figures['cpu_ms']):.2f})")
    return 0


def _measure(mode: str, rounds: int) -> dict:
    import gc
    import statistics

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    import fp16studio.gui.later_pages as later_pages
    import fp16studio.gui.main_window as main_window

    if mode == "not-frozen":
        main_window.keep_lasting_out_of_collections = lambda: None
        later_pages.keep_lasting_out_of_collections = lambda: None
    app = QApplication([])
    window = main_window.MainWindow()
    window.resize(1280, 760)
    window.show()
    result = {}

    def measure():
        cpu = []
        for _ in range(rounds):
            start = time.thread_time()
            gc.collect()
            cpu.append((time.thread_time() - start) * 1000)
        result.update(tracked=len(gc.get_objects()), frozen=gc.get_freeze_count(), cpu_ms=cpu,
                      median_ms=statistics.median(cpu))
        window.close()
        app.quit()

    def when_made():
        if all(window.pages.made(name) is not None for name in ("compare", "drift")):
            waiting.stop()
            QTimer.singleShot(500, measure)   # the freeze comes an idle check after the last page
    waiting = QTimer(interval=100, timeout=when_made)
    waiting.start()
    app.exec()
    return result


if __name__ == "__main__":
    sys.exit(main())
