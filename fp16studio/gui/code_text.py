"""Code in a narrow panel (a fix's code, the script's lines beside a finding): wrapped between
its tokens (core.present.code_wrap) to the columns the panel's width holds, again at each width,
never inside a name, a number or a string; Qt's own wrapping (anywhere) is left only a run of
tokens longer than a line. Numbered lines keep their numbers in a gutter, their continuations
indented past it. `text()` is the code unwrapped."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QFontMetricsF, QTextDocument

from fp16studio.core.present.code_wrap import wrap_lines
from .fit import WrappedText

# Code keeps its line breaks and indentation and wraps where a line is wider than the panel.
PRE = "<pre style='white-space:pre-wrap; margin:2px 0'>"
LEAST_COLUMNS = 24   # never wrapped narrower (a narrower panel wraps it anywhere)
GUTTER = 6           # a line's number: "{:>4}" and two spaces


class CodeText(WrappedText):
    def __init__(self, objectName: str = ""):
        self._heading, self._code, self._columns = "", "", None
        self._first = self._marked = None
        self._fragment = False
        super().__init__("", Qt.TextFormat.RichText, objectName=objectName)

    def set_code(self, heading: str, code: str, *, first: int | None = None,
                 marked: int | None = None, fragment: bool = False):
        """`heading` (HTML) above `code`; `first`: number the lines from it, `marked` (a
        number) in bold; `fragment`: lines cut out of a file (code_wrap.wrap_lines)."""
        self._heading, self._code, self._first, self._marked = heading, code, first, marked
        self._fragment, self._columns = fragment, None
        self.setText(self._html(None) if code else "")
        if code and self.width() > 0:
            self._columns = self.columns(self.width())
            self.setHtml(self._html(self._columns))

    def _html(self, columns: int | None) -> str:
        gutter = GUTTER if self._first is not None else 0
        lines = (wrap_lines(self._code, columns - gutter, self._fragment) if columns is not None
                 else [[line] for line in self._code.splitlines()])
        rows = []
        for offset, pieces in enumerate(lines):
            number = None if self._first is None else self._first + offset
            for k, piece in enumerate(pieces):
                text = html.escape(piece)
                if number is not None:
                    text = (f"{number:>4}  " if k == 0 else " " * GUTTER) + text
                rows.append(f"<b>{text}</b>" if number is not None and number == self._marked else text)
        return f"{self._heading}{PRE}{chr(10).join(rows)}</pre>"

    def columns(self, width: int) -> int:
        """The characters of code a line `width` wide holds: in the fixed font at the widget's
        size, as rich text sets a <pre>, its fractional advance (rounded to whole pixels a
        line held two characters less than it shows, and short lines were wrapped)."""
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSizeF(self.font().pointSizeF())
        advance = QFontMetricsF(font).horizontalAdvance("m")
        return max(LEAST_COLUMNS, int((width - 2 * self.frameWidth()) / advance))

    def heightForWidth(self, width: int) -> int:
        if width not in self._heights:
            shown = self.document()
            document = QTextDocument()
            document.setDefaultFont(shown.defaultFont())
            document.setDocumentMargin(shown.documentMargin())
            document.setHtml(self._html(self.columns(width)) if self._code else "")
            document.setTextWidth(max(1, width - 2 * self.frameWidth()))
            self._heights[width] = int(document.size().height() + 0.999) + 2 * self.frameWidth()
        return self._heights[width]

    def resizeEvent(self, event):
        columns = self.columns(event.size().width())
        if self._code and columns != self._columns:
            self._columns = columns
            self.setHtml(self._html(columns))   # what is shown; text() stays the whole code
        super().resizeEvent(event)
