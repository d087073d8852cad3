"""The main window: pipeline form, tensor tree, findings, comparison, log and history.

Everything it does goes through fp16studio.core and the spec: a run diagnoses `self.spec`, a fix
replaces it (undoably), an export renders it. Long work runs on the worker thread, in the engine
process behind it (worker.py); this class only submits jobs and shows what comes back.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QUndoStack
from PySide6.QtWidgets import (QFileDialog, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QSizePolicy, QSplitter, QTabWidget, QToolBar, QToolButton,
                               QVBoxLayout, QWidget)

from fp16studio import __version__
from fp16studio.core import InputError, PipelineSpec

from . import jobs, sources
from .compare import CompareView
from .findings_panel import FindingsPanel
from .history import HistoryPanel, SpecChange
from .log_panel import LogPanel
from .preview_panel import PreviewPanel
from .spec_form import SpecForm
from .status_bar import StatusInfo
from .theme import app_icon, icon
from .tree_panel import TensorPanel
from .worker import Job, WorkerHost

# The engine's progress stages (fp16studio.core.diagnosis.STAGES) as the progress bar words them;
# kept here so showing the window never imports the engine's heavy modules.
STAGE_LABELS = {"model": "Loading model", "dataset": "Reading dataset", "batch": "Building batch",
                "forward": "Forward pass", "rules": "Checking findings"}
WINDOW_SIZE = QSize(1280, 800)
NO_MODEL = ("Choose a model first: type a Hub id or a local folder in the Model field, pick one "
            "from your Hugging Face cache, or drop a folder on it.")


class MainWindow(QMainWindow):
    """CONTRACT §5: the automation surface is `run_diagnosis`, `apply_fix`, `run_benchmark`,
    `export_script`, the `diagnosisFinished`/`benchmarkFinished` signals (the --json documents)
    and the `tensorTree`, `findingsView` and `benchPlot` attributes. All four actions return at
    once and finish on the worker: `diagnosisFailed(message)` and `exportFinished(path)` too."""

    diagnosisFinished = Signal(object)
    benchmarkFinished = Signal(object)
    diagnosisFailed = Signal(str)
    exportFinished = Signal(str)    # the path of the written script

    def __init__(self, spec=None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("fp16studio")
        self.setWindowIcon(app_icon())
        self.resize(WINDOW_SIZE)
        self.spec: PipelineSpec | None = None
        self.diagnosis = None           # the last Diagnosis, for its fixes
        self.diagnosis_doc: dict | None = None
        self.bench_doc: dict | None = None
        self.session_path: Path | None = None
        self._diagnosed_spec = None
        self._run_when_ready = False
        self._closing = False

        self.undo_stack = QUndoStack(self)
        # A bound method, not a lambda: it is disconnected when the window goes, before the
        # stack's own destruction emits cleanChanged.
        self.undo_stack.cleanChanged.connect(self._update_title)
        self._build_panels()
        self._build_actions()
        self._build_menus()
        self._build_toolbar()
        self.status = StatusInfo(self.statusBar())
        # Last, so a failure while building the widgets leaves no thread running.
        self.worker = WorkerHost(self)
        self.worker.jobStarted.connect(self._on_job_started)
        self.worker.jobProgress.connect(self._on_progress)
        self.worker.jobDone.connect(self._on_job_done)
        self.status.watch_engine(lambda: self.worker.engine.pid)
        self._set_busy(False)

        if spec is None:
            self._load_demo(None)
        elif isinstance(spec, PipelineSpec):
            self._start_with(spec)
        elif isinstance(spec, dict):
            self._start_with(PipelineSpec.from_dict(spec))
        else:
            self.open_path(str(spec))
        QTimer.singleShot(0, self._scan_cache)
        QTimer.singleShot(0, self._warm_up)

    # -- layout ---------------------------------------------------------------------------------
    def _build_panels(self):
        self.form = SpecForm()
        self.form.specEdited.connect(lambda new, key: self._push_spec(new, f"Edit {key}"))
        self.form.modelChanged.connect(self._look_up_model)
        self.form.datasetChanged.connect(self._look_up_dataset)
        self.form.model_picker.searchRequested.connect(lambda q: self._hub_search(q, "model"))
        self.form.dataset_picker.searchRequested.connect(lambda q: self._hub_search(q, "dataset"))
        from fp16studio.core.hub import offline_requested

        online_allowed = not offline_requested()
        self.form.model_picker.hub_search = online_allowed
        self.form.dataset_picker.hub_search = online_allowed

        self.tensors = TensorPanel()
        self.tensorTree = self.tensors.tree
        self.preview = PreviewPanel()
        self.compare = CompareView()
        self.benchPlot = self.compare.plot
        self.findings = FindingsPanel()
        self.findingsView = self.findings.view
        self.findings.fixRequested.connect(self.apply_fix)
        self.findings.revealRequested.connect(self.reveal_location)
        self.log = LogPanel()
        self.history = HistoryPanel(self.undo_stack)

        self.main_tabs = QTabWidget(documentMode=False)
        self.main_tabs.addTab(self.tensors, "Tensors")
        self.main_tabs.addTab(self.preview, "Dataset")
        self.main_tabs.addTab(self.compare, "Compare")
        self.bottom_tabs = QTabWidget()
        self.bottom_tabs.addTab(self.log, "Log")
        self.bottom_tabs.addTab(self.history, "Changes")
        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(self.main_tabs)
        middle.addWidget(self.bottom_tabs)
        middle.setSizes([520, 170])
        middle.setChildrenCollapsible(False)

        left = QWidget()
        column = QVBoxLayout(left)
        column.setContentsMargins(6, 6, 0, 0)
        column.setSpacing(2)
        title = QLabel("Pipeline", objectName="panelTitle")
        title.setContentsMargins(4, 0, 0, 0)
        column.addWidget(title)
        column.addWidget(self.form, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(middle)
        self.splitter.addWidget(self.findings)
        self.splitter.setSizes([330, 620, 330])
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

    def _action(self, text, slot, icon_name=None, shortcut=None, tip=None) -> QAction:
        action = QAction(text, self)
        if icon_name:
            action.setIcon(icon(icon_name))
            action.setProperty("iconName", icon_name)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setToolTip(tip)
            action.setStatusTip(tip)
        action.triggered.connect(lambda _checked=False: slot())
        return action

    def _build_actions(self):
        a = self._action
        self.act_new = a("&New Pipeline", self.new_pipeline, "new", QKeySequence.StandardKey.New,
                         "Start over with a blank pipeline in this window")
        self.act_new_window = a("New &Window", self._new_window, None, "Ctrl+Shift+N",
                                "Open another window on the demo pipeline")
        self.act_open = a("&Open…", self._open_dialog, "open", QKeySequence.StandardKey.Open,
                          "Open a pipeline spec or a saved session")
        self.act_save = a("&Save Session", self.save_session, "save", QKeySequence.StandardKey.Save,
                          "Save the spec with its latest findings and benchmark")
        self.act_save_as = a("Save Session &As…", lambda: self.save_session(ask=True), None,
                             QKeySequence.StandardKey.SaveAs)
        self.act_export = a("&Export Script…", self._export_dialog, "export", "Ctrl+E",
                            "Write a runnable Python script of this pipeline")
        self.act_report = a("Export &HTML Report…", self._report_dialog, "html", None,
                            "Write the findings and benchmark as one HTML file")
        self.act_quit = a("&Quit", self.close, "quit", QKeySequence.StandardKey.Quit)
        self.act_run = a("&Run", self.run_diagnosis, "run", "Ctrl+R",
                         "Load the model and dataset and run one traced forward pass (Ctrl+R)")
        self.act_cancel = a("&Cancel", self.cancel, "stop", "Esc", "Stop the running job")
        self.act_bench = a("&Benchmark", self.run_benchmark, "bench", "Ctrl+B",
                           "Measure each precision variant on the same batch (Ctrl+B)")
        self.act_undo = self.undo_stack.createUndoAction(self, "&Undo")
        self.act_undo.setShortcut(QKeySequence.StandardKey.Undo)
        self.act_undo.setIcon(icon("undo"))
        self.act_undo.setProperty("iconName", "undo")
        self.act_redo = self.undo_stack.createRedoAction(self, "&Redo")
        self.act_redo.setShortcut(QKeySequence.StandardKey.Redo)
        self.act_redo.setIcon(icon("redo"))
        self.act_redo.setProperty("iconName", "redo")
        # Short labels in the toolbar; what would be undone is in the tooltip.
        # (Bound methods, so the connections end with the window; see cleanChanged above.)
        self.undo_stack.undoTextChanged.connect(self._label_undo)
        self.undo_stack.redoTextChanged.connect(self._label_redo)
        self._label_undo("")
        self._label_redo("")
        self.act_about = a("&About fp16studio", self._about, "info")

    def _label_undo(self, text: str):
        self.act_undo.setText("&Undo")
        self.act_undo.setToolTip(f"Undo: {text}" if text else "Nothing to undo")

    def _label_redo(self, text: str):
        self.act_redo.setText("&Redo")
        self.act_redo.setToolTip(f"Redo: {text}" if text else "Nothing to redo")

    def _build_menus(self):
        bar = self.menuBar()
        file = bar.addMenu("&File")
        file.addActions([self.act_new, self.act_new_window, self.act_open])
        self.recent_menu = file.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        file.addSeparator()
        file.addActions([self.act_save, self.act_save_as])
        file.addSeparator()
        file.addActions([self.act_export, self.act_report])
        file.addSeparator()
        file.addAction(self.act_quit)
        edit = bar.addMenu("&Edit")
        edit.addActions([self.act_undo, self.act_redo])
        run = bar.addMenu("&Run")
        run.addActions([self.act_run, self.act_bench, self.act_cancel])
        helpm = bar.addMenu("&Help")
        demos = helpm.addMenu(icon("demo"), "&Demo Pipelines")
        from fp16studio.core.demo import DEMOS

        for name, description in DEMOS.items():
            action = demos.addAction(name)
            action.setToolTip(description)
            action.setStatusTip(description)
            action.triggered.connect(lambda _c=False, n=name: self._load_demo(n))
        demos.setToolTipsVisible(True)
        helpm.addSeparator()
        helpm.addAction(self.act_about)

    def _build_toolbar(self):
        tools = QToolBar("Main")
        tools.setObjectName("mainToolbar")
        tools.setMovable(False)
        tools.setIconSize(QSize(20, 20))
        tools.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        tools.addAction(self.act_run)
        tools.widgetForAction(self.act_run).setObjectName("runButton")
        tools.addAction(self.act_cancel)
        tools.addSeparator()
        tools.addAction(self.act_bench)
        tools.addSeparator()
        tools.addActions([self.act_undo, self.act_redo])
        tools.addSeparator()
        tools.addAction(self.act_export)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        tools.addWidget(spacer)
        self.stage_label = QLabel("", objectName="stageLabel")
        self.stage_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.progress = QProgressBar()
        self.progress.setRange(0, len(STAGE_LABELS))
        self.progress.setFixedWidth(180)
        self.progress.setTextVisible(False)
        tools.addWidget(self.stage_label)
        # A widget in a toolbar is shown and hidden through its action.
        self._progress_action = tools.addWidget(self.progress)
        self.addToolBar(tools)
        self.toolbar = tools

    def refresh_icons(self):
        """Re-tint icons after the system switched between light and dark."""
        for action in self.findChildren(QAction):
            name = action.property("iconName")
            if name:
                action.setIcon(icon(name))
        for button in self.findChildren(QToolButton):
            name = button.property("iconName")
            if name:
                button.setIcon(icon(name))

    # -- the spec -------------------------------------------------------------------------------
    def _start_with(self, spec, diagnosis_doc=None, bench_doc=None):
        """Adopt a freshly opened spec: a new history starts here."""
        self.undo_stack.clear()
        self.diagnosis = None
        self.diagnosis_doc = diagnosis_doc
        self.bench_doc = bench_doc
        self._diagnosed_spec = None
        self.tensors.set_tree(None)
        self.findings.set_findings([], ok=False)
        self.findings.detail.show_text("Press Run to diagnose this pipeline.")
        if diagnosis_doc:
            self._show_saved_findings(diagnosis_doc)
        if bench_doc:
            self.compare.set_result(bench_doc)
        else:
            self.compare.clear()
        self._set_spec(spec)
        self.undo_stack.setClean()
        if self._run_when_ready:
            self._run_when_ready = False
            self.run_diagnosis()

    def restore_session(self, session):
        """Show a session (fp16studio.core.session.Session): its spec, findings and figures."""
        self.session_path = session.path
        self._start_with(session.spec, session.diagnosis, session.bench)

    def _set_spec(self, spec):
        old = self.spec
        self.spec = spec
        self.form.set_spec(spec)
        stale = self._diagnosed_spec is not None and spec != self._diagnosed_spec
        self.findings.set_fixes_enabled(not stale and not self._busy())
        if stale:
            self.status.message.setText("The spec changed since the last run: Run to refresh.")
        if spec.model and (old is None or old.model != spec.model or old.revision != spec.revision):
            self._look_up_model(spec)
        if old is None or (old.dataset, old.dataset_config, old.split) != (
                spec.dataset, spec.dataset_config, spec.split):
            self._look_up_dataset(spec)
        self._update_title()
        self._autosave()

    def _push_spec(self, new, text: str):
        if self.spec is not None and new != self.spec:
            self.undo_stack.push(SpecChange(self._set_spec, self.spec, new, text))

    def _update_title(self, *_):
        name = self.session_path.name if self.session_path else (self.spec.model if self.spec else "")
        dirty = "" if self.undo_stack.isClean() else " •"
        self.setWindowTitle(f"{name}{dirty} — fp16studio" if name else "fp16studio")

    # -- diagnosis ------------------------------------------------------------------------------
    def run_diagnosis(self) -> bool:
        """Diagnose the current spec on the worker; `diagnosisFinished(doc)` when done.

        Called before the demo spec is ready, the run starts as soon as it is.
        """
        if self.spec is None:
            self._run_when_ready = True
            return True
        if self._busy() or not self._has_model():
            return False
        spec = self.spec
        self.log.log("info", f"Run: {spec.model} on {spec.dataset}")
        self.worker.submit(Job(
            "diagnose", jobs.diagnose, (spec,),
            on_result=lambda result: self._on_diagnosis(spec, *result),
            on_error=self._on_diagnosis_error,
            on_cancel=lambda: self.log.log("warning", "Run cancelled.")))
        return True

    def _on_diagnosis(self, spec, diagnosis, tree_index, gpu_memory):
        self.diagnosis = diagnosis
        self._diagnosed_spec = spec
        self.diagnosis_doc = diagnosis.to_json()
        self.tensors.set_tree(diagnosis.tree, tree_index)
        if tree_index is not None:
            named = (tree_index.resolve(f.location) for f in diagnosis.findings)
            self.tensors.model.set_highlighted(node.path for node in named if node is not None)
        self.findings.set_fixes_enabled(self.spec == spec)
        self.findings.set_findings(diagnosis.findings, diagnosis.ok)
        if diagnosis.error and not diagnosis.findings:
            self.findings.show_failure(diagnosis.error.get("message", ""))
        self.status.set_environment(diagnosis.environment, diagnosis.device, gpu_memory)
        verdict = "clean" if diagnosis.ok else f"{len(diagnosis.errors)} error finding(s)"
        total = sum(diagnosis.timings.values()) if diagnosis.timings else 0
        self.log.log("info" if diagnosis.ok else "warning",
                     f"Diagnosis on {diagnosis.device}: {verdict}, {len(diagnosis.findings)} "
                     f"finding(s) in {total:.2f} s")
        for finding in diagnosis.findings:
            self.log.log(finding.severity if finding.severity != "info" else "info",
                         f"[{finding.code}] {finding.location}: {finding.message}")
        self.status.message.setText("Clean run." if diagnosis.ok else "Findings to fix: see the Findings panel.")
        self._autosave()
        self.diagnosisFinished.emit(self.diagnosis_doc)

    def _on_diagnosis_error(self, message, detail):
        self.findings.show_failure(message)
        self.log.log("error", message)
        if detail:
            self.log.log("error", detail)
        self.status.message.setText("The run failed: see the Findings panel and the Log.")
        self.diagnosisFailed.emit(message)

    def apply_fix(self, fix_id: str) -> bool:
        """Apply a fix of the last diagnosis to the spec (undoable), then run again."""
        from fp16studio.core import apply_fix

        if self.diagnosis is None or self._busy():
            return False
        try:
            fix = self.diagnosis.fix(fix_id)
        except KeyError:
            self.log.log("error", f"No fix {fix_id!r} in the last diagnosis.")
            return False
        try:
            new = apply_fix(self._diagnosed_spec, fix)
        except InputError as exc:
            self.log.log("error", f"Fix {fix.title!r} could not be applied: {exc}")
            return False
        self.log.log("info", f"Applied fix: {fix.title}")
        self._push_spec(new, f"Fix: {fix.title}")
        self.run_diagnosis()
        return True

    def reveal_location(self, location: str):
        index = self.tensors.model.tree_index
        node = index.resolve(location) if index is not None else None
        if node is not None:
            self.tensors.reveal(node)
            self.main_tabs.setCurrentWidget(self.tensors)

    def _show_saved_findings(self, doc: dict):
        from fp16studio.core.findings import Finding, Fix

        findings = [Finding(f["code"], f["severity"], f["location"], f["message"],
                            f.get("evidence", {}),
                            tuple(Fix(x["id"], x["title"], x.get("edits", {})) for x in f["fixes"]))
                    for f in doc.get("findings", [])]
        self.findings.set_findings(findings, doc.get("ok", False))
        self.findings.set_fixes_enabled(False)  # fixes apply to a fresh run's spec
        self.status.message.setText("Findings from the saved session; Run to refresh them.")

    # -- benchmark ------------------------------------------------------------------------------
    def run_benchmark(self, variants=None) -> bool:
        """Measure the precision variants (default: all) on the worker; `benchmarkFinished(doc)`
        when done, with the samples streamed to the Compare tab meanwhile."""
        if self.spec is None or self._busy() or not self._has_model():
            return False
        self.compare.clear()
        self.main_tabs.setCurrentWidget(self.compare)
        self.log.log("info", "Benchmark started.")
        self.worker.submit(Job(
            "bench", jobs.benchmark, (self.spec, variants),
            on_result=self._on_benchmark, on_sample=self.compare.add_sample,
            on_error=lambda message, detail: self.log.log("error", f"Benchmark failed: {message}\n{detail}".strip()),
            on_cancel=lambda: self.log.log("warning", "Benchmark cancelled.")))
        return True

    def _on_benchmark(self, doc):
        self.bench_doc = doc
        self.compare.set_result(doc)
        for variant in doc.get("variants", []):
            if variant.get("ok"):
                self.log.log("info", f"{variant['name']}: {variant['samples_per_s']:.1f} samples/s, "
                                     f"p50 {variant['latency_ms']['p50']:.2f} ms")
            else:
                self.log.log("warning", f"{variant['name']}: failed ({variant.get('error', 'see report')})")
        self._autosave()
        self.benchmarkFinished.emit(doc)

    def cancel(self):
        for job in self.worker.pending():
            if job.kind in ("diagnose", "bench"):
                job.token.cancel()
        self.stage_label.setText("Cancelling…")

    # -- worker bookkeeping ---------------------------------------------------------------------
    def _has_model(self) -> bool:
        """A blank pipeline (File → New) cannot run yet: say what is missing instead."""
        if self.spec.model:
            return True
        self.findings.show_failure(NO_MODEL)
        self.form.model_picker.setFocus()
        return False

    def _busy(self) -> bool:
        return any(job.kind in ("diagnose", "bench") for job in self.worker.pending())

    def _set_busy(self, busy: bool):
        self.act_run.setEnabled(not busy)
        self.act_bench.setEnabled(not busy)
        self.act_cancel.setEnabled(busy)
        self.findings.set_fixes_enabled(not busy and (self._diagnosed_spec is None
                                                      or self.spec == self._diagnosed_spec))
        self._progress_action.setVisible(busy)
        if not busy:
            self.progress.setValue(0)
            self.stage_label.setText("")

    def _on_job_started(self, job):
        if job.kind in ("diagnose", "bench"):
            self._set_busy(True)
            self.progress.setRange(0, len(STAGE_LABELS) if job.kind == "diagnose" else 0)
            self.stage_label.setText("Starting…" if job.kind == "diagnose" else "Benchmarking…")
        elif job.kind == "demo":
            self.stage_label.setText("Preparing the demo…")

    def _on_progress(self, job, stage, message):
        if job.kind == "diagnose" and stage in STAGE_LABELS:
            self.progress.setValue(list(STAGE_LABELS).index(stage) + 1)
            self.stage_label.setText(STAGE_LABELS[stage] + "…")
        if message:
            self.status.message.setText(message)

    def _on_job_done(self, job, outcome):
        if job.kind in ("diagnose", "bench", "demo") and not self._busy():
            self._set_busy(False)

    # -- pickers: look-ups on the worker --------------------------------------------------------
    def _warm_up(self):
        self.worker.submit(Job("warm-up", jobs.warm_up, wants_progress=False,
                               on_error=lambda m, d: self.log.log("warning", f"Loading torch: {m}")))

    def _scan_cache(self):
        def done(found):
            self.form.model_picker.set_cached(found["models"])
            self.form.dataset_picker.set_cached(found["datasets"])
        self.worker.submit(Job("cache", sources.scan_cache, wants_progress=False, on_result=done,
                               on_error=lambda m, d: self.log.log("warning", f"Cache scan: {m}")))

    def _hub_search(self, query: str, repo_type: str):
        picker = self.form.model_picker if repo_type == "model" else self.form.dataset_picker
        self.worker.submit(Job("search", sources.hub_search, (query, repo_type), wants_progress=False,
                               on_result=picker.add_found, on_error=lambda m, d: None))

    def _look_up_model(self, spec):
        picker = self.form.model_picker

        def done(info):
            dtypes = ", ".join(f"{d} ×{n}" for d, n in sorted(info["dtypes"].items(), key=lambda x: -x[1]))
            from .format import size

            picker.set_info(f"{size(info['bytes'])} · {info['format']}" + (f" · {dtypes}" if dtypes else ""),
                            info["folder"])
        self.worker.submit(Job("model-info", sources.model_info, (spec,), wants_progress=False,
                               on_result=done, on_error=lambda m, d: picker.set_info(m)))

    def _look_up_dataset(self, spec):
        def done(preview):
            self.preview.set_preview(preview)
            self.form.set_dataset_choices(preview["columns"], preview.get("splits"), preview["roles"],
                                          preview.get("configs", ()))
            self.form.dataset_picker.set_info(
                f"{len(preview['columns'])} columns" if preview["columns"] else preview.get("note", ""))

        def failed(message, detail):
            self.preview.show_note(message)
            self.form.dataset_picker.set_info(message)
        self.worker.submit(Job("preview", sources.dataset_preview, (spec,), wants_progress=False,
                               on_result=done, on_error=failed))

    # -- files ----------------------------------------------------------------------------------
    def _load_demo(self, name: str | None):
        from fp16studio.core.demo import DEMO_DEFAULT

        name = name or DEMO_DEFAULT
        self.log.log("info", f"Opening the demo pipeline {name!r}.")
        self.session_path = None
        self.worker.submit(Job("demo", jobs.demo, (name,), wants_progress=False,
                               on_result=self._start_with, on_error=self._on_open_error))

    def open_path(self, path: str):
        """Open a spec, a session or `demo:NAME` (read on the worker: a demo imports torch)."""
        def done(result):
            spec, diagnosis_doc, bench_doc = result
            self.session_path = None if str(path).startswith("demo:") else Path(path).absolute()
            self._start_with(spec, diagnosis_doc, bench_doc)
            self.log.log("info", f"Opened {path}")
        self.worker.submit(Job("demo", jobs.open_source, (path,), wants_progress=False,
                               on_result=done, on_error=self._on_open_error))

    def new_pipeline(self) -> bool:
        """Start over in this window with a blank pipeline: every key at its default, the model
        to be chosen. Unsaved changes are discarded only after the user agrees."""
        if not self._may_discard():
            return False
        self.session_path = None
        self._start_with(PipelineSpec(model="", dataset="synthetic"))
        self.findings.detail.show_text(NO_MODEL)
        self.form.model_picker.setFocus()
        self.log.log("info", "New pipeline.")
        return True

    def _may_discard(self) -> bool:
        return self.undo_stack.isClean() or self._confirm(
            "Discard changes?", "This pipeline has changes that are not saved. Discard them?")

    def _on_open_error(self, message, detail):
        self.log.log("error", message + (f"\n{detail}" if detail else ""))
        self.findings.show_failure(message)
        self._run_when_ready = False
        if self.isVisible():
            QMessageBox.warning(self, "Cannot open", message)

    def _open_dialog(self):
        from fp16studio.core.session import FILE_FILTER

        path, _ = QFileDialog.getOpenFileName(self, "Open spec or session", self._dialog_dir(), FILE_FILTER)
        if path and self._may_discard():
            self.open_path(path)

    def _fill_recent(self):
        from fp16studio.core.session import recent_files

        self.recent_menu.clear()
        files = recent_files()
        for path in files:
            action = self.recent_menu.addAction(path.name)
            action.setToolTip(str(path))
            action.triggered.connect(lambda _c=False, p=str(path): self._may_discard() and self.open_path(p))
        if not files:
            self.recent_menu.addAction("No recent files").setEnabled(False)

    def save_session(self, ask: bool = False, path: str | None = None) -> bool:
        from fp16studio.core.session import FILE_FILTER, SUFFIX, Session, save_session

        if self.spec is None:
            return False
        if path is None and (ask or self.session_path is None or self.session_path.suffix != SUFFIX):
            suggested = str(Path(self._dialog_dir()) / f"pipeline{SUFFIX}")
            path, _ = QFileDialog.getSaveFileName(self, "Save session", suggested, FILE_FILTER)
            if not path:
                return False
        path = path or str(self.session_path)
        try:
            saved = save_session(Session(self.spec, self.diagnosis_doc, self.bench_doc), path)
        except InputError as exc:
            self._warn("Cannot save", str(exc))
            return False
        self.session_path = saved.path
        self.undo_stack.setClean()
        self.log.log("info", f"Saved session {saved.path}")
        self._update_title()
        return True

    def export_script(self, path, overwrite: bool = False) -> bool:
        """Write the exported script (on the worker: rendering it reads the dataset);
        `exportFinished(path)` once written. An existing file is replaced only after the user
        agrees (or with overwrite=True from a script); False when nothing was started."""
        if self.spec is None or not self._has_model():
            return False
        path = Path(path)
        if path.exists() and not overwrite and not self._confirm(
                "Replace file?", f"{path.name} already exists. Replace it with the exported script?"):
            return False

        def done(written):
            self.log.log("info", f"Exported script {written}")
            self.exportFinished.emit(written)

        def failed(message, detail):
            if detail:
                self.log.log("error", detail)
            self._warn("Cannot export", message)
        self.worker.submit(Job("export", jobs.export, (self.spec, str(path)), wants_progress=False,
                               on_result=done, on_error=failed))
        return True

    def _export_dialog(self):
        name = Path(self.spec.model).name.replace("-", "_") if self.spec else "pipeline"
        # The dialog asks before replacing an existing file, so the export does not ask again.
        path, _ = QFileDialog.getSaveFileName(self, "Export script", str(Path(self._dialog_dir()) / f"{name}.py"),
                                              "Python script (*.py)")
        if path:
            self.export_script(path, overwrite=True)

    def _report_dialog(self):
        from fp16studio.core.html_report import render_report
        from fp16studio.core.spec import write_text_atomic

        if not self.diagnosis_doc:
            self._warn("Nothing to report", "Run a diagnosis first.")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export HTML report",
                                              str(Path(self._dialog_dir()) / "fp16studio-report.html"),
                                              "HTML (*.html)")
        if path:
            try:
                write_text_atomic(Path(path), render_report(self.diagnosis_doc, self.bench_doc))
            except InputError as exc:
                self._warn("Cannot write the report", str(exc))
                return
            self.log.log("info", f"Wrote report {path}")

    def _dialog_dir(self) -> str:
        if self.session_path:
            return str(self.session_path.parent)
        return os.getcwd()

    def _autosave(self):
        from fp16studio.core.session import Session, autosave

        if self.spec is None or self._closing:
            return
        try:
            autosave(Session(self.spec, self.diagnosis_doc, self.bench_doc, path=self.session_path))
        except InputError as exc:
            self.log.log("warning", f"Autosave failed: {exc}")

    def _confirm(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def _warn(self, title: str, text: str):
        self.log.log("error", text)
        QMessageBox.warning(self, title, text)

    def _new_window(self):
        window = MainWindow()
        window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        window.show()

    def _about(self):
        import PySide6
        from PySide6.QtCore import qVersion

        from fp16studio.core.demo import DEMOS

        env = self.diagnosis.environment if self.diagnosis else {}
        engine = ", ".join(f"{k} {v}" for k, v in env.items() if isinstance(v, (str, int, float)))
        demos = "".join(f"<li><b>{name}</b>: {text}</li>" for name, text in DEMOS.items())
        QMessageBox.about(self, "About fp16studio", (
            f"<h3>fp16studio {__version__}</h3>"
            "<p>Find and fix half-precision (FP16/BF16) problems in Hugging Face pipelines.</p>"
            f"<p>PySide6 {PySide6.__version__}, Qt {qVersion()}<br>"
            f"{engine or 'Engine versions appear after the first run.'}</p>"
            f"<p>Demo pipelines (Help → Demo Pipelines):</p><ul>{demos}</ul>"))

    # -- closing --------------------------------------------------------------------------------
    def closeEvent(self, event):
        """Cancel the running job and stop the worker before the window goes away."""
        from fp16studio.core.session import clear_autosave

        self._closing = True
        if not self.worker.shutdown():
            self.log.log("error", "The worker did not stop in time.")
        self.log.detach()
        clear_autosave()
        super().closeEvent(event)
