"""How responsive the window stays: time to a shown window, and the longest event-loop stall
during a full session on the built-in demo (open, run, apply the first fix, run clean).

A 5 ms heartbeat timer runs on the GUI thread; any gap between beats beyond that is time the
event loop could not serve the user. Targets: window ready in under 1.5 s, no stall over 50 ms.
The window is ready when its first paint is done (the user sees it from then on), and the
heartbeat starts then: its making, showing and first paint are its time to be ready, not stalls.
Stalls are reported per phase: "startup" is while the engine process loads torch and builds the
demo after the window is shown (see the engine's warm-up task), "run" is from Run to the clean result,
"bench" (with --bench) from then to the end of the benchmark; with --large, "open" is opening a
spec on the 640-layer BERT of benchmarks/_models.py, "large" from pressing Run until its result,
33k tensors (10k parameters, 23k activations), is shown, and then what a user does next, each
step an event of its own after a pause: "expand" (show the Tensors tab, expand the model and its
widest module, scroll to the end), "filter" (a name, only problems, clear) and "rerun" (Run
again until the tree is refreshed).

With --load N, N busy processes (a `while` loop) run beside the app for the whole session,
as other work on the machine would: the figures then say what a loaded machine's user gets. Each
stall is reported with the GUI thread's own CPU time in it (`cpu` beside `longest`): a stall
with little CPU is the thread waiting (the scheduler, the GIL), one with as much CPU as time is
the window's own work. `most_cpu` is the most CPU the GUI thread spent between two beats in the
phase: the window's longest piece of work, which a load stretches but does not change. --why
names the outermost GUI-thread events that ran longest inside the stalls over the target
(receiver, event, how many events were delivered inside it, wall and CPU milliseconds), and the
garbage collector's passes that ended inside them (generation, thread, objects freed).
--profile FILE writes a cProfile of the GUI thread from Run to the clean result (pstats; the
profiled Python runs slower, so that run's stalls are the profile's, not the window's);
--profile-phase startup or bench profiles that phase instead (bench: to the result's paint).

With --remote, the window's engine runs on a box over ssh (the Engine selector's host): an
OpenSSH server started on 127.0.0.1 for the run (tests/remote_box.py), or --host HOST (with
--remote-python PY) of your ssh config; the session is the same, its results come through the
channel, and "startup" includes connecting and the box's engine loading torch.

The imported package's bytecode is compiled first, as `pip install` leaves it.

    python benchmarks/gui_responsiveness.py [--bench] [--large] [--load N] [--why] [--json]
                                            [--profile FILE [--profile-phase PHASE]]
                                            [--remote | --host HOST [--remote-python PY]]

Run by hand (or on a GPU machine); this is a measurement, not a test with timed asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

# The app as installed: pip writes each module's bytecode at install, where a checkout run under
# PYTHONDONTWRITEBYTECODE compiles every module of the package from source at each import (on
# the import thread, holding the GIL the window waits for). Done before the clock starts.
subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                *importlib.util.find_spec("fp16studio").submodule_search_locations], check=True)
START = time.perf_counter()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _models

HEARTBEAT_MS = 5
READY_TARGET_S = 1.5
STALL_TARGET_MS = 50.0
STEP_PAUSE_MS = 400     # between a user's steps: time for a filter's debounce and the paint after


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="also run the benchmark (slower)")
    parser.add_argument("--large", action="store_true",
                        help="also run a diagnosis whose result holds 33k tensors")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--tree", type=int, default=20_000, metavar="N",
                        help="also time the tensor tree on a synthetic model of N tensors")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="N busy processes beside the app for the whole session")
    parser.add_argument("--why", action="store_true",
                        help="name the longest event handlers inside the stalls over the target")
    parser.add_argument("--profile", metavar="FILE",
                        help="cProfile the GUI thread during the run phase into FILE (pstats); "
                             "its Python calls run slower, so read its stalls as the profile's")
    parser.add_argument("--profile-phase", choices=("startup", "run", "bench"), default="run",
                        help="the phase --profile covers (default: run)")
    parser.add_argument("--remote", action="store_true",
                        help="the engine on a box over ssh: an sshd on 127.0.0.1 started for it")
    parser.add_argument("--host", help="the engine on HOST over your ssh")
    parser.add_argument("--remote-python", default=None, metavar="PY",
                        help="with --host: the Python there (default python3)")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # Busy until this process is gone: killed rather than ended, it runs no `finally`.
    busy_while_parent = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
    load = [subprocess.Popen([sys.executable, "-c", busy_while_parent]) for _ in range(args.load)]
    try:
        if args.remote:
            return _on_loopback_box(args)
        return _session(args)
    finally:
        for busy in load:
            busy.kill()
            busy.wait()


def _on_loopback_box(args) -> int:
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from remote_box import running_box

    with tempfile.TemporaryDirectory(prefix="fp16studio-bench-box-") as folder, \
            running_box(Path(folder)) as box:
        os.environ["FP16STUDIO_SSH_COMMAND"] = box.ssh_command
        args.host, args.remote_python = "box", box.python
        return _session(args)


def _session(args) -> int:
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication

    events: list[tuple[float, float, float, str]] = []   # (end, wall ms, CPU ms, what)
    app = _timed_application(events, sys.argv[:1]) if args.why else QApplication(sys.argv[:1])
    collections = _timed_collections() if args.why else []
    from fp16studio.gui.theme import Theme

    Theme(app)
    from fp16studio.gui import MainWindow

    window = MainWindow()
    from fp16studio.gui.file_actions import DISCARD

    window._ask_unsaved = lambda title, text: DISCARD   # closing at the end drops the applied fix
    window.show()
    profile = _PhaseProfile(args.profile, args.profile_phase)
    gaps: list[tuple[str, float, float, float]] = []   # (phase, gap ms, its CPU ms, its end)
    phase = ["startup"]
    clock = QElapsedTimer()
    last = [0, 0.0]
    ready = {}
    torch_at_ready = {}

    def on_screen():
        """The window is ready once its first paint is done (the event after its first expose):
        the user sees it from then on, and from then on a gap between beats is a stall. Before
        it, the window's making, showing and first paint are its time to be ready."""
        ready.update(s=time.perf_counter() - START, cpu=time.thread_time())
        torch_at_ready.setdefault("loaded", "torch" in sys.modules)
        clock.start()
        last[:] = [clock.nsecsElapsed(), time.thread_time()]
        heartbeat.start()
        profile.start("startup")   # the window shown: the later pages' parts, the engine's start

    first_expose = _first_expose_filter(on_screen)
    window.windowHandle().installEventFilter(first_expose)

    def beat():
        now, cpu = clock.nsecsElapsed(), time.thread_time()
        gaps.append((phase[0], (now - last[0]) / 1e6, (cpu - last[1]) * 1000, time.perf_counter()))
        last[:] = [now, cpu]

    heartbeat = QTimer(interval=HEARTBEAT_MS, timeout=beat)
    steps: list[tuple[str, float]] = []
    step_start = [time.perf_counter()]

    def mark(name):
        now = time.perf_counter()
        steps.append((name, round(now - step_start[0], 3)))
        step_start[0] = now

    def after_first(doc):
        mark("diagnose (error expected)" if not doc["ok"] else "diagnose")
        window.diagnosisFinished.disconnect(after_first)
        window.diagnosisFinished.connect(after_fix)
        fix_id = doc["findings"][0]["fixes"][0]["id"]
        # The user's click on the fix, in an event of its own after a pause, as it comes: the
        # result's handling and paint, and the click's, are two waits, not one.
        QTimer.singleShot(STEP_PAUSE_MS, lambda: window.apply_fix(fix_id))

    def after_fix(doc):
        mark("apply fix + diagnose" + (" (clean)" if doc["ok"] else " (still errors)"))
        # The next phase after a pause, as a user's next click would come: the result's own
        # handling and paint stay in the run phase.
        QTimer.singleShot(STEP_PAUSE_MS, lambda: (profile.stop("run"), (bench if args.bench else large)()))

    def bench():
        phase[0] = "bench"
        profile.start("bench")
        window.benchmarkFinished.connect(
            lambda _doc: (mark("benchmark"),
                          QTimer.singleShot(STEP_PAUSE_MS, lambda: (profile.stop("bench"), large()))))
        window.run_benchmark()

    def large():
        if not args.large:
            return finish()
        from _models import model_dir

        from fp16studio.core.spec.value import PipelineSpec

        phase[0] = "open"
        window.diagnosisFinished.disconnect(after_fix)
        window.diagnosisFinished.connect(after_large)
        window.controller.start_with(PipelineSpec(model=str(model_dir("bert-wide")),
                                                  dataset="synthetic", samples=2, batch_size=1))
        QTimer.singleShot(STEP_PAUSE_MS, press_run)

    def press_run():
        phase[0] = "large"
        window.run_diagnosis()

    def after_large(_doc):
        mark("large diagnosis" if phase[0] == "large" else "large re-run")
        if phase[0] == "rerun":
            return finish()
        QTimer.singleShot(STEP_PAUSE_MS, lambda: next_step(_large_session(window)))

    def next_step(steps):
        name, action = next(steps)
        phase[0] = name
        action()
        if name != "rerun":   # the re-run goes on when its result is shown (after_large)
            QTimer.singleShot(STEP_PAUSE_MS, lambda: next_step(steps))

    def finish():
        phase[0] = "closing"   # Qt 6's quit() closes the window, which ends the engine process
        app.quit()

    warm = []
    window.worker.jobDone.connect(lambda job, outcome: job.kind == "warm-up" and warm.append(outcome))

    def start_when_ready():
        if window.spec is None or not warm:
            return
        if args.host and window.engine_choice.host is None:   # the demo is open: to the box
            warm.clear()
            window.worker.jobDone.connect(
                lambda job, outcome: job.kind == "engine-report" and warm.append(outcome))
            window.engine_choice.connect_to(args.host, args.remote_python or "python3")
            return
        starter.stop()
        mark("startup: demo + torch loaded (worker)")
        profile.stop("startup")
        phase[0] = "run"
        profile.start("run")
        window.diagnosisFinished.connect(after_first)
        window.run_diagnosis()

    starter = QTimer(interval=10, timeout=start_when_ready)
    starter.start()
    window.diagnosisFailed.connect(lambda message: (print("run failed:", message), app.quit()))
    app.exec()
    heartbeat.stop()
    profile.stop(args.profile_phase)
    window.close()

    tree_ms = _tree_costs(args.tree) if args.tree else None
    result = {
        "window_ready_s": round(ready.get("s", float("nan")), 3),
        # The GUI thread's CPU time until then (the interpreter's start included): the window's
        # own start-up work, which a load stretches but does not change.
        "window_ready_cpu_s": round(ready.get("cpu", float("nan")), 3),
        "torch_imported_at_ready": torch_at_ready.get("loaded"),
        "load_processes": args.load,
        "engine": args.host or "this computer",
        "stalls_ms": {name: _stalls([(g, c) for p, g, c, _ in gaps if p == name])
                      for name in ("startup", "run", "bench", "open", "large", "expand",
                                   "filter", "rerun")
                      if any(p == name for p, *_ in gaps)},
        "steps_s": dict(steps),
        "tree_ms": tree_ms,
        "targets": {"window_ready_s": READY_TARGET_S, "longest_stall_ms": STALL_TARGET_MS},
    }
    if args.why:
        result["why"] = _why(gaps, events, collections)
        result["heaviest_events"] = _heaviest(gaps, events)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    return 0


def _first_expose_filter(then):
    """An event filter for a window's QWindow that calls `then` in the event after the window's
    first expose (the expose paints the window)."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    class FirstExpose(QObject):
        def eventFilter(self, watched, event):
            if event.type() == QEvent.Type.Expose and watched.isExposed():
                watched.removeEventFilter(self)
                QTimer.singleShot(0, then)
            return False

    return FirstExpose()


class _PhaseProfile:
    """cProfile of the GUI thread during one phase (--profile, --profile-phase): a handler's own
    time and the Qt calls it makes (a C++ call's time counts in its Python caller)."""

    def __init__(self, path: str | None, phase: str):
        import cProfile

        self._path, self._phase = path, phase
        self._profiler = cProfile.Profile() if path else None

    def start(self, phase: str):
        if self._profiler and phase == self._phase:
            self._profiler.enable()

    def stop(self, phase: str):
        if self._profiler and phase == self._phase:
            self._profiler.disable()
            self._profiler.dump_stats(self._path)
            self._profiler = None


def _large_session(window):
    """The steps after the large result, as (phase, action): a user's clicks and keys."""
    from fp16studio.gui.roles import NODE_ROLE

    panel = window.tensors
    tree, proxy = panel.tree, panel.proxy

    def widest(parent):
        rows = [proxy.index(r, 0, parent) for r in range(proxy.rowCount(parent))]
        return max(rows, key=lambda index: len(index.data(NODE_ROLE).children))

    yield "expand", lambda: window.main_tabs.setCurrentWidget(panel)
    yield "expand", lambda: tree.expand(proxy.index(0, 0))
    yield "expand", lambda: tree.expand(widest(proxy.index(0, 0)))
    yield "expand", tree.scrollToBottom
    yield "filter", lambda: panel.search.setText("attention")
    yield "filter", lambda: panel.only_problems.setChecked(True)
    yield "filter", panel.clear_filters
    yield "rerun", window.run_diagnosis


def _tree_costs(tensors: int) -> dict:
    """GUI-thread milliseconds for the tensor tree of a model with `tensors` parameters: show it,
    expand a module, filter, and refresh it after a re-run; and its arrival on the worker."""
    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.spec.value import PipelineSpec
    from fp16studio.core.diagnostics.tree import TensorNode, summary
    from fp16studio.core.diagnostics.tree_index import TreeIndex
    from fp16studio.gui.tree_panel import TensorPanel

    def model(seed_dtype):
        root = TensorNode("pipeline", "", "group")
        net = root.add(TensorNode("Net", "model", "module"))
        per_layer = 16
        for layer in range(tensors // per_layer):
            module = net.add(TensorNode(f"layer{layer}", f"layers.{layer}", "module"))
            for i in range(per_layer):
                module.add(TensorNode(f"w{i}", f"layers.{layer}.w{i}", "parameter", shape=(64, 64),
                                      dtype=seed_dtype, device="cpu", bytes=8192,
                                      status="error" if layer == 7 and i == 3 else "ok"))
        return root

    costs = {}

    def timed(name, fn):
        start = time.perf_counter()
        fn()
        QApplication.processEvents()
        costs[name] = round((time.perf_counter() - start) * 1000, 1)

    from PySide6.QtWidgets import QApplication

    panel = TensorPanel()
    panel.resize(900, 600)
    panel.show()
    first, second = model("float16"), model("bfloat16")
    first_index, second_index = TreeIndex(first), TreeIndex(second)
    costs.update(_arrival_costs(first_index))
    # The result's --json document on the GUI thread, its inventory (tree.summary) taken on the
    # worker thread where the result arrived, as the window does.
    spec = PipelineSpec(model="m", dataset="synthetic")
    inventory = summary(first)
    timed("document", lambda: Diagnosis(spec, "cpu", tree=first, inventory=inventory).to_json())
    timed("show", lambda: panel.set_tree(first, first_index))
    net = panel.proxy.index(0, 0)
    timed("expand_model", lambda: panel.tree.expand(net))
    timed("filter_only_problems", lambda: panel.only_problems.setChecked(True))
    timed("filter_clear", lambda: panel.only_problems.setChecked(False))
    costs.update(_fit_costs(panel.tree))
    timed("refresh_after_rerun", lambda: panel.set_tree(second, second_index))
    panel.close()
    return {"tensors": tensors, **costs}


def _fit_costs(tree, rounds: int = 20) -> dict:
    """GUI-thread CPU ms (least of `rounds`) to measure the tree's columns on the rows in view:
    as fit_columns does (the rows' cells, one model call per row), and through the view's
    sizeHintForColumn (the delegate per cell), the way before issue 43's fix, for reference."""
    columns = [c for c in range(tree.header().count()) if c != 0]

    def least(measure):
        spent = []
        for _ in range(rounds):
            start = time.thread_time()
            measure()
            spent.append(time.thread_time() - start)
        return round(min(spent) * 1000, 2)

    # content_width measures every column in one pass over the rows (and returns one).
    return {"fit_measure": least(lambda: tree.content_width(columns[0])),
            "fit_measure_by_delegate": least(lambda: [tree.sizeHintForColumn(c) for c in columns])}


def _arrival_costs(index) -> dict:
    """What a tree costs on its way back from the engine process: the worker thread unpickles
    it and rebuilds its index, while the GUI thread (here a 1 ms sleep loop) waits for the GIL.
    Reports the worker's time and the longest the GUI thread could not run."""
    import pickle
    import threading

    from fp16studio.core.common.gc_pause import gc_paused

    payload = pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL)
    done = threading.Event()
    spent = []

    def arrive():   # as EngineClient._receive does it
        start = time.perf_counter()
        with gc_paused():
            pickle.loads(payload)
        spent.append(time.perf_counter() - start)
        done.set()

    worker = threading.Thread(target=arrive)
    last, longest = time.perf_counter(), 0.0
    worker.start()
    while not done.is_set():
        time.sleep(0.001)
        now = time.perf_counter()
        longest, last = max(longest, now - last - 0.001), now
    worker.join()
    return {"arrival_on_worker": round(spent[0] * 1000, 1), "arrival_longest_gil_wait": round(longest * 1000, 1),
            "payload_mib": round(len(payload) / 2**20, 2)}


def _stalls(gaps: list[tuple[float, float]]) -> dict:
    """The stalls (a gap beyond the heartbeat) of a phase; `cpu`: the GUI thread's CPU time in
    the longest; `most_cpu`: the most CPU time the GUI thread spent in any one gap (its own
    work between two beats, which a competing load stretches but does not change)."""
    stalls = sorted((max(0.0, gap - HEARTBEAT_MS), cpu) for gap, cpu in gaps)
    if not stalls:
        return {}
    (longest, cpu) = stalls[-1]
    return {"longest": round(longest, 1), "cpu": round(cpu, 1),
            "most_cpu": round(max(c for _, c in stalls), 1),
            "p99": round(stalls[int(len(stalls) * 0.99)][0], 1),
            "over_50ms": sum(s > STALL_TARGET_MS for s, _ in stalls), "heartbeats": len(stalls)}


def _timed_application(events, argv):
    import threading

    from PySide6.QtWidgets import QApplication

    class TimedApplication(QApplication):
        """Times the delivery of each outermost event on the GUI thread (wall and thread CPU,
        and how many events were delivered inside it): --why. Events of other threads (the
        worker's, which wait on the engine) and nested deliveries are not timed: they would
        count twice, and timing each costs the GUI thread time of its own."""

        def __init__(self, events, argv):
            super().__init__(argv)
            self._events = events
            self._gui = threading.get_ident()
            self._nested = -1    # events delivered inside the one being timed

        def notify(self, receiver, event):
            if self._nested >= 0 or threading.get_ident() != self._gui:
                self._nested += self._nested >= 0
                return super().notify(receiver, event)
            what = f"{type(receiver).__name__}/{event.type().name}"
            wall, cpu, self._nested = time.perf_counter(), time.thread_time(), 0
            try:
                return super().notify(receiver, event)
            finally:
                spent = (time.perf_counter() - wall) * 1000
                if spent >= 2:
                    self._events.append((time.perf_counter(), spent, (time.thread_time() - cpu) * 1000,
                                         f"{what} ({self._nested} inside)"))
                self._nested = -1
    return TimedApplication(events, argv)


def _timed_collections() -> list[tuple[float, float, str]]:
    """The garbage collector's passes of 2 ms and more, as (end, wall ms, "generation N on
    THREAD, K objects freed"): a pass holds the GIL, and so every thread, whichever runs it."""
    import gc
    import threading

    found, started = [], {}

    def timed(phase, info):
        now = time.perf_counter()
        if phase == "start":
            started[threading.get_ident()] = now
        elif (begun := started.pop(threading.get_ident(), None)) is not None and now - begun >= 0.002:
            found.append((now, (now - begun) * 1000, f"generation {info['generation']} on "
                          f"{threading.current_thread().name}, {info['collected']} freed"))
    gc.callbacks.append(timed)
    return found


def _why(gaps, events, collections=()) -> list[dict]:
    """For each stall over the target: its phase, time and CPU, the longest events that ended
    inside it, and the collector's passes that ended inside it."""
    found = []
    for phase, gap, cpu, end in gaps:
        if gap - HEARTBEAT_MS <= STALL_TARGET_MS:
            continue
        inside = sorted((e for e in events if end - gap / 1000 <= e[0] <= end), key=lambda e: -e[1])
        passes = [f"{what} {wall:.0f} ms" for at, wall, what in collections
                  if end - gap / 1000 <= at <= end]
        found.append({"phase": phase, "stall": round(gap - HEARTBEAT_MS, 1), "cpu": round(cpu, 1),
                      "events": [f"{what} {wall:.0f} ms (cpu {c:.0f})" for _, wall, c, what in inside[:4]],
                      "collections": passes})
    return found


def _heaviest(gaps, events, shown: int = 3) -> dict:
    """Per phase, the GUI-thread events that took the most CPU: the window's own pieces of
    work, load or not (a stall may hold several of them when a load stretches each)."""
    phase_of = []   # (start, end, phase) of each gap
    for phase, gap, _, end in gaps:
        phase_of.append((end - gap / 1000, end, phase))
    found: dict[str, list] = {}
    for end, wall, cpu, what in events:
        phase = next((p for start, stop, p in phase_of if start <= end <= stop), "closing")
        found.setdefault(phase, []).append((cpu, wall, what))
    return {phase: [f"{what} cpu {cpu:.1f} ms (wall {wall:.0f})" for cpu, wall, what in
                    sorted(listed, reverse=True)[:shown]] for phase, listed in found.items()}


if __name__ == "__main__":
    sys.exit(main())
