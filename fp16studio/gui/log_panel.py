"""The Log tab: what the window and the engine said, with time stamps.

Python logging records from fp16studio (and the Hugging Face libraries' warnings) may be emitted
on the worker thread; the handler hands them over through a queued signal.
"""

from __future__ import annotations

import html
import itertools
import logging
import time

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QPlainTextEdit

from .palette import SEVERITY_COLORS

LEVEL_COLORS = {"error": SEVERITY_COLORS["error"], "warning": SEVERITY_COLORS["warning"]}
# py.warnings: Python warnings raised in the engine, forwarded like log lines.
WATCHED_LOGGERS = ("fp16studio", "transformers", "datasets", "py.warnings")
MAX_BLOCKS = 5000
# Entries wait this long to be laid out together, after what the window shows of a result (its
# tree, its findings and their paints, a loaded machine's too): a result's entries, one per
# finding, are not part of those waits (issue 31).
FLUSH_MS = 200


class _Bridge(QObject):
    record = Signal(str, str)


class _Handler(logging.Handler):
    def __init__(self, bridge: _Bridge):
        super().__init__(logging.INFO)
        self._bridge = bridge

    def emit(self, record):
        level = "error" if record.levelno >= logging.ERROR else (
            "warning" if record.levelno >= logging.WARNING else "info")
        self._bridge.record.emit(level, f"{record.name}: {record.getMessage()}")


class LogPanel(QPlainTextEdit):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setObjectName("logView")
        self.setMaximumBlockCount(MAX_BLOCKS)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self._pending: list[str] = []
        self._flush = QTimer(self, singleShot=True, interval=FLUSH_MS, timeout=self.flush)
        self._bridge = _Bridge(self)
        self._bridge.record.connect(self.log)
        self._handler = _Handler(self._bridge)
        for name in WATCHED_LOGGERS:
            logging.getLogger(name).addHandler(self._handler)

    def log(self, level: str, text: str):
        stamp = time.strftime("%H:%M:%S")
        color = LEVEL_COLORS.get(level)
        body = html.escape(text).replace("\n", "<br>")
        if color:
            body = f"<span style='color:{color}'>{body}</span>"
        self._pending.append(f"<span style='color:#8d949f'>{stamp}</span>&nbsp; {body}")
        if not self._flush.isActive():
            self._flush.start()

    def flush(self):
        """Lay out the entries logged since the last flush; the view follows them to the
        end unless the user scrolled up to read (then it stays where they are)."""
        self._flush.stop()
        entries, self._pending = self._pending, []
        bar = self.verticalScrollBar()
        following = bar.value() >= bar.maximum()
        for entry in entries:
            self.appendHtml(entry)
        if following and entries:
            bar.setValue(bar.maximum())

    def toPlainText(self) -> str:
        self.flush()   # what was logged, the entries not yet laid out included
        return super().toPlainText()

    def detach(self):
        """Stop listening to Python logging (the window is closing)."""
        for name in WATCHED_LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)


def script_output_entries(payloads, shown: int) -> list[tuple[str, str]]:
    """A batch of a script's (stream, line)s as Log entries (level, text): one per run of lines
    from one stream, and only the last `shown` lines (a script printing in a tight loop would
    otherwise hold the GUI thread for the Log's layout of every line)."""
    entries = []
    hidden = len(payloads) - shown
    if hidden > 0:
        entries.append(("info", f"… {hidden} lines of the script's output not shown"))
        payloads = payloads[hidden:]
    for stream, group in itertools.groupby(payloads, key=lambda payload: payload[0]):
        entries.append(("warning" if stream == "stderr" else "info",
                        "\n".join(f"{stream}: {line}" for _, line in group)))
    return entries
