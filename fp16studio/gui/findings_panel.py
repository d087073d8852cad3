"""The Findings panel: a list of findings, and the selected one in full with a button per fix.

A traced script's findings name the script's line ("script.py:LINE", its neighbours shown in
the detail); while the trace is not a pipeline its fixes are code to write there, not buttons.

The panel is as narrow as the window needs it: the detail scrolls vertically and every text in
it wraps to the panel's width (code too), so its minimum never pushes the window past the screen.
Findings that are not of the current spec are listed under a note that says so, their fixes off.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (QAbstractItemView, QCommandLinkButton, QFrame, QHBoxLayout, QHeaderView, QLabel,
                               QPushButton, QSplitter, QToolButton, QTreeView, QVBoxLayout, QWidget)

from fp16studio.core.diagnostics.findings import SEVERITIES, by_severity, severity_rank
from fp16studio.core.present.evidence_words import evidence_rows
from fp16studio.core.present.vocabulary import severity_counts, steps_summary
from .code_text import CodeText
from .shadow_sketch import ShadowSketch
from .fit import ElidedLabel, MeasuredLabel, VerticalScrollArea, WrappedText, stale_note, whole_cell_tips
from .roles import NODE_ROLE, RAW_ROLE
from .theme import icon, set_icon

PLAIN = Qt.TextFormat.PlainText   # the user's exception text is never read as markup
SOURCE_CONTEXT = 2                # lines shown either side of a finding's script line
# The panel's narrowest: a fix card's heading and its icon whole, the rest wraps.
PANEL_MIN_PX = 230


class FindingsModel(QAbstractTableModel):
    COLUMNS = ("Severity", "Finding", "Location")

    def __init__(self, parent=None):
        super().__init__(parent)
        self._findings: list = []
        for severity in SEVERITIES:   # drawn now: the first result's list drew them (2 ms)
            icon(f"status-{severity}")

    def set_findings(self, findings):
        self.beginResetModel()
        self._findings = by_severity(findings)
        self.endResetModel()

    def findings(self) -> list:
        return list(self._findings)

    def rowCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self._findings)

    def columnCount(self, parent=QModelIndex()):
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.COLUMNS[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not (0 <= index.row() < len(self._findings)):
            return None
        finding = self._findings[index.row()]
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (finding.severity, finding.code, source_label(finding) or finding.location)[column]
        if role == Qt.ItemDataRole.DecorationRole and column == 0:
            return icon(f"status-{finding.severity}")
        if role == Qt.ItemDataRole.ToolTipRole:
            return finding.message if column != 2 or not finding.source else finding.location
        if role == RAW_ROLE:
            return (-severity_rank(finding.severity), finding.code, finding.location)[column]
        if role == NODE_ROLE:
            return finding
        return None


class FindingDetail(QFrame):
    """One finding in full: what happened, the evidence, and its fixes, best first."""

    fixRequested = Signal(str)
    revealRequested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("findingDetail")
        self.title = MeasuredLabel(objectName="panelTitle", textFormat=PLAIN, wordWrap=True)
        # The message, the script's lines and the fixes' code break inside a word too (a module
        # path, a line of code) rather than run past the panel's edge.
        self.message = WrappedText("", PLAIN)
        self.evidence = MeasuredLabel(wordWrap=True, textFormat=Qt.TextFormat.RichText,
                               textInteractionFlags=Qt.TextInteractionFlag.TextSelectableByMouse)
        self.source = CodeText(objectName="sourceExcerpt")
        self.sketch = ShadowSketch()    # a quiet value against its float32 shadow
        self.reveal = QPushButton("Show in tensor tree")
        self.reveal.clicked.connect(lambda: self.revealRequested.emit(self._location))
        self.fixes_box = QVBoxLayout()
        self.fixes_box.setSpacing(6)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 10)
        layout.setSpacing(8)
        # What happened, then what to do about it, then the evidence: the fixes stay in view.
        layout.addWidget(self.title)
        layout.addWidget(self.message)
        layout.addWidget(self.sketch)
        layout.addWidget(self.source)
        self.fixes_label = MeasuredLabel("Fixes", objectName="muted", wordWrap=True)
        layout.addWidget(self.fixes_label)
        layout.addLayout(self.fixes_box)
        layout.addWidget(self.evidence)
        row = QHBoxLayout()
        row.addWidget(self.reveal)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addStretch(1)
        self._location = ""
        self.revealable: set[str] = set()   # the locations the tensor tree shows
        self.fix_buttons: list[QCommandLinkButton] = []   # the finding's, shown
        self.fix_codes: list[WrappedText] = []
        self._fix_links: list[QCommandLinkButton] = []   # made so far (_fix_link)
        self.code_fixes = False   # a trace's fixes: code to write in the script, not buttons
        self._fix_link(1)   # made with the panel, hidden by show_text: the first finding made them
        self.show_text("Run the pipeline to see findings.")

    def show_text(self, text: str, title: str = ""):
        self._location = ""
        self.title.setText(title)
        self.title.setVisible(bool(title))
        self.message.setText(text)
        self.evidence.hide()
        self.source.hide()
        self.sketch.hide()
        self.reveal.hide()
        self._set_fixes(())

    def show_finding(self, finding, enabled: bool = True):
        self._location = finding.location
        self.title.setText(f"{finding.severity.capitalize()}: {finding.code}")
        self.title.show()
        self.message.setText(finding.message)
        self.evidence.setText(_evidence_html(finding.location, {
            k: v for k, v in finding.evidence.items() if k != "series"}))
        self.evidence.show()
        self.sketch.set_series(finding.evidence.get("series"), finding.evidence.get("dtype", ""))
        excerpt = source_excerpt(finding.source) if finding.source else None
        if excerpt is not None:
            heading, code, first = excerpt
            self.source.set_code(heading, code, first=first, marked=finding.source["line"],
                                 fragment=True)
        self.source.setVisible(excerpt is not None)
        self.reveal.setVisible(finding.location in self.revealable)
        self._set_fixes(finding.fixes, enabled)

    def _set_fixes(self, fixes, enabled: bool = True):
        for widget in self.fix_codes + [b for b in self.fix_buttons if b not in self._fix_links]:
            self.fixes_box.removeWidget(widget)
            widget.hide()   # gone at once, not when the event loop gets to deleting it
            widget.deleteLater()
        self.fix_buttons, self.fix_codes = [], []
        self.fixes_label.setText("Fixes: write in the script" if self.code_fixes and fixes else "Fixes")
        self.fixes_label.setVisible(bool(fixes))
        links = () if self.code_fixes else fixes
        for i, fix in enumerate(links):
            # The title goes in the command link's description, which wraps, so a long title
            # stays whole in a narrow panel; the short heading says which fix is recommended.
            button = self._fix_link(i)
            button.setText("Recommended fix" if i == 0 else f"Alternative {i}")
            button.setDescription(fix.title)
            button.setProperty("fixId", fix.id)
            button.setToolTip(fix.explain or fix.title)
            button.setEnabled(enabled)
            button.show()
            self.fix_buttons.append(button)
        for button in self._fix_links[len(links):]:
            button.hide()
        if not self.code_fixes:
            return
        for fix in fixes:
            code = FixCode(fix.title, fix.code_text())
            self.fixes_box.addWidget(code)
            self.fix_codes.append(code)
            source = fix.code.source if fix.code is not None else None
            if source and source.get("line"):
                # The script is never written: a fixed copy beside it is, then traced.
                button = QPushButton("Trace a fixed copy", objectName="fixButton")
                button.setToolTip(f"Write a copy of the script with this fix at line "
                                  f"{source['line']} and trace it: {fix.explain or fix.title}")
                button.setEnabled(enabled)
                ask = f"{fix.id}:{source['line']}"
                button.clicked.connect(lambda _=False, ask=ask: self.fixRequested.emit(ask))
                self.fixes_box.addWidget(button)
                self.fix_buttons.append(button)

    def _fix_link(self, i: int) -> QCommandLinkButton:
        """The i-th one-click fix button, made once and kept for the findings after: a button
        made under the stylesheet is styled whole, and each finding chosen made two or three."""
        while len(self._fix_links) <= i:
            button = QCommandLinkButton(objectName="fixButton")
            # The first card is the recommended fix's, accented while it can be clicked (the
            # style sheet's `:disabled` rule takes its colours, never its bold type: its size).
            button.setProperty("primary", not self._fix_links)
            set_icon(button, "fix")
            button.clicked.connect(lambda _=False, b=button: self.fixRequested.emit(b.property("fixId")))
            self.fixes_box.insertWidget(len(self._fix_links), button)
            self._fix_links.append(button)
        return self._fix_links[i]

    def set_fixes_enabled(self, enabled: bool):
        for button in self.fix_buttons:
            button.setEnabled(enabled)


class FixCode(CodeText):
    """A fix's title and its code, wrapped between tokens to the panel's width (CodeText), so it
    still runs where it is pasted."""

    def __init__(self, title: str, code: str):
        super().__init__(objectName="fixCode")
        self.set_code(f"<b>{html.escape(title)}</b>", code)


class FindingsPanel(QWidget):
    """`view` is the findings list (MainWindow.findingsView); `detail` the selected finding."""

    fixRequested = Signal(str)
    revealRequested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = FindingsModel(self)
        self.view = QTreeView(objectName="findingsView")
        self.view.setModel(self.model)
        self.view.setRootIsDecorated(False)
        self.view.setUniformRowHeights(True)
        self.view.setAlternatingRowColors(True)
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.view.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.view.setTextElideMode(Qt.TextElideMode.ElideMiddle)   # a location's file and line
        whole_cell_tips(self.view)
        self.view.selectionModel().currentRowChanged.connect(self._on_current)
        self.summary = ElidedLabel(objectName="muted")
        self.summary.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        # Over the list: what it is of when that is not a run of the current spec.
        self.notice = stale_note("")
        # A traced training script: the loss of each step followed, and where inf/NaN came first.
        self.steps = WrappedText(objectName="trainingSteps")
        self.steps.hide()
        self.detail = FindingDetail(self)
        self.detail.fixRequested.connect(self.fixRequested)
        self.detail.revealRequested.connect(self.revealRequested)
        self._fixes_enabled = True
        # A finding chosen is shown in the tensor tree an event after its detail: the detail's
        # layout and the tree's repaint are two waits of the window, not one (issue 31).
        self._reveal_later = QTimer(self, singleShot=True, interval=0, timeout=self._reveal_current)

        title = QLabel("Findings", objectName="panelTitle")
        head = QHBoxLayout()
        head.setContentsMargins(8, 6, 8, 0)
        head.addWidget(title)
        head.addWidget(self.summary, 1)
        # A row of its own for the header buttons (Continue as a Pipeline): beside the title
        # they would set the panel's narrowest width.
        self.head = QHBoxLayout()
        self.head.setContentsMargins(8, 0, 8, 0)
        self.head.addStretch(1)
        self.header_buttons: dict = {}
        # The detail scrolls rather than squeezing its fix buttons when the window is short, and
        # is as wide as the panel: its text wraps there instead of running past the edge.
        self.scroller = VerticalScrollArea(self.detail)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.view)
        split.addWidget(self.scroller)
        split.setSizes([150, 450])
        split.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addLayout(head)
        layout.addLayout(self.head)
        notice = QHBoxLayout()
        notice.setContentsMargins(8, 0, 8, 0)
        notice.addWidget(self.notice)
        layout.addLayout(notice)
        steps = QHBoxLayout()
        steps.setContentsMargins(8, 0, 8, 0)
        steps.addWidget(self.steps)
        layout.addLayout(steps)
        layout.addWidget(split, 1)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(max(hint.width(), PANEL_MIN_PX), hint.height())

    def add_header_button(self, action):
        """A button for `action` under the title, hidden until shown (Continue as a pipeline)."""
        button = QToolButton()
        button.setDefaultAction(action)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        button.hide()
        self.head.insertWidget(0, button)
        self.header_buttons[action] = button

    def set_findings(self, findings, ok: bool, revealable=(), code_fixes: bool = False,
                     notice: str | None = None, choose_first: bool = True):
        """Show `findings`; "Show in tensor tree" only for the `revealable` locations; with
        `code_fixes`, each fix as the code that makes it (a trace that is not a pipeline);
        `notice` over them when they are not a run of the current spec. The same findings again
        keep the finding chosen (a new notice, an edit of the spec). New findings: the first is
        chosen (its detail shown), or later by `choose_first()` when not `choose_first`."""
        self.set_notice(notice)
        self.detail.revealable = set(revealable)
        listed = self.model.findings()
        if findings and code_fixes == self.detail.code_fixes and len(findings) == len(listed) \
                and all(a is b for a, b in zip(by_severity(findings), listed)):
            return   # the very findings listed: a new notice, or the spec was edited
        self.detail.code_fixes = code_fixes
        self.model.set_findings(findings)
        self.summary.setText(severity_counts(findings))
        if findings:
            if choose_first:
                self.choose_first()
        elif ok:
            self.detail.show_text("No findings: the pipeline runs and its output is finite.",
                                  "All clear")

    def choose_first(self):
        """The first finding chosen, its detail shown, unless one is chosen already."""
        if not self.view.currentIndex().isValid() and self.model.rowCount():
            self.view.setCurrentIndex(self.model.index(0, 0))

    def set_steps(self, steps):
        """The training steps of a trace (its `steps` documents); none hides the line."""
        text = steps_summary(steps)
        self.steps.setText(text)
        self.steps.setVisible(bool(text))

    def set_notice(self, text: str | None):
        self.notice.setText(text or "")
        self.notice.setVisible(bool(text))

    def show_pending(self, notice: str):
        """A run whose findings will replace what was listed is under way: nothing listed."""
        self.set_findings([], ok=False, notice=notice)
        self.set_steps(())
        self.detail.show_text("The findings appear here when it ends.", "Working…")

    def show_failure(self, message: str):
        self.model.set_findings([])
        self.summary.setText("")
        self.set_notice(None)
        self.set_steps(())
        self.detail.show_text(message, "The pipeline could not be run")

    def set_fixes_enabled(self, enabled: bool):
        self._fixes_enabled = enabled
        self.detail.set_fixes_enabled(enabled)

    def _on_current(self, current, _previous):
        finding = current.data(NODE_ROLE) if current.isValid() else None
        if finding is not None:
            self.detail.show_finding(finding, self._fixes_enabled)
            self._reveal_later.start()

    def _reveal_current(self):
        """Selecting a finding shows the module it names in the tensor tree (the finding chosen
        then: another may have been chosen, or none be left, since)."""
        current = self.view.currentIndex()
        finding = current.data(NODE_ROLE) if current.isValid() else None
        if finding is not None and finding.location in self.detail.revealable:
            self.revealRequested.emit(finding.location)


def _evidence_html(location: str, evidence: dict) -> str:
    """The location and the evidence as core says them in words (evidence_words), a line each:
    the name in grey, then its value, which wraps under it at the panel's width. Lines, not a
    table: a table's value column is narrow (a module path took three lines), and a label lays
    a table out several times at each new text (its size hint alone was 2.8 ms of the first
    finding's detail)."""
    return "<br>".join(
        f"<span style='color:#6b717b'>{html.escape(k)}</span>&nbsp;&nbsp;"
        f"<span>{_breakable(html.escape(v))}</span>" for k, v in evidence_rows(location, evidence))


def _breakable(text: str) -> str:
    """Let dotted module paths and long messages wrap: a zero-width space after . , / and _."""
    for mark in (".", ",", "/", "_"):
        text = text.replace(mark, mark + "\u200b")
    return text


def source_label(finding) -> str:
    """"script.py:LINE" for a finding located in a traced script, else ""."""
    source = finding.source
    return _where(source) if source and source.get("file") else ""


def _where(source: dict) -> str:
    name, line = Path(source["file"]).name, source.get("line")
    return f"{name}:{line}" if line else name


def source_excerpt(source: dict, context: int = SOURCE_CONTEXT) -> tuple[str, str, int] | None:
    """The finding's line of the user's script with its neighbours: (a heading that names the
    file, the lines, the first one's number), or None. The script is the user's own small text
    file, read when a finding is shown."""
    line = source.get("line")
    try:
        lines = Path(source["file"]).read_text(encoding="utf-8", errors="replace").splitlines()
    except (OSError, KeyError, TypeError):
        return None
    if not line or not 1 <= line <= len(lines):
        return None
    first = max(1, line - context)
    return (f"<span style='color:#6b717b'>{html.escape(_where(source))}</span>",
            "\n".join(lines[first - 1:line + context]), first)
