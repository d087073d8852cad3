"""Where the Browse buttons look: this computer's file dialog, or, while the engine runs on a box,
the box's folders, listed there by the engine (engine/remote_files.py) in a small dialog. A
spec's model, dataset and preprocess, and a traced script, are the box's paths then; a script of
this computer can be sent there to be traced (From this computer…).

The listing is an engine job like the pickers' other look-ups: the window never waits for ssh,
and the latest folder asked for wins. A job under way on the box (a run) is ahead of it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path, PurePosixPath, PureWindowsPath

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QHBoxLayout,
                               QLabel, QLineEdit, QListWidget, QListWidgetItem, QToolButton,
                               QVBoxLayout)

from fp16studio.core.common.files import expand_user
from fp16studio.core.present.vocabulary import size
from fp16studio.engine.remote_files import LIST_FOLDER_TASK, RECEIVE_SCRIPT_TASK
from .worker import Job

ENTRY_ROLE = Qt.ItemDataRole.UserRole


class Browse(QObject):
    """The Browse buttons' chooser: `choose(...)` calls `then(path)` with what the user chose
    (never with nothing): on this computer through its file dialog, on the engine's host
    (`on_host`) through a RemoteFileDialog."""

    def __init__(self, worker=None, parent=None):
        super().__init__(parent)
        self.worker = worker
        self.host: str | None = None
        self.dialog: RemoteFileDialog | None = None   # the box's dialog last opened

    def on_host(self, host: str | None):
        """The engine now runs on `host` (None: this computer)."""
        self.host = host

    def choose(self, parent, title: str, start: str, then, folder: bool = False,
               suffixes: tuple[str, ...] = (), name_filter: str = "", sendable: bool = False):
        """A folder (`folder`) or a file (ending with one of `suffixes`, any without) from
        `start` (the field's text: where it points, or its folder); `name_filter` is the local
        dialog's. `sendable`: on a box, a file of this computer may be sent there instead (a
        script to trace), and its copy there is what is chosen."""
        if self.host is None or self.worker is None:
            here = _start_here(start)
            path = (QFileDialog.getExistingDirectory(parent, title, here) if folder else
                    QFileDialog.getOpenFileName(parent, title, here, name_filter)[0])
            if path:
                then(path)
            return
        self.dialog = RemoteFileDialog(self.worker, self.host, title, start, folder, suffixes,
                                       parent, name_filter if sendable else None)
        self.dialog.chosen.connect(then)
        self.dialog.open()


def _start_here(text: str) -> str:
    current = expand_user(text)
    return str(current if current.is_dir() else current.parent if current.parent.is_dir()
               else Path.home())


class RemoteFileDialog(QDialog):
    """A folder of the box, listed by its engine: double-click (or Enter) enters a folder or
    chooses a file; the path field takes a typed folder; Up, and the places there (its home,
    its Hugging Face cache). `chosen(path)` with the box's path; `listed` after each listing."""

    chosen = Signal(str)
    listed = Signal(object)   # the FolderListing shown, or None: the folder could not be listed

    def __init__(self, worker, host: str, title: str, start: str, folder: bool,
                 suffixes: tuple[str, ...] = (), parent=None, send_filter: str | None = None):
        super().__init__(parent)
        self.worker, self.host, self.folder_mode = worker, host, folder
        self.suffixes = tuple(s.lower() for s in suffixes)
        self.listing = None
        self.setWindowTitle(f"{title} on {host}")
        self.path = QLineEdit(objectName="remotePath")
        self.path.returnPressed.connect(lambda: self.go(self.path.text()))
        self.up = QToolButton(text="Up", toolTip="The folder above", objectName="remoteUp")
        self.up.clicked.connect(lambda: self.listing and self.listing.parent and self.go(
            self.listing.parent))
        self.places = QComboBox(objectName="remotePlaces")
        self.places.activated.connect(lambda i: self.go(self.places.itemData(i)))
        self.entries = QListWidget(objectName="remoteEntries")
        self.entries.itemActivated.connect(self._activated)
        self.entries.currentItemChanged.connect(lambda *_: self._update())
        self.note = QLabel(objectName="muted", wordWrap=True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.choose_button = buttons.addButton("Choose", QDialogButtonBox.ButtonRole.AcceptRole)
        self.send_button = buttons.addButton("From this computer…",
                                             QDialogButtonBox.ButtonRole.ActionRole)
        self.send_button.setToolTip(f"Send a file of this computer to {host} and choose its copy "
                                    "there (a run folder of its own, its SHA-256 checked there)")
        self.send_button.setVisible(send_filter is not None)
        self.send_button.clicked.connect(lambda: self._send_chosen(send_filter))
        buttons.accepted.connect(self._choose)
        buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.places)
        row.addWidget(self.path, 1)
        row.addWidget(self.up)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.entries, 1)
        layout.addWidget(self.note)
        layout.addWidget(buttons)
        self.resize(560, 420)
        self.go(start or "~", fallback="~")

    def go(self, path: str, fallback: str | None = None):
        """List `path` there (a file's path: its folder); `fallback` if it names none."""
        self.note.setText(f"Listing {path} on {self.host}…")
        self.choose_button.setEnabled(False)

        def failed(message, _detail):
            if fallback is not None:
                return self.go(fallback)
            self.note.setText(message)
            self.listed.emit(None)
        self.worker.submit(Job("browse", LIST_FOLDER_TASK, (path,), supersede=True,
                               on_result=self._show, on_error=failed))

    def _show(self, listing):
        self.listing = listing
        self.path.setText(listing.path)
        self.up.setEnabled(listing.parent is not None)
        self.places.clear()
        for name, where in listing.places.items():
            self.places.addItem(name, where)
        self.entries.clear()
        for entry in listing.entries:
            if not entry.folder and (self.folder_mode or not self._wanted(entry.name)):
                continue
            item = QListWidgetItem(entry.name + ("/" if entry.folder else
                                                 f"    {size(entry.size or 0)}"))
            item.setData(ENTRY_ROLE, entry)
            self.entries.addItem(item)
        self.note.setText(listing.note)
        self._update()
        self.listed.emit(listing)

    def _wanted(self, name: str) -> bool:
        return not self.suffixes or name.lower().endswith(self.suffixes)

    def _selected(self):
        item = self.entries.currentItem()
        return item.data(ENTRY_ROLE) if item is not None else None

    def _update(self):
        entry = self._selected()
        self.choose_button.setEnabled(self.listing is not None and (
            self.folder_mode or (entry is not None and not entry.folder)))

    def _activated(self, item):
        entry = item.data(ENTRY_ROLE)
        if entry.folder:
            self.go(self._there(entry.name))
        else:
            self._done(self._there(entry.name))

    def _choose(self):
        entry = self._selected()
        if entry is not None and (not entry.folder or self.folder_mode):
            self._done(self._there(entry.name))
        elif self.folder_mode and self.listing is not None:
            self._done(self.listing.path)

    def _send_chosen(self, name_filter: str):
        path, _ = QFileDialog.getOpenFileName(self, f"Send a file to {self.host}",
                                              _start_here(""), name_filter)
        if path:
            self.send(path)

    def send(self, path: str):
        """Send this computer's file `path` to the box (engine/remote_files.py: received) and
        choose its copy there."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            self.note.setText(f"Cannot read {path}: {exc.strerror or exc}")
            return
        name = Path(path).name
        self.note.setText(f"Sending {name} to {self.host}…")
        self.worker.submit(Job(
            "send-file", RECEIVE_SCRIPT_TASK,
            (name, base64.b64encode(data).decode("ascii"), hashlib.sha256(data).hexdigest()),
            on_result=self._done, on_error=lambda message, _detail: self.note.setText(message)))

    def _there(self, name: str) -> str:
        """A name in the listed folder, as the box names paths (not as this computer does)."""
        folder = self.listing.path
        flavour = PureWindowsPath if re.match(r"[A-Za-z]:\\", folder) else PurePosixPath
        return str(flavour(folder) / name)

    def _done(self, path: str):
        self.accept()
        self.chosen.emit(path)
