"""What the Compare tab's live plot costs the GUI thread per redraw while a benchmark streams
samples: each tick's new samples set on the curves and the events after (the scene's dirty
items and the repaint), with the plot's axes drawn from their cache (as the window does) and
without it (each repaint replays every axis's ticks, labels and grid: the reference), in the
same process.

Five variants of 160 timed calls each, four samples per tick, iterations counted per variant
as `bench` streams them (the x range stops growing after the first variant), throughput within
a fixed band (the y range settles).

    python benchmarks/live_plot_repaint.py [--rounds N] [--json]

Run by hand; a measurement, not a test with timed asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

VARIANTS = ("float32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16")
CALLS, PER_TICK = 160, 4


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="sessions of each way (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication, QGraphicsItem

    app = QApplication(sys.argv[:1])
    from fp16studio.gui.theme import Theme

    Theme(app)
    ways = {"axes_cached": QGraphicsItem.CacheMode.DeviceCoordinateCache,
            "axes_replayed": QGraphicsItem.CacheMode.NoCache}
    ticks: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way, mode in ways.items():
            ticks[way] += _session(app, mode)
    result = {way: {"ticks": len(ms), "min_ms": round(min(ms), 2),
                    "median_ms": round(statistics.median(ms), 2),
                    "p90_ms": round(sorted(ms)[int(0.9 * len(ms))], 2), "total_ms": round(sum(ms))}
              for way, ms in ticks.items()}
    result["median_ratio"] = round(result["axes_cached"]["median_ms"] / result["axes_replayed"]["median_ms"], 2)
    result["total_ratio"] = round(result["axes_cached"]["total_ms"] / result["axes_replayed"]["total_ms"], 2)
    print(json.dumps(result, indent=2) if args.json else
          "\n".join(f"{key:>14}: {value}" for key, value in result.items()))
    return 0


def _session(app, mode) -> list[float]:
    """GUI-thread CPU (ms) of each redraw tick of one benchmark's live plot."""
    import pyqtgraph as pg

    from fp16studio.gui.compare import CompareView

    view = CompareView()
    view.resize(1100, 800)
    view.show()
    app.processEvents()
    for item in view.plot.scene().items():
        if isinstance(item, pg.AxisItem):
            item.setCacheMode(mode)
    spent = []
    for name in VARIANTS:
        for tick in range(CALLS // PER_TICK):
            for k in range(PER_TICK):
                view.add_sample({"variant": name, "iteration": tick * PER_TICK + k + 1,
                                 "samples_per_s": 400 + 50 * random.random()})
            cpu = time.thread_time()
            view._redraw()   # what the redraw timer does
            app.processEvents()
            spent.append((time.thread_time() - cpu) * 1000)
    view.close()
    view.deleteLater()
    app.processEvents()
    return spent


if __name__ == "__main__":
    sys.exit(main())
