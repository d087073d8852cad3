"""The session, adapted to Qt: one SessionController per window.

The session itself (the spec, its file, the findings, benchmark and drift slots, and what
follows from them) is a Qt-free SessionState (fp16studio.session_state). The controller owns it
with the undo stack (a stack of specs) and the worker that runs engine tasks: it runs, traces,
compares, fixes, benchmarks, exports, opens, saves and autosaves, and tells the widgets through
signals. It asks the user nothing itself: `ask_consent` and the dialogs are the window's, so a
script or a test drives the whole loop through this object.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoStack

from fp16studio.core import InputError
from fp16studio.core.present import vocabulary
from fp16studio.core.present.vocabulary import STAGES
from fp16studio.engine.client import ENGINE_LOST
from fp16studio.engine.code_to_run import SCRIPT_CODE_TASK, SPEC_CODE_TASK
from fp16studio.engine.tasks import Diagnosed
from fp16studio.session_state import NO_MODEL, SAVED, SessionState, arrived
from .history import SpecChange
from .fp8_view import plan_said
from .log_panel import script_output_entries
from .long_lived import keep_out_of_collections
from .session_files import SessionFiles
from .worker import Job, WorkerHost

__all__ = ["DIAGNOSES", "NO_MODEL", "RUNS", "SCRIPT_LINES_SHOWN", "SessionController"]

# A script's output lines per batch (one every 50 ms at most) that reach the Log.
SCRIPT_LINES_SHOWN = 200
RUNS = ("diagnose", "bench", "trace", "drift", "fp8")   # the jobs Run/Cancel and the progress bar are about
# The jobs whose failure is diagnosisFailed (reading the code a run runs, on the box, too).
DIAGNOSES = ("diagnose", "trace", "trace-launch", "code-to-run")
STALE = "The spec changed since the last run: Run to refresh."
PROGRESS = {"bench": "Benchmarking…", "trace": "Tracing the script…", "drift": "Comparing with float32…",
            "fp8": "Planning FP8…"}
# What a run waits for when it is queued behind another job of the engine's.
AHEAD = {"demo": "the demo pipeline is ready", "open": "the file is open",
         "warm-up": "the engine has loaded torch", "preview": "the dataset preview is read",
         "export": "the script is exported", "environment": "the engine has loaded torch"}
# The jobs after which the engine has imported torch (a trace's script runs in a process of its
# own), and the task that then reports its versions to the status bar (in the engine: named,
# not imported here).
LOAD_TORCH = ("warm-up", "demo", "diagnose", "bench", "drift", "fp8")
ENVIRONMENT_TASK = "fp16studio.core.diagnostics.diagnosis:environment_info"
_windows = iter(range(1, 1 << 30))


def _state(name):
    return property(lambda self: getattr(self.state, name))


def _arrived(result):
    """A run's Diagnosed or a ScriptTrace where it arrives (the worker thread): (diagnosis,
    tree index, gpu memory, document), its inventory summarised, a large tree kept out of the
    garbage collector's passes."""
    if isinstance(result, Diagnosed):
        result = arrived(result.diagnosis, result.gpu_memory)
    else:
        result = arrived(result)
    keep_out_of_collections(result[0].inventory)
    return result


class SessionController(SessionFiles, QObject):
    # What the session state announces (STATE_SIGNALS), each with its value now.
    specChanged = Signal(object)          # the spec now current
    diagnosisChanged = Signal(object)     # Diagnosis, or None when what was shown is gone
    # What the findings panel lists and says changed with no new result: a trace started (the
    # slot's findings are not the script's) or ended without one (they are back).
    findingsChanged = Signal(object)      # the script being traced, or None
    benchChanged = Signal(object)         # BenchResult or None
    benchStale = Signal(bool)             # the figures are of another spec than the current one
    driftChanged = Signal(object)         # DriftResult or None
    driftStale = Signal(bool)             # the drift is of another spec than the current one
    fp8Changed = Signal(object)           # the Fp8Plan or None
    fp8Stale = Signal(bool)               # the plan is of another spec than the current one
    traceChanged = Signal(object)         # the ScriptTrace shown (not yet a pipeline), or None
    deviceChanged = Signal(object)        # where the latest result ran ("cpu", "cuda:0") or None
    continueChanged = Signal(object)      # why Continue as a Pipeline is off (None: it is on)
    # What happened.
    benchSample = Signal(object)          # a live sample of the running benchmark
    driftFinished = Signal(object)        # the drift --json document
    driftFailed = Signal(str)
    fp8Finished = Signal(object)          # the Fp8Plan
    fp8Failed = Signal(str)
    busyChanged = Signal(bool)
    titleChanged = Signal(str)
    progressChanged = Signal(int, int, str)   # value, maximum (0: no steps), label
    statusChanged = Signal(str)
    logged = Signal(str, str)             # level, text
    warned = Signal(str, str)             # title, message: worth a dialog
    opened = Signal()                     # a new spec was adopted (open, demo, new, restore)
    # CONTRACT §5, forwarded by the window.
    diagnosisFinished = Signal(object)
    benchmarkFinished = Signal(object)
    diagnosisFailed = Signal(str)
    exportFinished = Signal(str)
    # A job ended with its engine (a box gone, its process dead): the job's kind, one line.
    # Nothing shown is cleared; the window announces a lost run as failed (CONTRACT §5).
    engineLost = Signal(str, str)
    # The engine's versions (Diagnosis.environment) once it has loaded torch, whatever job did.
    environmentChanged = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.state = SessionState()
        self._closing = self._busy = False
        self._progress_message = self.status = self._title = ""
        # Asked before a spec read from a file runs its preprocess (CONTRACT §6), with what
        # would run; the window makes it a question. Unset, nothing untrusted runs.
        self.ask_consent = lambda question: False
        # The host whose engine runs the jobs (None: this computer; EngineChoice sets it): the
        # code a run would execute there is read and digested by that engine, on the box.
        self.engine_host: str | None = None
        self.engine_where: tuple[str, str] | None = None   # (host, its Python), None: here
        # Asked to open a session made with the engine on (host, python) named `file` while
        # another engine serves: True to open it (the window may switch engines first).
        self.engine_for = lambda host, python, file: True
        self._code_read = None   # (spec or script, trust.CodeToRun) the box read, for one start
        from fp16studio.core.spec.session import autosave_owner

        self.autosave_owner = autosave_owner(next(_windows))
        self._crash_copies = ThreadPoolExecutor(1, "fp16studio-autosave")   # SessionFiles.autosave
        self.undo_stack = QUndoStack(self)
        # Bound methods, not lambdas: disconnected when this object goes, before the stack's
        # own destruction emits cleanChanged.
        self.undo_stack.cleanChanged.connect(self._emit_title)
        self.worker = WorkerHost(self)
        self.worker.jobStarted.connect(self._on_job_started)
        self.worker.jobProgress.connect(self._on_progress)
        self.worker.jobDone.connect(self._on_job_done)
        for event, receiver in self._state_receivers():
            self.state.events.connect(event, receiver)

    def _state_receivers(self):
        """What each of the session state's events reaches: the one table of what follows
        from a change (views connect to these signals; nothing else announces the state)."""
        return (
            ("spec", self.specChanged.emit), ("spec", self._spec_set),
            ("trace", self.traceChanged.emit),
            ("diagnosis", self.diagnosisChanged.emit), ("tracing", self.findingsChanged.emit),
            ("stale", self._say_stale),
            ("bench_result", self.benchChanged.emit), ("bench_stale", self.benchStale.emit),
            ("drift_result", self.driftChanged.emit), ("drift_stale", self.driftStale.emit),
            ("fp8_plan", self.fp8Changed.emit), ("fp8_stale", self.fp8Stale.emit),
            ("device", self.deviceChanged.emit), ("environment", self.environmentChanged.emit),
            ("why_not_continue", self.continueChanged.emit),
            *((name, self._emit_title) for name in ("path", "tracing", "trace", "bench")),
        )

    # -- the state (a SessionState), read through ----------------------------------------------
    spec = _state("spec")
    environment = _state("environment")
    diagnosis = _state("diagnosis")
    diagnosis_doc = _state("diagnosis_doc")
    bench_result = _state("bench_result")
    script_trace = _state("trace")
    session_path = property(lambda self: self.state.path,
                            lambda self, path: setattr(self.state, "path", path))
    # Unsaved: an edit of the spec, or a benchmark's figures (saved with the session).
    dirty = property(lambda self: not self.undo_stack.isClean() or self.state.bench_unsaved)
    closed = property(lambda self: self._closing)

    @property
    def busy(self) -> bool:
        """A run is under way or queued (behind another job, or until the first spec is
        ready): Run is off, Cancel on."""
        return self.state.run_when_ready or any(job.kind in RUNS for job in self.worker.pending())

    @property
    def fixes_enabled(self) -> bool:
        """The findings shown are of the current spec (or a traced script's, whose fixes go into
        a copy of it), and no job runs: one click fixes."""
        shown_trace = self.state.trace is not None and self.state.tracing is None
        return (self.state.fixes_enabled or shown_trace) and not self.busy

    def title(self) -> str:
        return self.state.title(self.dirty)

    def _say(self, text: str):
        self.status = text
        self.statusChanged.emit(text)

    def _emit_title(self, *_):
        title = self.title()
        if title != self._title:
            self._title = title
            self.titleChanged.emit(title)

    # -- the spec -------------------------------------------------------------------------------
    def start_with(self, spec, diagnosis_doc=None, bench_doc=None, path=None):
        """Adopt a freshly opened spec: a new history starts here, nothing of the old one stays."""
        with self.state.events.blocker():
            self.state.start(spec, diagnosis_doc, bench_doc, path)
            self.undo_stack.clear()
        self._started()

    def _started(self):
        state = self.state
        self.undo_stack.clear()
        self.undo_stack.setClean()
        self.opened.emit()
        if state.findings is not None and state.findings.origin == SAVED:
            self._say("Findings from the saved session; Run to refresh them.")
        if state.run_when_ready:
            state.run_when_ready = False
            self.run_diagnosis()
            self._update_busy()   # not started after all: nothing is queued any more

    def restore_session(self, session):
        """Adopt a session (fp16studio.core.spec.session.Session): its spec, findings and figures
        (after `engine_for` agreed, when another engine than this one made it)."""
        if self._engine_agreed(session, session.path.name if session.path else "the restored session"):
            self.start_with(session.spec, session.diagnosis, session.bench, session.path)

    def edit(self, new, text: str):
        """Replace the spec with `new` (undoably)."""
        if self.spec is not None and new != self.spec:
            self.undo_stack.push(SpecChange(self._set_spec, self.spec, new, text))

    def _set_spec(self, spec, step: str | None):
        """Make `spec` current: an edit (`step` None), or an Undo or Redo, which the Log tells:
        what changed and which results (kept with the spec they were made from) are shown."""
        self.state.set_spec(spec)
        if step is not None:
            self.logged.emit("info", f"{step}: {self.state.results_said()}.")

    def _spec_set(self, _spec):
        self._emit_title()
        self.autosave()

    def _say_stale(self, stale: bool):
        """The status bar says the results are of another spec only while they are."""
        if stale:
            self._say(STALE)
        elif self.status == STALE:
            self._say("")

    # -- runs -----------------------------------------------------------------------------------
    def run_diagnosis(self) -> bool:
        """Diagnose the current spec in the engine; `diagnosisFinished(doc)` when done. Called
        before the first spec is ready, the run starts as soon as it is."""
        if self.spec is None:
            self.state.run_when_ready = True
            self._queued("the pipeline is ready")
            return True
        can = self._can_start(self.run_diagnosis)
        if not can:
            return can is None   # None: it starts once the box has read the code it runs
        spec = self.spec
        self.logged.emit("info", f"Run: {spec.model} on {spec.dataset}")
        self._submit("diagnose", (spec,), lambda result: self._on_diagnosis(spec, *result),
                     self._on_diagnosis_error, "Run cancelled.", on_arrival=_arrived,
                     lasting=True)
        return True

    def run_trace(self, path: str, args=(), launch: str | None = None) -> bool:
        """Run the user's script as it is and diagnose what it ran; `diagnosisFinished(doc)` with
        the trace document. Its output lines go to the Log as they come. `launch`: the
        launcher that runs it on many processes (each rank traced, as `trace --launch`)."""
        if self.busy:
            return False
        if self.engine_host is not None and not str(path).startswith("demo:"):
            can = self._consented_script(str(path), lambda: self.run_trace(path, args, launch))
            if not can:
                return can is None
        under = f" under {launch}" if launch else ""
        self.logged.emit("info", f"Trace: {' '.join([str(path), *map(str, args)])}{under}")
        self.state.trace_started(path)
        task, given = ("trace-launch", (launch,)) if launch else ("trace", ())
        self._submit(task, (*given, str(path), tuple(map(str, args))),
                     lambda result: self._on_diagnosis(None, *result), self._on_diagnosis_error,
                     "Trace cancelled.", on_samples=self._on_script_output, on_arrival=_arrived,
                     lasting=True)
        return True

    def run_drift(self, variant: str | None = None) -> bool:
        """Run the spec in float32 and in `variant` (None: its own half precision) on one batch
        and compare module by module; `driftFinished(doc)` when done."""
        can = self._can_start(lambda: self.run_drift(variant))
        if not can:
            return can is None
        spec = self.spec
        self.logged.emit("info", f"Compare with float32: {spec.model}")
        self._submit("drift", (spec, variant), lambda result: self._on_drift(spec, result),
                     self._on_drift_error, "Comparison cancelled.")
        return True

    def run_fp8(self, recipe: str = "tensorwise") -> bool:
        """The FP8 plan of the spec (core.precision.fp8); `fp8Finished(plan)` when done."""
        can = self._can_start(lambda: self.run_fp8(recipe))
        if not can:
            return can is None
        spec = self.spec
        self.logged.emit("info", f"FP8 plan ({recipe}): {spec.model}")
        self._submit("fp8", (spec, recipe), lambda plan: self._on_fp8(spec, plan),
                     self._on_fp8_error, "FP8 plan cancelled.")
        return True

    def _on_fp8(self, spec, plan):
        self.state.took_fp8(spec, plan)
        self.logged.emit("info", plan_said(plan))
        self.fp8Finished.emit(plan)

    def _on_fp8_error(self, message, detail):
        self.state.fp8_failed()
        self.fp8Failed.emit(message)
        self.logged.emit("error", f"FP8 plan failed: {message}\n{detail}".strip())

    def run_benchmark(self, variants=None) -> bool:
        """Measure the precision variants (default: all); `benchmarkFinished(doc)` (its --json
        document) when done, with samples streamed through `benchSample` meanwhile."""
        can = self._can_start(lambda: self.run_benchmark(variants))
        if not can:
            return can is None
        spec = self.spec
        self.state.bench_started()
        self.logged.emit("info", "Benchmark started.")
        self._submit("bench", (spec, variants), lambda result: self._on_benchmark(spec, result),
                     lambda message, detail: self.logged.emit(
                         "error", f"Benchmark failed: {message}\n{detail}".strip()),
                     "Benchmark cancelled.", on_samples=lambda samples: [
                         self.benchSample.emit(sample) for sample in samples])
        return True

    def _submit(self, kind, args, on_result, on_error, cancelled: str, **more):
        job = self.worker.submit(Job(kind, kind, args, on_result=on_result,
                                     on_error=self._unless_engine_lost(kind, on_error),
                                     on_cancel=lambda: self.logged.emit("warning", cancelled), **more))
        ahead = next((other for other in self.worker.pending() if other.id < job.id), None)
        if ahead is not None:   # it starts when that one is done: say so, and Cancel reaches it
            self._queued(AHEAD.get(ahead.kind, "the engine is free"))
        self._update_busy()

    def _unless_engine_lost(self, kind: str, on_error):
        """`on_error` for a job that failed; an engine lost is no failure of the run: every
        result shown stays (they are still of their spec), and one line says what happened."""
        def failed(message, detail):
            if not message.startswith(ENGINE_LOST):
                return on_error(message, detail)
            self.state.engine_lost()
            line = " ".join(message.split())
            self.logged.emit("error", line)
            self._say(line)
            self.engineLost.emit(kind, line)
        return failed

    def _queued(self, until: str):
        self.progressChanged.emit(0, 0, "Queued…")
        self._say(f"Queued: starts when {until}.")
        self._update_busy()

    def apply_fix(self, fix_id: str) -> bool:
        """Apply a fix to the spec it was found for, which must be the current spec (undoably),
        then run that again: a drift's fix compares again, a diagnosis's diagnoses. A fix of
        findings that are stale is refused (False, and the Log says why)."""
        if self.busy:
            return False
        if self.state.trace is not None and self.state.tracing is None:
            return self._trace_fixed_copy(fix_id)
        plan = self.state.plan_fix(fix_id)
        if plan is None:
            self.logged.emit("error", self.state.why_no_fix(fix_id))
            return False
        try:
            new = plan.fixed_spec()
        except InputError as exc:
            self.logged.emit("error", f"Fix {plan.fix.title!r} could not be applied: {exc}")
            return False
        self.logged.emit("info", f"Applied fix: {plan.fix.title}")
        self.edit(new, f"Fix: {plan.fix.title}")
        (self.run_drift if plan.rerun == "drift" else self.run_diagnosis)()
        return True

    def _trace_fixed_copy(self, ask: str) -> bool:
        """A traced script's fix (`ID:LINE`): a copy of the script with it, written beside the
        script under a name no file has (the script itself is never written), then traced as the
        script was (under its launcher, for a launched run). With the engine on a box, the
        script is the box's: the engine writes the copy there."""
        from fp16studio.core.script.proof import write_fixed_copy

        trace = self.state.trace
        given = (trace.script, list(trace.findings), ask)
        if self.engine_host is not None:
            self.worker.submit(Job("fixed-copy", "fixed-copy", given,
                                   on_result=lambda copy: self._trace_copy(trace, copy),
                                   on_error=lambda message, _detail: self._copy_failed(message)))
            return True
        try:
            copy = write_fixed_copy(*given)
        except (InputError, OSError) as exc:
            return self._copy_failed(exc)
        return self._trace_copy(trace, copy)

    def _copy_failed(self, why) -> bool:
        self.logged.emit("error", f"The fix could not be written to a copy of the script: {why}")
        return False

    def _trace_copy(self, trace, copy) -> bool:
        fixes = ", ".join(f"{a['id']} at line {a['line']}" for a in copy.applied)
        self.logged.emit("info", f"Wrote {Path(copy.path).name} beside {Path(trace.script).name} "
                                 f"with {fixes}; tracing it.")
        ranks = getattr(trace, "ranks", None)   # a launched run's: its launcher
        launch = ranks.launch if ranks is not None else None
        return self.run_trace(copy.path, trace.args, launch)

    def continue_as_pipeline(self) -> bool:
        """Adopt the spec recovered from the shown trace as a new start (a different pipeline
        from the one this window held: its own history and no session file to overwrite); the
        trace's tree and findings stay, and its fixes become one-click edits of that spec."""
        trace = self.script_trace
        if self.busy:
            return False
        with self.state.events.blocker():
            if self.state.continue_trace() is None:
                return False
            self.undo_stack.clear()
        self._started()
        self.logged.emit("info", f"Continuing {Path(trace.script).name} as a pipeline: {self.spec.model}")
        self._say("The script's pipeline is now the spec: Run, fix, benchmark or export it.")
        return True

    def cancel(self):
        if self.state.run_when_ready:   # queued before there was a spec: it never starts
            self.state.run_when_ready = False
            self.logged.emit("warning", "Run cancelled.")
            self._say("")
            self._update_busy()
        for kind in RUNS:
            self.worker.cancel(kind)
        if self.busy:
            self.progressChanged.emit(0, 0, "Cancelling…")

    # -- results --------------------------------------------------------------------------------
    def _on_diagnosis(self, spec, diagnosis, tree_index, gpu_memory, doc=None):
        """A run's result, or a script's trace (`spec` None: its fixes are code, not edits)."""
        self.state.took_diagnosis(spec, diagnosis, tree_index, gpu_memory, doc)
        verdict = "clean" if diagnosis.ok else f"{len(diagnosis.errors)} error finding(s)"
        total = sum(diagnosis.timings.values()) if diagnosis.timings else 0
        self.logged.emit("info" if diagnosis.ok else "warning",
                         f"Diagnosis on {diagnosis.device}: {verdict}, {len(diagnosis.findings)} "
                         f"finding(s) in {total:.2f} s")
        self._log_findings(diagnosis.findings)
        self._say("Clean run." if diagnosis.ok else "Findings to fix: see the Findings panel.")
        self.autosave()
        self.diagnosisFinished.emit(self.diagnosis_doc)

    def _on_diagnosis_error(self, message, detail):
        self.state.diagnosis_failed()
        self.logged.emit("error", message + (f"\n{detail}" if detail else ""))
        self._say("The run failed: see the Findings panel and the Log.")
        self.diagnosisFailed.emit(message)

    def _on_script_output(self, payloads):
        """A batch of the script's (stream, line)s, to the Log in few entries."""
        for level, text in script_output_entries(payloads, SCRIPT_LINES_SHOWN):
            self.logged.emit(level, text)

    def _on_drift(self, spec, result):
        self.state.took_drift(spec, result)
        if result.error:
            self.logged.emit("error", f"Compare with float32 failed: {result.error.message}")
        elif result.ok:
            self.logged.emit("info", f"{result.variant} stays within tolerance of float32.")
        self._log_findings(result.findings)
        self.driftFinished.emit(result.to_json())

    def _on_drift_error(self, message, detail):
        self.state.drift_failed()
        self.logged.emit("error", f"Compare with float32 failed: {message}\n{detail}".strip())
        self.driftFailed.emit(message)

    def _on_benchmark(self, spec, result):
        self.state.took_bench(spec, result)
        for variant in result.variants:
            if variant.ok:
                self.logged.emit("info", f"{variant.name}: {variant.samples_per_s:.1f} samples/s, "
                                         f"p50 {variant.latency_ms.p50:.2f} ms")
            else:
                # "unsupported" (decided before running, not tried) or "failed": the table's word.
                self.logged.emit("warning", f"{variant.name}: {vocabulary.status(variant)} "
                                            f"({variant.error or 'see report'})")
        self.autosave()
        self.benchmarkFinished.emit(result.to_json())   # CONTRACT §5: the --json document

    def _log_findings(self, findings):
        for finding in findings:
            self.logged.emit(finding.severity, f"[{finding.code}] {finding.location}: {finding.message}")

    # -- jobs -----------------------------------------------------------------------------------
    def _can_start(self, again) -> bool | None:
        """A run of the current spec may start: there is one, nothing else runs, it names a
        model, and the user said its code may run. None: that code is being read on the box
        first, and `again()` asks once it has been."""
        if self.spec is None or self.busy or not self._has_model():
            return False
        return self._consented(self.spec, again)

    def _has_model(self) -> bool:
        """A blank pipeline (File → New) cannot run yet: say what is missing instead."""
        missing = self.state.missing()
        if missing:
            self.diagnosisFailed.emit(missing)
        return not missing

    def _consented(self, spec, again) -> bool | None:
        from fp16studio.core.spec.trust import runs_code

        reading = None
        if self.engine_host is not None and self.state.path is not None and runs_code(spec):
            reading = self._read_there(spec, SPEC_CODE_TASK, (str(self.state.path), spec), again)
            if reading is None:
                return None
        consent = self.state.consent(spec, self._ask_there, reading)
        if consent.note:
            self.logged.emit("warning", consent.note)
        if not consent.granted:
            self.logged.emit("warning", f"Not run: {consent.question}, and you did not trust it.")
            self.diagnosisFailed.emit("Not run: the spec's preprocess code was not trusted.")
        return consent.granted

    def _consented_script(self, script: str, again) -> bool | None:
        """May the script on the box be traced? Asked once per content, read there (None: being
        read, `again()` once it has been); what was agreed to is what the box runs."""
        from fp16studio.core.spec import trust

        reading = self._read_there(script, SCRIPT_CODE_TASK, (script,), again)
        if reading is None:
            return None
        granted, question = trust.consent_to(reading, self._ask_there)
        if not granted:
            self.logged.emit("warning", f"Not run: {question}, and you did not trust it.")
            self.diagnosisFailed.emit("Not run: the script on the box was not trusted.")
        return granted

    def _ask_there(self, question: str) -> bool:
        where = f"On {self.engine_host}: " if self.engine_host is not None else ""
        return self.ask_consent(where + question)

    def _read_there(self, what, task: str, args: tuple, again):
        """The code `what` (a spec, a script) runs as the engine's host read it for this start;
        or None: it is read now, and `again()` starts over with it (a failure is said)."""
        read, self._code_read = self._code_read, None
        if read is not None and read[0] == what:
            return read[1]

        def took(reading):
            self._code_read = (what, reading)
            try:
                again()
            finally:
                self._code_read = None

        def failed(message, _detail):
            self.logged.emit("error", f"Not run: {message}")
            self._say("")
            self.diagnosisFailed.emit(message)
        self._say(f"Reading on {self.engine_host} the code this runs…")
        self.worker.submit(Job("code-to-run", task, args, supersede=True, on_result=took,
                               on_error=self._unless_engine_lost("code-to-run", failed),
                               on_cancel=lambda: self._say("")))
        return None

    def _on_job_started(self, job):
        if job.kind == "diagnose":
            self.progressChanged.emit(0, len(STAGES), "Starting…")
        elif job.kind in PROGRESS:
            self.progressChanged.emit(0, 0, PROGRESS[job.kind])
        self._update_busy()

    def _on_progress(self, job, stage, message):
        if job.kind == "diagnose" and stage in STAGES:
            self.progressChanged.emit(list(STAGES).index(stage) + 1, len(STAGES), STAGES[stage] + "…")
        elif job.kind in RUNS and stage not in STAGES:   # the engine starting, torch loading
            self.progressChanged.emit(0, 0, message)
        # A helper's progress (torch loading in the warm-up) does not cover what the window said
        # meanwhile ("Opened X without its saved findings").
        if message and (job.kind in (*RUNS, "demo", "open") or self.status in ("", self._progress_message)):
            self._progress_message = message
            self._say(message)

    def _on_job_done(self, job, outcome):
        if self._progress_message and self.status == self._progress_message:
            # "building a batch of 4" belongs to the job that said it, not to what follows.
            self._say("")
        self._progress_message = ""
        if job.kind == "trace":   # cancelled, if it is still under way: no result came
            self.state.trace_ended()
        if (outcome == "finished" and job.kind in LOAD_TORCH and self.state.environment is None
                and not self.worker.pending("environment")):
            self.worker.submit(Job("environment", ENVIRONMENT_TASK, on_result=self._took_environment))
        self._update_busy()

    def _took_environment(self, environment):   # an Environment
        self.state.environment = environment   # announced by the state (environmentChanged)

    def _update_busy(self):
        busy = self.busy
        if busy != self._busy:
            self._busy = busy
            self.busyChanged.emit(busy)
