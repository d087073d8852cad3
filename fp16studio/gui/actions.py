"""The window's actions, menus and toolbar, and what enables them (as napari keeps its
`_qt/_qapp_model/qactions/` apart from the viewer). A mixin of MainWindow, which provides
`controller`, `undo_stack`, the panels and the slots the actions call; the File menu's dialogs
are in file_actions.py.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QApplication, QProgressBar, QToolBar

from .file_actions import settings
from .fit import ElidedLabel
from .theme import CHOICES, app_theme, set_icon


STAGE_MAX_PX = 200   # the stage's label at its widest: longer words are elided, whole on hover
CONTINUE_TIP = ("Make the pipeline recovered from the traced script the spec, so Run, fixes, "
                "Benchmark and Export work on it")
RUN_TIP = "Load the model and dataset and run one traced forward pass (Ctrl+R)"


class WindowActions:
    def _action(self, text, slot, icon_name=None, shortcut=None, tip=None) -> QAction:
        action = QAction(text, self)
        if icon_name:
            set_icon(action, icon_name)
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
                              CONTINUE_TIP)
        self.act_continue.setEnabled(False)
        self.act_export = a("&Export Script…", self._export_dialog, "export", "Ctrl+E",
                            "Write a runnable Python script of this pipeline")
        self.act_report = a("Export &HTML Report…", self._report_dialog, "html", None,
                            "Write the findings and benchmark as one HTML file")
        # Closing asks before discarding unsaved changes (closeEvent), so Quit only closes.
        self.act_quit = a("&Quit", self.close, "quit", keys.Quit)
        self.act_run = a("&Run", c.run_diagnosis, "run", "Ctrl+R", RUN_TIP)
        self.act_cancel = a("&Cancel", c.cancel, "stop", "Esc", "Stop the running job")
        self.act_bench = a("&Benchmark", self.run_benchmark, "bench", "Ctrl+B",
                           "Measure each precision variant on the same batch (Ctrl+B)")
        self.act_drift = a("Compare with &float32", self.compare_with_float32, "search", "Ctrl+D",
                           "Run in float32 and in the half precision on one batch and show, "
                           "module by module, where they part (Ctrl+D)")
        self.act_fp8 = a("Plan F&P8", lambda: self.plan_fp8(self.fp8.recipe.currentText()), "search",
                         None, "Which Linear layers can go to FP8, and what each would lose (SQNR "
                         "against bfloat16) on this batch")
        self.act_undo = self.undo_stack.createUndoAction(self, "&Undo")
        self.act_redo = self.undo_stack.createRedoAction(self, "&Redo")
        for action, name, key in ((self.act_undo, "undo", keys.Undo), (self.act_redo, "redo", keys.Redo)):
            action.setShortcut(QKeySequence(key))
            set_icon(action, name)
        # Short labels in the toolbar; what would be undone is in the tooltip (bound methods,
        # so the connections end with the window).
        self.undo_stack.undoTextChanged.connect(self._label_undo)
        self.undo_stack.redoTextChanged.connect(self._label_redo)
        self._label_undo("")
        self._label_redo("")
        self.act_about = a("&About fp16studio", self._about, "info")
        self.act_getting_started = a("&Getting Started", self._getting_started, "info", None,
                                     "The loop in pictures: pick, Run, fix, compare, export")

    def _getting_started(self):
        from .getting_started import GettingStarted

        GettingStarted(self).show()

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
        self.theme_actions.triggered.connect(lambda action: self._choose_theme_later(action.data()))
        bar.addMenu("&Run").addActions([self.act_run, self.act_bench, self.act_drift, self.act_fp8,
                                        self.act_cancel])
        helpm = bar.addMenu("&Help")
        helpm.addAction(self.act_getting_started)
        demos = helpm.addMenu("&Demo Pipelines")
        set_icon(demos, "demo")
        from fp16studio.core.demo.pipelines import DEMOS

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
        tools.addActions([self.act_run, self.act_cancel])
        tools.widgetForAction(self.act_run).setObjectName("runButton")
        # What runs, and how far: right after Run and Cancel, since a toolbar narrower than its
        # buttons hides them from its end (into its » menu), and this must stay in view.
        self.stage_label = ElidedLabel("", objectName="stageLabel")
        self.stage_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.progress = QProgressBar(fixedWidth=140, textVisible=False)
        # A widget in a toolbar is shown and hidden through its action.
        self._stage_action = tools.addWidget(self.stage_label)
        self._stage_action.setVisible(False)
        self._progress_action = tools.addWidget(self.progress)
        tools.addSeparator()
        for group in ([self.act_bench, self.act_drift], [self.act_undo, self.act_redo]):
            tools.addActions(group)
            tools.addSeparator()
        tools.addAction(self.act_export)
        self.addToolBar(tools)
        self.toolbar = tools

    def choose_theme(self, choice: str):
        """View → Theme: light, dark, or following the system (remembered). Icons and plots
        follow at once (theme.set_icon, plot_style). Every widget is restyled: a busy cursor
        meanwhile."""
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            app_theme(QApplication.instance()).choose(choice)
        finally:
            QApplication.restoreOverrideCursor()
        settings().setValue("theme", choice)

    def _choose_theme_later(self, choice: str):
        """From the menu: the menu is closed and the window drawn again under it first, so the
        restyling does not leave the open menu frozen on the screen."""
        self.repaint()
        QTimer.singleShot(0, self, lambda: self.choose_theme(choice))

    # -- what is enabled ------------------------------------------------------------------------
    def _on_busy(self, busy: bool):
        for action in (self.act_run, self.act_bench, self.act_drift, self.act_fp8, self.act_trace,
                       self.fp8.run_button):
            action.setEnabled(not busy)
        self.act_cancel.setEnabled(busy)
        self._enable_continue()
        self.findings.set_fixes_enabled(self.controller.fixes_enabled)
        self._progress_action.setVisible(busy)
        if not busy:
            self._on_progress(0, self.progress.maximum(), "")

    def _on_trace(self, trace):
        """Continue as a Pipeline beside a trace's findings: on, or off saying why."""
        self._enable_continue()
        self.findings.header_buttons[self.act_continue].setVisible(trace is not None)

    def _say_why_not_continue(self, why: str | None):
        self.act_continue.setToolTip(why or CONTINUE_TIP)   # its button's too
        self.act_continue.setStatusTip(why or CONTINUE_TIP)

    def _enable_continue(self):
        """Continue as a Pipeline: while a trace whose spec was recovered is shown, and idle."""
        trace = self.controller.script_trace
        self.act_continue.setEnabled(trace is not None and trace.recovered_spec is not None
                                     and not self.controller.busy)

    def _on_progress(self, value: int, maximum: int, label: str):
        # QProgressBar.setValue repaints at once, and a synchronous repaint flushes every dirty
        # region of the window with it (25 ms here); with updates off it only schedules one.
        self.progress.setUpdatesEnabled(False)
        self.progress.setRange(0, maximum)
        self.progress.setValue(value)
        self.progress.setUpdatesEnabled(True)
        self._say_stage(label)

    def _say_stage(self, label: str):
        """The stage's words, in a label as wide as the longest so far (up to STAGE_MAX_PX),
        shown while it says something: a label following each text's width laid the whole
        toolbar out again at every stage; this one is laid out when it widens."""
        stage = self.stage_label
        stage.setText(label)
        wanted = min(STAGE_MAX_PX, stage.sizeHint().width()) if label else 0
        if wanted > stage.minimumWidth() or not label:
            # Of a fixed size, new words ask no layout at all (QWidget.updateGeometry).
            stage.setFixedSize(wanted, stage.sizeHint().height())
        self._stage_action.setVisible(bool(label))
