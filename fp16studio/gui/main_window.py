"""The main window: layout, actions and wiring around one SessionController.

The controller holds the app state (spec, last diagnosis, last benchmark, file, unsaved changes)
and does the work; the panels observe its signals; this class lays them out, makes the actions
and menus, and keeps the CONTRACT §5 surface by forwarding. The File menu's dialogs (what to
open, where to save, whether to discard) are in file_actions.py.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import (QApplication, QLabel, QMainWindow, QProgressBar, QSizePolicy, QSplitter,
                               QTabWidget, QToolBar, QToolButton, QVBoxLayout, QWidget)

from fp16studio.core import PipelineSpec
from fp16studio.core.inventory import drift_by_module, rolled_up

from .compare import CompareView
from .drift_view import DriftView
from .file_actions import FileActions, settings
from .findings_panel import FindingsPanel
from .history import HistoryPanel
from .log_panel import LogPanel
from .preview_panel import PreviewPanel
from .session_controller import NO_MODEL, SessionController
from .source_lookups import SourceLookups
from .spec_form import SpecForm
from .status_bar import StatusInfo
from .theme import CHOICES, app_icon, app_theme, icon
from .tree_panel import TensorPanel

WINDOW_SIZE = QSize(1280, 800)


class MainWindow(FileActions, QMainWindow):
    """CONTRACT §5: `run_diagnosis`, `apply_fix`, `run_benchmark`, `export_script`, the
    `diagnosisFinished`/`benchmarkFinished`/`diagnosisFailed` signals (the --json documents) and
    the `tensorTree`, `findingsView` and `benchPlot` attributes. The actions return at once and
    finish in the engine; `exportFinished(path)` too. `open_script` traces a user's script (its
    document through `diagnosisFinished`); `compare_with_float32` ends with `driftFinished`."""

    diagnosisFinished = Signal(object)
    benchmarkFinished = Signal(object)
    diagnosisFailed = Signal(str)
    exportFinished = Signal(str)    # the path of the written script
    driftFinished = Signal(object)  # the drift --json document

    def __init__(self, spec=None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("fp16studio")
        self.setWindowIcon(app_icon())
        self.resize(WINDOW_SIZE)
        self.controller = c = SessionController(self)
        c.ask_consent = lambda question: self._confirm(
            "Run this code?", f"{question}.\n\nThis spec was not written here: read the code "
            "first. Run it? (Asked again only if either file changes.)")
        self.undo_stack, self.worker = c.undo_stack, c.worker
        self._build_panels()
        self._build_actions()
        self._build_menus()
        self._build_toolbar()
        self.status = StatusInfo(self.statusBar())
        self.status.watch_engine(lambda: self.worker.engine.pid)
        self.lookups = SourceLookups(self.form, self.preview, self.worker, self.log.log, self)
        self._wire()
        self._on_busy(False)
        if spec is None:
            c.load_demo()
        elif isinstance(spec, (PipelineSpec, dict)):
            c.start_with(spec if isinstance(spec, PipelineSpec) else PipelineSpec.from_dict(spec))
        else:
            c.open_path(str(spec))
        QTimer.singleShot(0, self.lookups.scan_cache)
        QTimer.singleShot(0, lambda: self.worker.submit(_warm_up_job(self.log.log)))

    # -- the state, forwarded -------------------------------------------------------------------
    spec = property(lambda self: self.controller.spec)
    diagnosis = property(lambda self: self.controller.diagnosis)
    diagnosis_doc = property(lambda self: self.controller.diagnosis_doc)
    bench_doc = property(lambda self: self.controller.bench_doc)
    session_path = property(lambda self: self.controller.session_path)

    def run_diagnosis(self) -> bool:
        return self.controller.run_diagnosis()

    def apply_fix(self, fix_id: str) -> bool:
        return self.controller.apply_fix(fix_id)

    def run_benchmark(self, variants=None) -> bool:
        started = self.controller.run_benchmark(variants)
        if started:   # the samples are drawn live in the Compare tab
            self.main_tabs.setCurrentWidget(self.compare)
        return started

    def open_script(self, path: str, args=()) -> bool:
        """Trace the user's script (a path or `demo:NAME`) run with `args`."""
        started = self.controller.run_trace(path, args)
        if started:   # its result is a tensor tree and findings
            self.main_tabs.setCurrentWidget(self.tensors)
        return started

    def compare_with_float32(self, variant: str | None = None) -> bool:
        started = self.controller.run_drift(variant)
        if started:
            self.main_tabs.setCurrentWidget(self.drift)
        return started

    def continue_as_pipeline(self) -> bool:
        return self._may_discard() and self.controller.continue_as_pipeline()

    def cancel(self):
        self.controller.cancel()

    def restore_session(self, session):
        self.controller.restore_session(session)

    def open_path(self, path: str):
        self.controller.open_path(path)

    # -- layout ---------------------------------------------------------------------------------
    def _build_panels(self):
        self.form = SpecForm()
        self.tensors = TensorPanel()
        self.tensorTree = self.tensors.tree
        self.preview = PreviewPanel()
        self.compare = CompareView()
        self.benchPlot = self.compare.plot
        self.drift = DriftView()
        self.findings = FindingsPanel()
        self.findingsView = self.findings.view
        self.log = LogPanel()
        self.history = HistoryPanel(self.undo_stack)

        self.main_tabs = QTabWidget(documentMode=False)
        self.main_tabs.addTab(self.tensors, "Tensors")
        self.main_tabs.addTab(self.preview, "Dataset")
        self.main_tabs.addTab(self.compare, "Compare")
        self.main_tabs.addTab(self.drift, "Drift")
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
        a, c, keys = self._action, self.controller, QKeySequence.StandardKey
        self.act_new = a("&New Pipeline", self.new_pipeline, "new", keys.New,
                         "Start over with a blank pipeline in this window")
        self.act_new_window = a("New &Window", self._new_window, None, "Ctrl+Shift+N",
                                "Open another window on the demo pipeline")
        self.act_open = a("&Open…", self._open_dialog, "open", keys.Open, "Open a pipeline spec or a saved session")
        self.act_save = a("&Save Session", self.save_session, "save", keys.Save,
                          "Save the spec with its latest findings and benchmark")
        self.act_save_as = a("Save Session &As…", lambda: self.save_session(ask=True), None, keys.SaveAs)
        self.act_trace = a("&Trace Script…", self._trace_dialog, "file", "Ctrl+T",
                           "Run your own Python script as it is and diagnose the models it runs")
        self.act_continue = a("&Continue as a Pipeline", self.continue_as_pipeline, "fix", None,
                              "Make the pipeline recovered from the traced script the spec, so "
                              "Run, fixes, Benchmark and Export work on it")
        self.act_continue.setEnabled(False)
        self.act_export = a("&Export Script…", self._export_dialog, "export", "Ctrl+E",
                            "Write a runnable Python script of this pipeline")
        self.act_report = a("Export &HTML Report…", self._report_dialog, "html", None,
                            "Write the findings and benchmark as one HTML file")
        # Closing asks before discarding unsaved changes (closeEvent), so Quit only closes.
        self.act_quit = a("&Quit", self.close, "quit", keys.Quit)
        self.act_run = a("&Run", c.run_diagnosis, "run", "Ctrl+R",
                         "Load the model and dataset and run one traced forward pass (Ctrl+R)")
        self.act_cancel = a("&Cancel", c.cancel, "stop", "Esc", "Stop the running job")
        self.act_bench = a("&Benchmark", self.run_benchmark, "bench", "Ctrl+B",
                           "Measure each precision variant on the same batch (Ctrl+B)")
        self.act_drift = a("Compare with &float32", self.compare_with_float32, "search", "Ctrl+D",
                           "Run in float32 and in the half precision on one batch and show, "
                           "module by module, where they part (Ctrl+D)")
        self.act_undo = self.undo_stack.createUndoAction(self, "&Undo")
        self.act_redo = self.undo_stack.createRedoAction(self, "&Redo")
        for action, name, key in ((self.act_undo, "undo", keys.Undo), (self.act_redo, "redo", keys.Redo)):
            action.setShortcut(QKeySequence(key))
            action.setIcon(icon(name))
            action.setProperty("iconName", name)
        # Short labels in the toolbar; what would be undone is in the tooltip (bound methods,
        # so the connections end with the window).
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
        file.addActions([self.act_trace, self.act_continue])
        for group in ([self.act_save, self.act_save_as], [self.act_export, self.act_report], [self.act_quit]):
            file.addSeparator()
            file.addActions(group)
        bar.addMenu("&Edit").addActions([self.act_undo, self.act_redo])
        view = bar.addMenu("&View").addMenu("&Theme")
        self.theme_actions = QActionGroup(self)
        current = settings().value("theme", "system")
        for choice in CHOICES:
            action = view.addAction(choice.capitalize() if choice != "system" else "Follow the System")
            action.setCheckable(True)
            action.setChecked(choice == current)
            action.setData(choice)
            self.theme_actions.addAction(action)
        self.theme_actions.triggered.connect(lambda action: self.choose_theme(action.data()))
        bar.addMenu("&Run").addActions([self.act_run, self.act_bench, self.act_drift, self.act_cancel])
        helpm = bar.addMenu("&Help")
        demos = helpm.addMenu(icon("demo"), "&Demo Pipelines")
        from fp16studio.core.demo import DEMOS

        for name, description in DEMOS.items():
            action = demos.addAction(name)
            action.setToolTip(description)
            action.setStatusTip(description)
            action.triggered.connect(lambda _c=False, n=name: self._may_discard() and self.controller.load_demo(n))
        demos.setToolTipsVisible(True)
        helpm.addSeparator()
        helpm.addAction(self.act_about)

    def _build_toolbar(self):
        tools = QToolBar("Main", objectName="mainToolbar", movable=False)
        tools.setIconSize(QSize(20, 20))
        tools.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        for group in ([self.act_run, self.act_cancel], [self.act_bench, self.act_drift],
                      [self.act_undo, self.act_redo]):
            tools.addActions(group)
            tools.addSeparator()
        tools.widgetForAction(self.act_run).setObjectName("runButton")
        tools.addAction(self.act_export)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        tools.addWidget(spacer)
        self.stage_label = QLabel("", objectName="stageLabel")
        self.stage_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.progress = QProgressBar(fixedWidth=180, textVisible=False)
        tools.addWidget(self.stage_label)
        # A widget in a toolbar is shown and hidden through its action.
        self._progress_action = tools.addWidget(self.progress)
        self.addToolBar(tools)
        self.toolbar = tools

    def refresh_icons(self):
        """Re-tint icons after the theme switched between light and dark."""
        for item in self.findChildren(QAction) + self.findChildren(QToolButton):
            name = item.property("iconName")
            if name:
                item.setIcon(icon(name))

    def choose_theme(self, choice: str):
        """View → Theme: light, dark, or following the system (remembered)."""
        app_theme(QApplication.instance()).choose(choice)
        settings().setValue("theme", choice)
        self.refresh_icons()

    # -- wiring ---------------------------------------------------------------------------------
    def _wire(self):
        c = self.controller
        self.form.specEdited.connect(lambda new, key: c.edit(new, f"Edit {key}"))
        self.findings.fixRequested.connect(c.apply_fix)
        self.findings.revealRequested.connect(self.reveal_location)
        c.specChanged.connect(self._on_spec)
        c.diagnosisChanged.connect(self._on_diagnosis)
        c.benchChanged.connect(lambda doc: self.compare.set_result(doc) if doc else self.compare.clear())
        c.benchStale.connect(self.compare.set_stale)
        c.benchSample.connect(self.compare.add_sample)
        c.driftChanged.connect(self._on_drift)
        c.driftStale.connect(self.drift.set_stale)
        c.driftFailed.connect(self.drift.show_failure)
        c.driftFinished.connect(self.driftFinished)
        c.traceChanged.connect(self._on_trace)
        self.findings.add_header_button(self.act_continue)
        c.busyChanged.connect(self._on_busy)
        c.titleChanged.connect(self.setWindowTitle)
        c.progressChanged.connect(self._on_progress)
        c.statusChanged.connect(self.status.message.setText)
        c.logged.connect(self.log.log)
        c.warned.connect(self._warn)
        c.opened.connect(lambda: self.tensors.clear_filters())
        c.diagnosisFailed.connect(self._on_failed)
        c.diagnosisFinished.connect(self.diagnosisFinished)
        c.benchmarkFinished.connect(self.benchmarkFinished)
        c.diagnosisFailed.connect(self.diagnosisFailed)
        c.exportFinished.connect(self.exportFinished)

    def _on_spec(self, spec):
        self.form.set_spec(spec)
        self.findings.set_fixes_enabled(self.controller.fixes_enabled)
        self.lookups.spec_changed(spec)

    def _on_diagnosis(self, diagnosis):
        c = self.controller
        self.tensors.set_module_values("headroom", c.tree_index.headroom if c.tree_index else None)
        if diagnosis is None:
            self.tensors.set_tree(None)
            self.findings.set_findings([], ok=False)
            self.findings.detail.show_text(NO_MODEL if not c.spec.model else "Press Run to diagnose this pipeline.")
            return
        self.tensors.set_tree(diagnosis.tree, c.tree_index)
        self.tensors.model.set_highlighted(node.path for node in c.located.values())
        self._show_findings()
        if diagnosis.error and not diagnosis.findings:
            self.findings.show_failure(diagnosis.error.get("message", ""))
        if diagnosis.tree is not None:
            self.status.set_environment(diagnosis.environment, diagnosis.device, c.gpu_memory)

    def _show_findings(self):
        c = self.controller
        findings = c.current_findings()
        ok = not findings and (c.diagnosis is None or c.diagnosis.ok)
        self.findings.set_fixes_enabled(c.fixes_enabled)
        self.findings.set_findings(findings, ok, c.located, code_fixes=c.script_trace is not None)

    def _on_drift(self, result):
        self.drift.set_result(result.to_json() if result is not None else None)
        self.tensors.set_module_values("drift", rolled_up(drift_by_module(result.modules), min)
                                       if result is not None else None)
        if result is not None:
            self._show_findings()

    def _on_trace(self, trace):
        recovered = trace is not None and trace.recovered_spec is not None
        self.act_continue.setEnabled(recovered and not self.controller.busy)
        self.findings.header_buttons[self.act_continue].setVisible(recovered)

    def _on_failed(self, message: str):
        self.findings.show_failure(message)
        if message == NO_MODEL:
            self.form.model_picker.setFocus()

    def _on_busy(self, busy: bool):
        self.act_run.setEnabled(not busy)
        self.act_bench.setEnabled(not busy)
        self.act_drift.setEnabled(not busy)
        self.act_trace.setEnabled(not busy)
        trace = self.controller.script_trace
        self.act_continue.setEnabled(not busy and trace is not None and trace.recovered_spec is not None)
        self.act_cancel.setEnabled(busy)
        self.findings.set_fixes_enabled(self.controller.fixes_enabled)
        self._progress_action.setVisible(busy)
        if not busy:
            self.progress.setValue(0)
            self.stage_label.setText("")

    def _on_progress(self, value: int, maximum: int, label: str):
        # QProgressBar.setValue repaints at once, and a synchronous repaint flushes every dirty
        # region of the window with it (25 ms here); with updates off it only schedules one.
        self.progress.setUpdatesEnabled(False)
        self.progress.setRange(0, maximum)
        self.progress.setValue(value)
        self.progress.setUpdatesEnabled(True)
        self.stage_label.setText(label)

    def reveal_location(self, location: str):
        node = self.controller.located.get(location)
        if node is not None and self.tensors.reveal(node):
            self.main_tabs.setCurrentWidget(self.tensors)

    def _new_window(self):
        window = MainWindow()
        window.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        window.show()

    # -- closing --------------------------------------------------------------------------------
    def closeEvent(self, event):
        """Ask before discarding unsaved changes (Quit, Ctrl+Q and the close button all come
        here); then cancel the running job and stop the engine."""
        if self.controller.closed:
            return super().closeEvent(event)
        if not self._may_discard():
            event.ignore()
            return
        self.lookups.shutdown()
        if not self.controller.shutdown():
            self.log.log("error", "The worker did not stop in time.")
        self.log.detach()
        super().closeEvent(event)


def _warm_up_job(log):
    """Import the engine's heavy libraries while the user reads the window, so the first Run
    does not wait seconds for them."""
    from .worker import Job

    return Job("warm-up", "warm-up", on_error=lambda m, d: log("warning", f"Loading torch: {m}"))
