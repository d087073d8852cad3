"""The app state and what changes it: one SessionController per window.

The session is the spec, the last diagnosis (or trace of a user's script), the last benchmark,
the last drift from float32, the file it came from and whether it has unsaved changes. The
controller owns it, with the undo stack (a stack of specs) and the worker that runs engine
tasks; it runs, traces, compares, fixes, benchmarks, exports, opens, saves and autosaves, and
tells the widgets through signals. It asks the user nothing: dialogs are the
window's, so a script or a test drives the whole loop through this object.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoStack

from fp16studio.core import InputError, PipelineSpec
from fp16studio.core.presentation import STAGES

from .history import SpecChange
from .worker import Job, WorkerHost

# A script's output lines per batch (one every 50 ms at most) that reach the Log.
SCRIPT_LINES_SHOWN = 200
RUNS = ("diagnose", "bench", "trace", "drift")   # the jobs Run/Cancel and the progress bar are about
NO_MODEL = ("Choose a model first: type a Hub id or a local folder in the Model field, pick one "
            "from your Hugging Face cache, or drop a folder on it.")
_windows = iter(range(1, 1 << 30))


class SessionController(QObject):
    specChanged = Signal(object)          # the spec now current
    diagnosisChanged = Signal(object)     # Diagnosis, or None when what was shown is gone
    benchChanged = Signal(object)         # bench document or None
    benchStale = Signal(bool)             # the figures are of another spec than the current one
    benchSample = Signal(object)          # a live sample of the running benchmark
    driftChanged = Signal(object)         # DriftResult or None
    driftStale = Signal(bool)             # the drift is of another spec than the current one
    driftFinished = Signal(object)        # the drift --json document
    driftFailed = Signal(str)
    traceChanged = Signal(object)         # the ScriptTrace shown (not yet a pipeline), or None
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

    def __init__(self, parent=None):
        super().__init__(parent)
        self.spec: PipelineSpec | None = None
        self.diagnosis = None             # the last Diagnosis (from a run, or a saved session)
        self.diagnosis_doc: dict | None = None
        self.tree_index = None
        self.located: dict = {}           # finding location -> tree node, found once
        self.gpu_memory: int | None = None
        self.bench_doc: dict | None = None
        self.drift = None                 # the last DriftResult
        self.script_trace = None          # the trace shown, until it continues as a pipeline
        self.session_path: Path | None = None
        self._diagnosed_spec = None       # the spec of the last *run* (fixes apply to it)
        self._benched_spec = None
        self._drifted_spec = None
        self._run_when_ready = False
        self._closing = False
        self._busy = False
        self._progress_message = ""
        self.status = ""
        # Asked before a spec read from a file runs its preprocess (CONTRACT §6), with what
        # would run; the window makes it a question. Unset, nothing untrusted runs.
        self.ask_consent = lambda question: False
        from fp16studio.core.session import autosave_owner

        self.autosave_owner = autosave_owner(next(_windows))
        self.undo_stack = QUndoStack(self)
        # Bound methods, not lambdas: disconnected when this object goes, before the stack's
        # own destruction emits cleanChanged.
        self.undo_stack.cleanChanged.connect(self._emit_title)
        self.worker = WorkerHost(self)
        self.worker.jobStarted.connect(self._on_job_started)
        self.worker.jobProgress.connect(self._on_progress)
        self.worker.jobDone.connect(self._on_job_done)

    # -- state ----------------------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        return not self.undo_stack.isClean()

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def busy(self) -> bool:
        return any(job.kind in RUNS for job in self.worker.pending())

    @property
    def stale(self) -> bool:
        """The spec changed since the last run: its findings are not the current spec's."""
        return self._diagnosed_spec is not None and self.spec != self._diagnosed_spec

    @property
    def drift_current(self) -> bool:
        return self.drift is not None and self._drifted_spec == self.spec

    @property
    def fixes_enabled(self) -> bool:
        """The findings shown are of the current spec (a run's, or the drift's): one click fixes.
        A trace shown is not the spec's: its fixes are code."""
        if self.script_trace is not None:
            return False
        fresh_run = self._diagnosed_spec is not None and not self.stale
        return (fresh_run or self.drift_current) and not self.busy

    def current_findings(self) -> list:
        """What the Findings panel lists: the last run's (or trace's) findings, and the drift's
        while it is of the current spec; a stale run's findings give way to a current drift's.
        A trace shown stands alone: it is not of the spec."""
        if self.script_trace is not None:
            return list(self.script_trace.findings)
        shown = list(self.drift.findings) if self.drift_current else []
        if self.diagnosis is not None and (not shown or not self.stale and self._diagnosed_spec is not None):
            shown = list(self.diagnosis.findings) + shown
        return shown

    def title(self) -> str:
        name = self.session_path.name if self.session_path else (self.spec.model if self.spec else "")
        dirty = " •" if self.dirty else ""
        return f"{name}{dirty} — fp16studio" if name else "fp16studio"

    def _say(self, text: str):
        self.status = text
        self.statusChanged.emit(text)

    def _emit_title(self, *_):
        self.titleChanged.emit(self.title())

    # -- the spec -------------------------------------------------------------------------------
    def start_with(self, spec, diagnosis_doc=None, bench_doc=None, path=None):
        """Adopt a freshly opened spec: a new history starts here, nothing of the old one stays."""
        from fp16studio.core.report import Diagnosis

        self.session_path = Path(path) if path else None
        self.undo_stack.clear()
        self._diagnosed_spec = self.tree_index = None
        self.located, self.gpu_memory = {}, None
        self.diagnosis_doc = diagnosis_doc
        self.diagnosis = Diagnosis.from_json(diagnosis_doc) if diagnosis_doc else None
        self.bench_doc, self._benched_spec = bench_doc, spec if bench_doc else None
        self.drift = self._drifted_spec = self.script_trace = None
        self.spec = None
        self._set_spec(spec)
        self.undo_stack.setClean()
        self.diagnosisChanged.emit(self.diagnosis)
        self.benchChanged.emit(bench_doc)
        self.driftChanged.emit(None)
        self.traceChanged.emit(None)
        self.opened.emit()
        if self.diagnosis is not None:
            self._say("Findings from the saved session; Run to refresh them.")
        if self._run_when_ready:
            self._run_when_ready = False
            self.run_diagnosis()

    def restore_session(self, session):
        """Adopt a session (fp16studio.core.session.Session): its spec, findings and figures."""
        self.start_with(session.spec, session.diagnosis, session.bench, session.path)

    def edit(self, new, text: str):
        """Replace the spec with `new` (undoably)."""
        if self.spec is not None and new != self.spec:
            self.undo_stack.push(SpecChange(self._set_spec, self.spec, new, text))

    def _set_spec(self, spec):
        old, self.spec = self.spec, spec
        if old is not None and (old.model, old.revision) != (spec.model, spec.revision) and self.bench_doc:
            # Another model's figures are not this one's: gone, not shown as current.
            self.bench_doc = self._benched_spec = None
            self.benchChanged.emit(None)
        self.specChanged.emit(spec)
        self.benchStale.emit(self._benched_spec is not None and spec != self._benched_spec)
        self.driftStale.emit(self._drifted_spec is not None and spec != self._drifted_spec)
        if self.stale:
            self._say("The spec changed since the last run: Run to refresh.")
        self._emit_title()
        self.autosave()

    # -- diagnosis ------------------------------------------------------------------------------
    def run_diagnosis(self) -> bool:
        """Diagnose the current spec in the engine; `diagnosisFinished(doc)` when done. Called
        before the first spec is ready, the run starts as soon as it is."""
        if self.spec is None:
            self._run_when_ready = True
            return True
        if not self._can_start():
            return False
        spec = self.spec
        self.logged.emit("info", f"Run: {spec.model} on {spec.dataset}")
        self.worker.submit(Job("diagnose", "diagnose", (spec,),
                               on_result=lambda result: self._on_diagnosis(spec, *result),
                               on_error=self._on_diagnosis_error,
                               on_cancel=lambda: self.logged.emit("warning", "Run cancelled.")))
        return True

    def _on_diagnosis(self, spec, diagnosis, tree_index, gpu_memory):
        """A run's result, or a script's trace (`spec` None: its fixes are code, not edits)."""
        self.diagnosis, self._diagnosed_spec = diagnosis, spec
        self.script_trace = diagnosis if spec is None else None
        self.tree_index, self.gpu_memory = tree_index, gpu_memory
        if tree_index is not None:
            # The totals the index already holds: no walk of every node on the GUI thread.
            diagnosis.inventory = tree_index.summary()
            self.located = tree_index.locate(diagnosis.findings)
        else:
            self.located = {}
        self.diagnosis_doc = diagnosis.to_json()
        self.traceChanged.emit(self.script_trace)
        self.diagnosisChanged.emit(diagnosis)
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
        # The previous run's tree and findings are of another spec: cleared, not shown as current.
        self.diagnosis = self.diagnosis_doc = self.tree_index = self._diagnosed_spec = None
        self.located, self.script_trace = {}, None
        self.traceChanged.emit(None)
        self.diagnosisChanged.emit(None)
        self.logged.emit("error", message + (f"\n{detail}" if detail else ""))
        self._say("The run failed: see the Findings panel and the Log.")
        self.diagnosisFailed.emit(message)

    def apply_fix(self, fix_id: str) -> bool:
        """Apply a fix to the spec that was run (undoably), then run that again: a drift's fix
        (while the drift is of the current spec) compares again, a diagnosis's fix diagnoses."""
        from fp16studio.core import apply_fix

        if self.busy or self.script_trace is not None:
            return False
        drift_fix = _find_fix(self.drift.findings, fix_id) if self.drift_current else None
        if drift_fix is not None:
            base, fix, again = self._drifted_spec, drift_fix, self.run_drift
        elif self._diagnosed_spec is not None:
            base, fix, again = self._diagnosed_spec, _find_fix(self.diagnosis.findings, fix_id), self.run_diagnosis
        else:
            return False
        if fix is None:
            self.logged.emit("error", f"No fix {fix_id!r} in the last diagnosis.")
            return False
        try:
            new = apply_fix(base, fix)
        except InputError as exc:
            self.logged.emit("error", f"Fix {fix.title!r} could not be applied: {exc}")
            return False
        self.logged.emit("info", f"Applied fix: {fix.title}")
        self.edit(new, f"Fix: {fix.title}")
        again()
        return True

    # -- a user's script ------------------------------------------------------------------------
    def run_trace(self, path: str, args=()) -> bool:
        """Run the user's script as it is and diagnose what it ran; `diagnosisFinished(doc)` with
        the trace document. Its output lines go to the Log as they come."""
        if self.busy:
            return False
        shown = " ".join([str(path), *map(str, args)])
        self.logged.emit("info", f"Trace: {shown}")
        self.worker.submit(Job("trace", "trace", (str(path), tuple(map(str, args))),
                               on_result=lambda result: self._on_diagnosis(None, *result),
                               on_samples=self._on_script_output,
                               on_error=self._on_diagnosis_error,
                               on_cancel=lambda: self.logged.emit("warning", "Trace cancelled.")))
        return True

    def _on_script_output(self, payloads):
        """A batch of the script's (stream, line)s: one Log entry per run of lines from one
        stream, and only the last SCRIPT_LINES_SHOWN of a batch (a script printing in a tight
        loop would otherwise hold the GUI thread for the Log's layout of every line)."""
        hidden = len(payloads) - SCRIPT_LINES_SHOWN
        if hidden > 0:
            self.logged.emit("info", f"… {hidden} lines of the script's output not shown")
            payloads = payloads[hidden:]
        for stream, group in itertools.groupby(payloads, key=lambda payload: payload[0]):
            self.logged.emit("warning" if stream == "stderr" else "info",
                             "\n".join(f"{stream}: {line}" for _, line in group))

    def continue_as_pipeline(self) -> bool:
        """Adopt the spec recovered from the shown trace as a new start (a different pipeline
        from the one this window held: its own history and no session file to overwrite); the
        trace's tree and findings stay, and its fixes become one-click edits of that spec."""
        trace = self.script_trace
        if trace is None or trace.recovered_spec is None or self.busy:
            return False
        spec = trace.recovered_spec
        kept = (self.tree_index, self.located, self.gpu_memory)
        self.start_with(spec)
        self.tree_index, self.located, self.gpu_memory = kept
        self.diagnosis, self._diagnosed_spec = trace, spec
        self.diagnosis_doc = trace.to_json()
        self.diagnosisChanged.emit(trace)
        self.autosave()
        self.logged.emit("info", f"Continuing {Path(trace.script).name} as a pipeline: {spec.model}")
        self._say("The script's pipeline is now the spec: Run, fix, benchmark or export it.")
        return True

    # -- drift from float32 ---------------------------------------------------------------------
    def run_drift(self, variant: str | None = None) -> bool:
        """Run the spec in float32 and in `variant` (None: its own half precision) on one batch
        and compare module by module; `driftFinished(doc)` when done."""
        if not self._can_start():
            return False
        spec = self.spec
        self.logged.emit("info", f"Compare with float32: {spec.model}")
        self.worker.submit(Job("drift", "drift", (spec, variant),
                               on_result=lambda result: self._on_drift(spec, result),
                               on_error=self._on_drift_error,
                               on_cancel=lambda: self.logged.emit("warning", "Comparison cancelled.")))
        return True

    def _on_drift(self, spec, result):
        self.drift, self._drifted_spec = result, spec
        self.driftChanged.emit(result)
        self.driftStale.emit(spec != self.spec)
        if result.error:
            self.logged.emit("error", f"Compare with float32 failed: {result.error['message']}")
        elif result.ok:
            self.logged.emit("info", f"{result.variant} stays within tolerance of float32.")
        self._log_findings(result.findings)
        self.driftFinished.emit(result.to_json())

    def _on_drift_error(self, message, detail):
        self.drift = self._drifted_spec = None
        self.driftChanged.emit(None)
        self.logged.emit("error", f"Compare with float32 failed: {message}\n{detail}".strip())
        self.driftFailed.emit(message)

    # -- benchmark ------------------------------------------------------------------------------
    def run_benchmark(self, variants=None) -> bool:
        """Measure the precision variants (default: all); `benchmarkFinished(doc)` when done,
        with samples streamed through `benchSample` meanwhile."""
        if not self._can_start():
            return False
        spec = self.spec
        self.bench_doc = self._benched_spec = None
        self.benchChanged.emit(None)
        self.logged.emit("info", "Benchmark started.")
        self.worker.submit(Job(
            "bench", "bench", (spec, variants),
            on_result=lambda doc: self._on_benchmark(spec, doc),
            on_samples=lambda samples: [self.benchSample.emit(sample) for sample in samples],
            on_error=lambda message, detail: self.logged.emit(
                "error", f"Benchmark failed: {message}\n{detail}".strip()),
            on_cancel=lambda: self.logged.emit("warning", "Benchmark cancelled.")))
        return True

    def _on_benchmark(self, spec, doc):
        self.bench_doc, self._benched_spec = doc, spec
        self.benchChanged.emit(doc)
        self.benchStale.emit(spec != self.spec)
        for variant in doc.get("variants", []):
            if variant.get("ok"):
                self.logged.emit("info", f"{variant['name']}: {variant['samples_per_s']:.1f} samples/s, "
                                         f"p50 {variant['latency_ms']['p50']:.2f} ms")
            else:
                self.logged.emit("warning", f"{variant['name']}: failed ({variant.get('error', 'see report')})")
        self.autosave()
        self.benchmarkFinished.emit(doc)

    def cancel(self):
        for kind in RUNS:
            self.worker.cancel(kind)
        if self.busy:
            self.progressChanged.emit(0, 0, "Cancelling…")

    # -- jobs -----------------------------------------------------------------------------------
    def _can_start(self) -> bool:
        """A run of the current spec may start: there is one, nothing else runs, it names a
        model, and the user said its code may run."""
        return (self.spec is not None and not self.busy and self._has_model()
                and self._consented(self.spec))

    def _log_findings(self, findings):
        for finding in findings:
            self.logged.emit(finding.severity, f"[{finding.code}] {finding.location}: {finding.message}")

    def _has_model(self) -> bool:
        """A blank pipeline (File → New) cannot run yet: say what is missing instead."""
        if self.spec.model:
            return True
        self.diagnosisFailed.emit(NO_MODEL)
        return False

    def _consented(self, spec) -> bool:
        """A spec or session read from a file runs its preprocess only once the user said so for
        this content (CONTRACT §6); one written here or by the user's own hand runs freely."""
        from fp16studio.core import trust

        if not spec.preprocess or self.session_path is None or not self.session_path.is_file():
            return True
        try:
            question = trust.consent_needed(self.session_path, spec)
        except InputError as exc:   # the preprocess file is gone or unreadable: the run says so
            self.logged.emit("warning", str(exc))
            return True
        if question is None:
            return True
        if self.ask_consent(question):
            trust.trust(self.session_path, spec)
            return True
        self.logged.emit("warning", f"Not run: {question}, and you did not trust it.")
        self.diagnosisFailed.emit("Not run: the spec's preprocess code was not trusted.")
        return False

    def _on_job_started(self, job):
        if job.kind == "diagnose":
            self.progressChanged.emit(0, len(STAGES), "Starting…")
        elif job.kind == "bench":
            self.progressChanged.emit(0, 0, "Benchmarking…")
        elif job.kind in ("trace", "drift"):
            self.progressChanged.emit(0, 0, "Tracing the script…" if job.kind == "trace"
                                      else "Comparing with float32…")
        elif job.kind in ("demo", "open"):
            self._say("Preparing the demo…" if job.kind == "demo" else "Opening…")
        self._update_busy()

    def _on_progress(self, job, stage, message):
        if job.kind == "diagnose" and stage in STAGES:
            self.progressChanged.emit(list(STAGES).index(stage) + 1, len(STAGES), STAGES[stage] + "…")
        if message:
            self._progress_message = message
            self._say(message)

    def _on_job_done(self, job, outcome):
        if self._progress_message and self.status == self._progress_message:
            # "building a batch of 4" belongs to the job that said it, not to what follows.
            self._say("")
        self._progress_message = ""
        self._update_busy()

    def _update_busy(self):
        busy = self.busy
        if busy != self._busy:
            self._busy = busy
            self.busyChanged.emit(busy)

    # -- files ----------------------------------------------------------------------------------
    def load_demo(self, name: str | None = None):
        from fp16studio.core.demo import DEMO_DEFAULT

        name = name or DEMO_DEFAULT
        self.logged.emit("info", f"Opening the demo pipeline {name!r}.")
        self.worker.submit(Job("demo", "demo", (name,), on_result=self.start_with,
                               on_error=self._on_open_error))

    def open_path(self, path: str):
        """Open a spec, a session or `demo:NAME` (read in the engine: a demo imports torch)."""
        def done(result):
            spec, diagnosis_doc, bench_doc = result
            local = None if str(path).startswith("demo:") else Path(path).absolute()
            self.start_with(spec, diagnosis_doc, bench_doc, local)
            self.logged.emit("info", f"Opened {path}")
        self.worker.submit(Job("open", "open", (path,), on_result=done, on_error=self._on_open_error))

    def new_pipeline(self):
        """A blank pipeline: every key at its default, the model to be chosen."""
        self.start_with(PipelineSpec(model="", dataset="synthetic"))
        self.logged.emit("info", "New pipeline.")

    def _on_open_error(self, message, detail):
        self._run_when_ready = False
        self.logged.emit("error", message + (f"\n{detail}" if detail else ""))
        self.diagnosisFailed.emit(message)
        self.warned.emit("Cannot open", message)

    def save(self, path) -> bool:
        """Save the session to `path`. On failure (a read-only or full disk) the user is told
        and the session stays unsaved: the title keeps its dot."""
        from fp16studio.core.session import Session, save_session

        try:
            saved = save_session(Session(self.spec, self._session_findings(), self.bench_doc), path)
        except InputError as exc:
            self.logged.emit("error", str(exc))
            self.warned.emit("Cannot save", str(exc))
            return False
        self.session_path = saved.path
        self.undo_stack.setClean()
        self.logged.emit("info", f"Saved session {saved.path}")
        self._emit_title()
        return True

    def export_script(self, path: str) -> bool:
        """Write the exported script in the engine (rendering it reads the dataset)."""
        if self.spec is None or not self._has_model():
            return False

        def done(written):
            self.logged.emit("info", f"Exported script {written}")
            self.exportFinished.emit(written)

        def failed(message, detail):
            self.logged.emit("error", message + (f"\n{detail}" if detail else ""))
            self.warned.emit("Cannot export", message)
        self.worker.submit(Job("export", "export", (self.spec, str(path)), on_result=done, on_error=failed))
        return True

    def write_report(self, path) -> bool:
        from fp16studio.core.html_report import render_report
        from fp16studio.core.spec import write_text_atomic

        try:
            write_text_atomic(Path(path), render_report(self.diagnosis_doc, self.bench_doc))
        except InputError as exc:
            self.warned.emit("Cannot write the report", str(exc))
            return False
        self.logged.emit("info", f"Wrote report {path}")
        return True

    def _session_findings(self) -> dict | None:
        """A trace that has not become the pipeline is not this spec's: not saved with it."""
        return None if self.script_trace is not None else self.diagnosis_doc

    def autosave(self):
        """The crash copy of this window's session. A blank pipeline has none: its spec (no
        model yet) could not be read back."""
        from fp16studio.core.session import Session, autosave, clear_autosave

        if self.spec is None or self._closing:
            return
        if not self.spec.model:
            clear_autosave(self.autosave_owner)
            return
        try:
            autosave(Session(self.spec, self._session_findings(), self.bench_doc, path=self.session_path),
                     self.autosave_owner)
        except InputError as exc:
            self.logged.emit("warning", f"Autosave failed: {exc}")

    def shutdown(self) -> bool:
        """Stop the worker and the engine, and drop this window's crash copy (a clean close)."""
        from fp16studio.core.session import clear_autosave

        self._closing = True
        stopped = self.worker.shutdown()
        clear_autosave(self.autosave_owner)
        return stopped


def _find_fix(findings, fix_id: str):
    return next((fix for finding in findings for fix in finding.fixes if fix.id == fix_id), None)
