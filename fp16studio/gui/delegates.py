"""The tensor tree's cell painter: a colour chip beside a dtype, a status or (coloured by
something else) a name, a device badge, plain text elsewhere.

The text is always drawn: colour adds to it, never replaces it. A paint asks the model once per
row (TensorTreeModel.row_cells, through TensorTreeView.cell_of), not once per role of each cell
as the default painter does.
"""

from __future__ import annotations

import functools
from typing import Callable

from PySide6.QtCore import QModelIndex, QPointF, QRect, QRectF, QSize, Qt
from PySide6.QtGui import (QColor, QFont, QFontMetrics, QFontMetricsF, QPainter, QPalette, QStaticText,
                           QTransform)
from PySide6.QtWidgets import QStyle, QStyledItemDelegate

from .palette import device_color, text_on
from .tree_model import DEVICE, NAME, RIGHT_ALIGNED, Cell

# The states whose background the style draws (selection, hover, focus); any other cell's
# background is the row's, which the view has drawn already.
_STYLED = QStyle.StateFlag.State_Selected | QStyle.StateFlag.State_MouseOver | QStyle.StateFlag.State_HasFocus
TEXT_MARGIN = 3     # as the style's own item text (its focus frame margin + 1)
CHIP_TEXT_AT = 16   # a chip's text starts past the chip (10 px) and a gap


class TensorCellDelegate(QStyledItemDelegate):
    """`cell_of(index)`: the Cell of a view's index (through the view's proxy).

    A repaint draws every cell in view, each through Python: what depends only on the view's
    font, a text and its room (the bold and the badge's fonts, the text as elided and laid out)
    is worked out once and kept, and an empty cell draws nothing past the style's background.
    A text is drawn laid out (Text, a QStaticText): drawText lays a string out again at each
    call. The cells come from the view (TensorTreeView.cell_of), a row's once per paint."""

    def __init__(self, cell_of: Callable[[QModelIndex], Cell], parent=None):
        super().__init__(parent)
        self._cell_of = cell_of
        self._texts: dict[tuple, Text] = {}   # (text, room, elide mode, font) -> the text drawn
        self._use_font(QFont())

    def paint(self, painter: QPainter, option, index):
        cell = self._cell_of(index)
        if option.state & _STYLED:
            option.widget.style().drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter,
                                              option.widget)
        self.draw(painter, option, option.rect, cell, index.column())

    def draw(self, painter: QPainter, option, rect: QRect, cell: Cell, column: int):
        """`cell`'s text (and its chip or badge) in `rect`, in the option's font, palette and
        elide mode: all a cell is past its background."""
        if not cell.text:
            return   # nothing to write, and so no chip and no badge either
        if option.font != self._view_font:
            self._use_font(option.font)
        painter.save()
        # The stylesheet's selection is a pale tint, so selected rows keep the normal text colour.
        painter.setPen(option.palette.color(QPalette.ColorRole.Text))
        if column == DEVICE:
            font = BADGE + cell.bold
            painter.setFont(self._fonts[font])
            width = min(painter.fontMetrics().horizontalAdvance(cell.text) + 12, rect.width() - 8)
            _badge(painter, rect, width, cell.text,
                   self.laid_out(painter, cell.text, _ELIDE_RIGHT, int(width) - 8, font))
        elif cell.color is not None:
            painter.setFont(self._fonts[cell.bold])
            _chip(painter, rect, cell, self.laid_out(painter, cell.text, _ELIDE_RIGHT,
                                                     text_rect(cell, rect, NAME).width(), cell.bold))
        else:
            painter.setFont(self._fonts[cell.bold])
            where = text_rect(cell, rect, column)
            self.laid_out(painter, cell.text, option.textElideMode, where.width(), cell.bold).draw(
                painter, where, right=column in RIGHT_ALIGNED)
        painter.restore()

    def laid_out(self, painter: QPainter, text: str, mode, room: int, font: int) -> Text:
        """`text` as it fits `room` in the painter's font, which is `self._fonts[font]`."""
        key = (text, room, mode, font)
        shown = self._texts.get(key)
        if shown is None:
            if len(self._texts) >= TEXTS_KEPT:
                self._texts.clear()
            shown = self._texts[key] = Text(painter.fontMetrics().elidedText(text, mode, room),
                                            self._fonts[font])
        return shown

    def sizeHint(self, option, index):
        """As wide as the painter needs (cell_width), as high as the style makes a line of
        text in the row's font: worked out once per font (the style's answer reads every role
        of the cell through the proxy, a dozen calls into Python; a result's rows laid out
        asked it 12 times, 2 ms)."""
        cell = self._cell_of(index)
        if option.font != self._view_font:
            self._use_font(option.font)
        height = self._heights.get(cell.bold)
        if height is None:
            height = self._heights[cell.bold] = super().sizeHint(option, index).height()
        return QSize(cell_width(cell, index.column(), self._metrics[cell.bold]), height)

    def _use_font(self, font: QFont):
        """What is worked out from the view's font, for `font`: forgotten for another."""
        self._view_font, self._fonts = QFont(font), _fonts(font)
        self._metrics = tuple(QFontMetrics(f) for f in self._fonts[:2])   # plain, bold
        self._heights: dict[bool, int] = {}
        self._texts.clear()


TEXTS_KEPT = 4096   # texts kept: a few screens of cells at a few column widths


class Text:
    """A cell's text (`shown`, as elided) laid out once in `font`, drawn where QPainter.drawText
    would put it in a rect: vertically centred, at the rect's left, right or middle."""

    def __init__(self, shown: str, font: QFont):
        self.shown = shown
        self._static = QStaticText(shown)
        self._static.setTextFormat(Qt.TextFormat.PlainText)   # a name like `<b>` is text
        self._static.prepare(QTransform(), font)
        # Placed by the font's unrounded measures, as drawText places a line (the static text's
        # own size, and a text layout's line height, are rounded to whole pixels: one off).
        metrics = QFontMetricsF(font)
        self._width, self._height = metrics.horizontalAdvance(shown), metrics.height()

    def draw(self, painter: QPainter, rect: QRect | QRectF, right: bool = False, centred: bool = False):
        if centred:
            x = rect.x() + (rect.width() - self._width) / 2
        else:
            x = rect.x() + (rect.width() - self._width if right else 0)
        at = QPointF(x, rect.y() + (rect.height() - self._height) / 2)
        if self._width <= rect.width():
            painter.drawStaticText(at, self._static)
            return
        painter.save()   # cut at the rect's edges, as drawText cuts a text wider than its rect
        painter.setClipRect(rect, Qt.ClipOperation.IntersectClip)
        painter.drawStaticText(at, self._static)
        painter.restore()


BADGE = 2   # _fonts' index of the badge's (plain; bold next)
_ELIDE_RIGHT = Qt.TextElideMode.ElideRight


def _fonts(view_font: QFont) -> tuple[QFont, ...]:
    """The view's font plain and bold (a row a finding names), and the device badge's (a point
    smaller) plain and bold."""
    fonts = []
    for badge in (False, True):
        for bold in (False, True):
            font = QFont(view_font)
            font.setBold(bold)
            if badge:
                font.setPointSizeF(max(7.0, font.pointSizeF() - 1))
            fonts.append(font)
    return tuple(fonts)


def cell_width(cell: Cell, column: int, metrics: QFontMetrics) -> int:
    """The width the painter needs for `cell`: its text in `metrics` (the row's font, bold
    where a finding names it) and the room beside it: its chip, or the device's pill."""
    if column == DEVICE:
        return metrics.horizontalAdvance(cell.text) + 2 * TEXT_MARGIN + BADGE_ROOM
    room = _PROBE.width() - text_rect(cell, _PROBE, column).width()
    return metrics.horizontalAdvance(cell.text) + room + 1


_PROBE = QRect(0, 0, 1000, 20)   # any cell's rect: text_rect's margins are the same in all
BADGE_ROOM = 16   # the pill's inset and padding


def text_rect(cell: Cell, rect: QRect, column: int) -> QRect:
    """Where the painter writes `cell`'s text in `rect`: past its chip where it has one."""
    if column != DEVICE and cell.color is not None and cell.text:
        return rect.adjusted(6 + CHIP_TEXT_AT, 0, -4, 0)
    return rect.adjusted(TEXT_MARGIN, 0, -TEXT_MARGIN, 0)


def _chip(painter: QPainter, cell_rect: QRect, cell: Cell, text: Text):
    """A rounded chip of the cell's colour, then `text` (the cell's, elided to its room) in the
    painter's pen and font."""
    rect = cell_rect.adjusted(6, 0, -4, 0)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    text_pen = painter.pen()
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(cell.color)
    painter.drawRoundedRect(QRectF(rect.left(), rect.center().y() - 5, 10, 10), 3, 3)
    rect = text_rect(cell, cell_rect, NAME)
    if text.shown != cell.text and rect.width() < painter.fontMetrics().horizontalAdvance("xxx…"):
        return   # the chip alone: a letter and an ellipsis would say less (the word is on hover)
    painter.setPen(text_pen)
    text.draw(painter, rect)


def _badge(painter: QPainter, rect: QRect, width: int, device: str, text: Text):
    """The device as a small pill `width` wide: colour by device kind, `text` (the device,
    elided to the pill) inside, in the painter's font."""
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    height = painter.fontMetrics().height() + 2
    badge = QRectF(rect.left() + 6, rect.center().y() - height / 2 + 0.5, width, height)
    fill, ink = _badge_colors(device)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(fill)
    painter.drawRoundedRect(badge, height / 2, height / 2)
    painter.setPen(ink)
    text.draw(painter, badge, centred=True)


@functools.lru_cache(maxsize=64)
def _badge_colors(device: str) -> tuple[QColor, QColor]:
    """A device's pill colour and the text colour that reads on it."""
    color = device_color(device)
    return QColor(color), QColor(text_on(color))
