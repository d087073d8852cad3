"""The main window: layout and wiring around one SessionController.

The controller adapts the session (fp16studio.session_state: the spec, its file, the findings,
benchmark and drift and what follows from them) to Qt and does the work; the panels observe its
signals; this class lays them out, wires them, and keeps the CONTRACT §5 surface by forwarding.
The actions, menus and toolbar are in actions.py, the File menu's dialogs (what to open, where
to save, whether to discard) in file_actions.py, a diagnosis shown across the panels in turns
in diagnosis_in_turns.py.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QSplitter, QTabWidget, QVBoxLayout, QWidget

from fp16studio.core import PipelineSpec
from fp16studio.core.diagnostics.inventory import drift_by_module, fp8_by_layer, rolled_up
from fp16studio.session_state import NO_MODEL
from .actions import RUN_TIP, WindowActions
from .collector import collect_on_gui_thread
from .connect_dialog import EngineChoice
from .diagnosis_in_turns import DiagnosisInTurns
from .fp8_view import Fp8View
from .file_actions import FileActions
from .findings_panel import FindingsPanel
from .fit import stale_note
from .history import HistoryPanel
from .later_pages import ImportsMeanwhile, LaterPages
from .long_lived import keep_lasting_out_of_collections
from .log_panel import LogPanel
from .placement import place, remember
from .preview_panel import PreviewPanel
from .remote_browser import Browse
from .rank_picker import RankPicker
from .session_controller import DIAGNOSES, SessionController
from .source_lookups import SourceLookups
from .spec_form import SpecForm
from .status_bar import StatusInfo
from .theme import app_icon
from .tree_panel import TensorPanel

# How long after the window's first turn of the event loop (its first paint) its threads start:
# the look-ups that need no spec, the charts' modules (pyqtgraph, NumPy), which make the
# Compare and Drift tabs quick to open later, and the status bar's psutil.
BACKGROUND_AFTER_MS = 300


class MainWindow(WindowActions, FileActions, QMainWindow):
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
        collect_on_gui_thread(QApplication.instance())
        self.setWindowTitle("fp16studio")
        self.setWindowIcon(app_icon())
        place(self)
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
        self.engine_choice = EngineChoice(c, self.status, self)   # this computer, or a host
        c.engine_for = self.engine_choice.offer   # a session made on another engine's machine
        self.diagnosis_shown = DiagnosisInTurns(c, self.tensors, self.findings, self.status,
                                                self._say_what_the_form_is, self)
        self.lookups = SourceLookups(self.form, self.preview, self.worker, self.log.log, self)
        self.engine_choice.switched.connect(self.lookups.on_host)   # the box's files
        self.browse = Browse(self.worker, self)   # Browse: this computer's folders, or the box's
        self.form.browse_with(self.browse)
        self.engine_choice.switched.connect(self.browse.on_host)
        self._wire()
        self._on_busy(False)
        if spec is None:
            c.load_demo()
        elif isinstance(spec, (PipelineSpec, dict)):
            c.start_with(spec if isinstance(spec, PipelineSpec) else PipelineSpec.from_dict(spec))
        else:
            c.open_path(str(spec))
        QTimer.singleShot(0, lambda: self.worker.submit(_warm_up_job(self.log.log)))
        # The window's own threads wait until it has shown: their imports take the GIL, which
        # its first paint needs at every call into Python.
        QTimer.singleShot(0, self, lambda: QTimer.singleShot(BACKGROUND_AFTER_MS, self, self._in_background))

    def _in_background(self):
        if self.controller.closed:   # closed before it came to this: its pool is shut down
            return
        self.lookups.start()
        # One thread for the imports: two at once held the GIL from the window longer.
        loading = ImportsMeanwhile((f"{__package__}.compare", f"{__package__}.drift_view", "psutil"),
                                   parent=self)
        self.status.start_sampling(loading)
        self.pages.make_after(loading, then=keep_lasting_out_of_collections)

    # -- the state, forwarded -------------------------------------------------------------------
    spec = property(lambda self: self.controller.spec)
    diagnosis = property(lambda self: self.controller.diagnosis)
    diagnosis_doc = property(lambda self: self.controller.diagnosis_doc)
    bench_result = property(lambda self: self.controller.bench_result)
    session_path = property(lambda self: self.controller.session_path)
    # The Compare and Drift tabs' views, made when first needed (later_pages.py).
    compare = property(lambda self: self.pages.page("compare"))
    drift = property(lambda self: self.pages.page("drift"))
    benchPlot = property(lambda self: self.compare.plot)

    def run_diagnosis(self) -> bool:
        return self.controller.run_diagnosis()

    def apply_fix(self, fix_id: str) -> bool:
        return self.controller.apply_fix(fix_id)

    def run_benchmark(self, variants=None) -> bool:
        started = self.controller.run_benchmark(variants)
        if started:   # the samples are drawn live in the Compare tab
            self.main_tabs.setCurrentWidget(self.compare)
        return started

    def open_script(self, path: str, args=(), launch: str | None = None) -> bool:
        """Trace the user's script (a path or `demo:NAME`) run with `args`; under `launch`
        (`torchrun --nproc-per-node 2`), each rank traced and the ranks shown."""
        started = self.controller.run_trace(path, args, launch)
        if started:   # its result is a tensor tree and findings
            self.main_tabs.setCurrentWidget(self.tensors)
        return started

    def compare_with_float32(self, variant: str | None = None) -> bool:
        started = self.controller.run_drift(variant)
        if started:
            self.main_tabs.setCurrentWidget(self.drift)
        return started

    def plan_fp8(self, recipe: str = "tensorwise") -> bool:
        """The FP8 plan of the spec, shown in the FP8 tab."""
        started = self.controller.run_fp8(recipe)
        if started:
            self.main_tabs.setCurrentWidget(self.fp8)
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
        self.fp8 = Fp8View()
        self.findings = FindingsPanel()
        self.findingsView = self.findings.view
        self.log = LogPanel()
        self.history = HistoryPanel(self.undo_stack)

        self.main_tabs = QTabWidget(documentMode=False)
        self.main_tabs.addTab(self.tensors, "Tensors")
        self.main_tabs.addTab(self.preview, "Dataset")
        self.pages = LaterPages(self.main_tabs)
        self.pages.add("compare", "Compare", _compare_view)
        self.pages.add("drift", "Drift", _drift_view)
        self.main_tabs.addTab(self.fp8, "FP8")
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
        self.form_notice = stale_note("")   # while a script's trace is what the window shows
        column.addWidget(self.form_notice)
        column.addWidget(self.form, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(middle)
        # A launched run's ranks (trace --launch) over the findings; hidden for one process.
        self.ranks = RankPicker()
        self.ranks.hide()
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.ranks)
        right.addWidget(self.findings)
        self.splitter.addWidget(right)
        self.splitter.setSizes([300, 680, 300])
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

    # -- wiring ---------------------------------------------------------------------------------
    def _wire(self):
        c = self.controller
        self.form.specEdited.connect(lambda new, key: c.edit(new, f"Edit {key}"))
        self.findings.fixRequested.connect(c.apply_fix)
        self.findings.revealRequested.connect(self.reveal_location)
        c.specChanged.connect(self._on_spec)
        c.diagnosisChanged.connect(self.diagnosis_shown.show_diagnosis)
        c.diagnosisChanged.connect(self.ranks.set_trace)
        self.ranks.rankChosen.connect(self._show_rank_tree)
        c.findingsChanged.connect(self.diagnosis_shown.findings_changed)
        c.benchChanged.connect(self._on_bench)
        # A page not made yet has no figures to mark stale.
        c.benchStale.connect(lambda stale: self._if_made("compare", "set_stale", stale))
        c.benchSample.connect(lambda sample: self.compare.add_sample(sample))
        c.driftChanged.connect(self._on_drift)
        c.driftStale.connect(lambda stale: self._if_made("drift", "set_stale", stale))
        c.driftFailed.connect(lambda message: self.drift.show_failure(message))
        c.driftFinished.connect(self.driftFinished)
        c.fp8Changed.connect(self._on_fp8)
        c.fp8Stale.connect(self.fp8.set_stale)
        c.fp8Failed.connect(self.fp8.show_failure)
        self.fp8.runRequested.connect(self.plan_fp8)
        c.traceChanged.connect(self._on_trace)
        c.continueChanged.connect(self._say_why_not_continue)
        c.deviceChanged.connect(self.status.set_device)
        self.findings.add_header_button(self.act_continue)
        c.busyChanged.connect(self._on_busy)
        c.titleChanged.connect(self.setWindowTitle)
        c.progressChanged.connect(self._on_progress)
        c.statusChanged.connect(self.status.message.setText)
        c.environmentChanged.connect(self.status.set_environment)
        c.logged.connect(self.log.log)
        c.warned.connect(self._warn)
        c.opened.connect(lambda: self.tensors.clear_filters())
        c.diagnosisFailed.connect(self._on_failed)
        c.diagnosisFinished.connect(self.diagnosis_shown.finish_when_shown)
        self.diagnosis_shown.finished.connect(self.diagnosisFinished)
        c.benchmarkFinished.connect(self.benchmarkFinished)
        c.diagnosisFailed.connect(self.diagnosisFailed)
        c.engineLost.connect(lambda kind, line: kind in DIAGNOSES and self.diagnosisFailed.emit(line))
        c.exportFinished.connect(self.exportFinished)

    def _on_spec(self, spec):
        self.form.set_spec(spec)
        self.lookups.spec_changed(spec)
        # Whether the findings and the tree are of this spec, and which are listed (a drift's
        # only while it is of the current spec), follow from it: an event later, so a fix's
        # click (the edit, then its run) and what it makes stale are two waits, not one.
        self.diagnosis_shown.show_findings_later()

    def _say_what_the_form_is(self, notice: str | None):
        """While a trace is shown, the form and Run say they are the pipeline's, not the script's."""
        self.form_notice.setText(notice or "")
        self.form_notice.setVisible(bool(notice))
        model = self.spec.model if self.spec is not None else ""
        self.act_run.setToolTip(
            RUN_TIP if notice is None or not model else
            f"Run the pipeline in the form ({model}), not the traced script (Ctrl+R)")

    def _show_rank_tree(self, rank: int):
        """A launched run's chosen rank: its own tensor tree (core keeps each rank's)."""
        tree = getattr(self.diagnosis, "rank_trees", {}).get(rank)
        shown = self.tensors.model.tree_index
        if tree is not None and (shown is None or shown.root is not tree):
            self.tensors.set_tree(tree)

    def _if_made(self, page: str, method: str, *args):
        view = self.pages.made(page)
        if view is not None:
            getattr(view, method)(*args)

    def _on_bench(self, result):
        if result is not None:
            self.compare.set_result(result)
        else:
            self._if_made("compare", "clear")

    def _on_drift(self, result):
        if result is not None:
            self.drift.set_result(result)
        else:
            self._if_made("drift", "set_result", None)
        self.tensors.set_module_values("drift", rolled_up(drift_by_module(result.modules), min)
                                       if result is not None else None)
        if result is not None:
            self.diagnosis_shown.show_findings()

    def _on_fp8(self, plan):
        self.fp8.set_result(plan)
        self.tensors.set_module_values("fp8", rolled_up(fp8_by_layer(plan), min) if plan else None)

    def _on_failed(self, message: str):
        self.diagnosis_shown.show_failure(message)
        if message == NO_MODEL:
            self.form.model_picker.setFocus()

    def reveal_location(self, location: str):
        node = self.controller.state.located.get(location)
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
        remember(self)
        self.lookups.shutdown()
        if not self.controller.shutdown():
            self.log.log("error", "The worker did not stop in time.")
        self.log.detach()
        super().closeEvent(event)


def _compare_view(parent):
    from .compare import CompareView

    return CompareView.in_parts(parent)


def _drift_view(parent):
    from .drift_view import DriftView

    return DriftView.in_parts(parent)


def _warm_up_job(log):
    """Import the engine's heavy libraries while the user reads the window, so the first Run
    does not wait seconds for them."""
    from .worker import Job

    return Job("warm-up", "warm-up", on_error=lambda m, d: log("warning", f"Loading torch: {m}"))
