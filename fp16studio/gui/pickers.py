"""Model and dataset pickers: type a Hub id or a path (with completion), browse, or drop a folder.

Completion comes from the local Hugging Face cache and, when online, from a Hub search; both
are looked up on the worker (the window feeds the results back in), never on the GUI thread.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStringListModel, Qt, QTimer, Signal
from PySide6.QtWidgets import (QCompleter, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget)

from fp16studio.core.common.files import expand_user
from .fit import ElidedLineEdit
from .remote_browser import Browse
from .theme import set_icon

SEARCH_DELAY_MS = 400


class SourcePicker(QWidget):
    """A line edit for a model or dataset source, with completion, browse buttons and drops.

    `committed(text)` fires when the user finishes an edit, picks a completion, browses or drops;
    `searchRequested(text)` asks the window for a Hub search (only when `hub_search` is on).
    """

    committed = Signal(str)
    edited = Signal(str)
    searchRequested = Signal(str)

    def __init__(self, placeholder: str, browse_files: bool = False, fixed=(), parent=None):
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.hub_search = False
        self._fixed = list(fixed)       # always offered, e.g. "synthetic"
        self._cached: list[str] = []
        self._found: list[str] = []
        self.browse = Browse()   # this computer's dialogs; the form's (a box's folders) once wired
        self.edit = ElidedLineEdit(placeholderText=placeholder, clearButtonEnabled=True)
        self.setFocusProxy(self.edit)
        self._words = QStringListModel(self._fixed, self)
        completer = QCompleter(self._words, self)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.activated.connect(self._commit_text)
        self.edit.setCompleter(completer)
        self.edit.editingFinished.connect(lambda: self._commit_text(self.edit.text()))
        self.edit.textEdited.connect(self._on_typed)
        self.folder_button = QToolButton(toolTip="Choose a folder…")
        set_icon(self.folder_button, "folder")
        self.folder_button.clicked.connect(self._browse_folder)
        self.file_button = None
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        row.addWidget(self.edit, 1)
        row.addWidget(self.folder_button)
        if browse_files:
            self.file_button = QToolButton(toolTip="Choose a data file…")
            set_icon(self.file_button, "file")
            self.file_button.clicked.connect(self._browse_file)
            row.addWidget(self.file_button)
        self.info = QLabel(objectName="pickerInfo", wordWrap=True)
        self.info.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(3)
        layout.addLayout(row)
        layout.addWidget(self.info)
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(lambda: self.searchRequested.emit(self.edit.text().strip()))
        self._last = ""

    # -- content --------------------------------------------------------------------------------
    def text(self) -> str:
        return self.edit.text().strip()

    def set_text(self, text: str):
        self._last = text
        self.edit.setText(text)
        self.edit.setCursorPosition(0)  # show the start of a long path, not its tail

    def set_cached(self, ids):
        self._cached = list(ids)
        self._refresh_words()

    def add_found(self, ids):
        self._found = list(ids)
        self._refresh_words()
        if self.edit.hasFocus() and ids:
            self.edit.completer().complete()

    def set_info(self, text: str, tooltip: str = ""):
        self.info.setText(text)
        self.info.setToolTip(tooltip)
        self.info.setVisible(bool(text))

    def _refresh_words(self):
        seen = dict.fromkeys(self._fixed + self._cached + self._found)
        self._words.setStringList(list(seen))

    # -- input ----------------------------------------------------------------------------------
    def _on_typed(self, text: str):
        self.edited.emit(text)
        # A Hub search makes sense for "org/na…", not for paths.
        if self.hub_search and len(text) >= 3 and not text.startswith(("/", ".", "~")) \
                and not expand_user(text).exists():
            self._search_timer.start()

    def _commit_text(self, text: str):
        text = text.strip()
        if text != self._last:
            self._last = text
            self.committed.emit(text)

    def _choose(self, path: str):
        if path:
            self.edit.setText(path)
            self._commit_text(path)

    def _browse_folder(self):
        self.browse.choose(self, "Choose a folder", self.text(), self._choose, folder=True)

    def _browse_file(self):
        self.browse.choose(self, "Choose a data file", self.text(), self._choose,
                           name_filter="Data files (*.parquet *.csv *.json *.jsonl);;All files (*)")

    # -- drag and drop --------------------------------------------------------------------------
    def _dropped_path(self, event) -> str | None:
        urls = event.mimeData().urls() if event.mimeData().hasUrls() else []
        if self.browse.host is not None:   # this computer's folder names nothing on the box
            return None
        if len(urls) != 1 or not urls[0].isLocalFile():
            return None
        path = Path(urls[0].toLocalFile())
        if path.is_dir() or (self.file_button is not None and path.is_file()):
            return str(path)
        return None

    def dragEnterEvent(self, event):
        if self._dropped_path(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event):
        path = self._dropped_path(event)
        if path:
            event.acceptProposedAction()
            self._choose(path)
