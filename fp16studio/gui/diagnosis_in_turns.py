"""A diagnosis shown across the window's panels in turns: the tensor tree in the result's own
event, its findings listed in the next (read from the session state then), the first one's
detail in the one after, so a result is several short waits of the window, not one long one
(issue 31). `finished` carries diagnosisFinished's document once all are shown.

What the Findings panel lists, whether its fixes are one click and what the Tensors tab and the
form say of a result that is not current, all follow from the session state: `show_findings`.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from fp16studio.core.diagnostics.findings import by_severity

from .findings_panel import FindingsPanel
from .session_controller import SessionController
from .status_bar import StatusInfo
from .tree_panel import TensorPanel
from .turns import Turns


class DiagnosisInTurns(QObject):
    finished = Signal(object)   # the diagnosis's --json document, once its findings are shown

    def __init__(self, controller: SessionController, tensors: TensorPanel, findings: FindingsPanel,
                 status: StatusInfo, say_what_the_form_is: Callable[[str | None], None], parent=None):
        super().__init__(parent)
        self._controller, self._tensors, self._findings, self._status = controller, tensors, findings, status
        self._say_what_the_form_is = say_what_the_form_is
        self._turns = Turns(self, then=self._say_finished)   # a result's, read from the state then
        self._spec_findings_later = QTimer(self, singleShot=True, interval=0, timeout=self.show_findings)
        self._finished_doc = None   # sent once the findings are shown

    def show_diagnosis(self, diagnosis):
        """The controller's diagnosis (or None): the tree now, the findings in the turns after."""
        state = self._controller.state
        index = state.tree_index
        # The tree's own note goes with it: set with the findings, its change of the tree's
        # height repainted the whole tree a second time (issue 31).
        self._tensors.set_notice(state.tree_notice())
        self._tensors.set_module_values("headroom", index.headroom if index else None)
        self._tensors.set_inventory(state.inventory)   # core's, as the --json document has it
        if diagnosis is None:
            self._no_findings_later()
            self._tensors.set_tree(None)
            self.show_findings()
            if state.tracing is None and not state.findings_shown() and not state.drift_current:
                self._findings.detail.show_text(state.missing() or "Press Run to diagnose this pipeline.")
            return
        self._tensors.set_tree(diagnosis.tree, index)
        self._tensors.model.set_highlighted(node.path for node in state.located.values())
        # The module the first finding names, shown now: choosing that finding in a later turn
        # reveals it, which then only selects its row (expanded and scrolled to then, the whole
        # tree was painted a second time).
        first = _first_located(state)
        if first is not None:
            self._tensors.show_node(first)
        if diagnosis.tree is not None:
            self._status.set_environment(diagnosis.environment, diagnosis.device, state.gpu_memory)
        self._turns.start(self._show_result_findings, self._findings.choose_first)

    def findings_changed(self, _tracing=None):
        """A trace started, or ended with no result: what the panels say changes at once."""
        self.show_diagnosis(self._controller.diagnosis)
        self._turns.finish()

    def finish_when_shown(self, doc):
        """`finished(doc)` once the result's findings are shown too."""
        self._finished_doc = doc
        if not self._turns.pending:
            self._say_finished()

    def show_failure(self, message: str):
        """A run failed: its message replaces the findings still to come."""
        self._no_findings_later()
        self._findings.show_failure(message)

    def show_findings_later(self):
        """`show_findings` in an event of its own (the spec was edited)."""
        self._spec_findings_later.start()

    def show_findings(self, choose_first: bool = True):
        """The Findings panel and the Tensors tab's note, from the session state: what is listed,
        whether its fixes are one click, and what is said of it when it is not current (the
        first finding chosen, its detail shown, unless not `choose_first`)."""
        state = self._controller.state
        self._tensors.set_notice(state.tree_notice())
        self._say_what_the_form_is(state.form_notice())
        self._findings.set_fixes_enabled(self._controller.fixes_enabled)
        if state.tracing is not None:
            self._findings.show_pending(state.findings_notice())
            return
        findings = state.findings_shown()
        # "All clear" is said of a run (or a current drift) that found nothing, never of nothing.
        ran = state.diagnosis is not None or state.drift_current
        ok = not findings and ran and (state.diagnosis is None or state.diagnosis.ok)
        self._findings.set_findings(findings, ok, state.located, code_fixes=state.trace is not None,
                                    notice=state.findings_notice(), choose_first=choose_first)
        self._findings.set_steps(state.trace.steps if state.trace is not None else ())

    def _show_result_findings(self):
        self.show_findings(choose_first=False)   # the detail in a turn of its own
        state, diagnosis = self._controller.state, self._controller.diagnosis
        if diagnosis is not None and diagnosis.error and not diagnosis.findings and state.tracing is None:
            self._findings.show_failure(diagnosis.error.message)

    def _no_findings_later(self):
        """What is shown next replaces a result's findings still to come (a failure, nothing)."""
        if self._turns.pending:
            self._turns.drop()
            self._say_finished()

    def _say_finished(self):
        doc, self._finished_doc = self._finished_doc, None
        if doc is not None:
            self.finished.emit(doc)


def _first_located(state):
    """The tree node of the finding the Findings panel chooses first (its first row, findings
    in severity order) when a result is shown, or None."""
    if state.tracing is not None:
        return None
    findings = by_severity(state.findings_shown())
    return state.located.get(findings[0].location) if findings else None
