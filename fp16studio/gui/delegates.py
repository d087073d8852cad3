"""The tensor tree's cell painter: a colour chip beside a dtype, a status or (coloured by
something else) a name, a device badge, plain text elsewhere.

The text is always drawn: colour adds to it, never replaces it. Each cell is one call into the
model (TensorTreeModel.cell), not one per role the default painter asks for.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QModelIndex, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import QStyle, QStyledItemDelegate

from .palette import device_color, text_on
from .tree_model import DEVICE, NAME, RIGHT_ALIGNED, Cell

# The states whose background the style draws (selection, hover, focus); any other cell's
# background is the row's, which the view has drawn already.
_STYLED = QStyle.StateFlag.State_Selected | QStyle.StateFlag.State_MouseOver | QStyle.StateFlag.State_HasFocus
TEXT_MARGIN = 3     # as the style's own item text (its focus frame margin + 1)
CHIP_TEXT_AT = 16   # a chip's text starts past the chip (10 px) and a gap


class TensorCellDelegate(QStyledItemDelegate):
    """`cell_of(index)`: the Cell of a view's index (through the view's proxy)."""

    def __init__(self, cell_of: Callable[[QModelIndex], Cell], parent=None):
        super().__init__(parent)
        self._cell_of = cell_of

    def paint(self, painter: QPainter, option, index):
        cell = self._cell_of(index)
        if option.state & _STYLED:
            option.widget.style().drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter,
                                              option.widget)
        column = index.column()
        font = QFont(option.font)
        font.setBold(cell.bold)
        painter.save()
        # The stylesheet's selection is a pale tint, so selected rows keep the normal text colour.
        painter.setPen(option.palette.color(QPalette.ColorRole.Text))
        if column == DEVICE:
            _badge(painter, option, font, cell.text)
        elif cell.color is not None and cell.text:
            _chip(painter, option, font, cell)
        else:
            painter.setFont(font)
            rect = text_rect(cell, option.rect, column)
            align = Qt.AlignmentFlag.AlignRight if column in RIGHT_ALIGNED else Qt.AlignmentFlag.AlignLeft
            painter.drawText(rect, align | Qt.AlignmentFlag.AlignVCenter,
                             painter.fontMetrics().elidedText(cell.text, option.textElideMode, rect.width()))
        painter.restore()

    def sizeHint(self, option, index):
        """As wide as the painter needs (cell_width)."""
        cell = self._cell_of(index)
        font = QFont(option.font)
        font.setBold(cell.bold)
        return QSize(cell_width(cell, index.column(), QFontMetrics(font)),
                     super().sizeHint(option, index).height())


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


def _chip(painter: QPainter, option, font: QFont, cell: Cell):
    """A rounded chip of the cell's colour, then its text."""
    rect = option.rect.adjusted(6, 0, -4, 0)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    text_pen = painter.pen()
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(cell.color)
    painter.drawRoundedRect(QRectF(rect.left(), rect.center().y() - 5, 10, 10), 3, 3)
    rect = text_rect(cell, option.rect, NAME)
    painter.setPen(text_pen)
    painter.setFont(font)
    metrics = painter.fontMetrics()
    text = metrics.elidedText(cell.text, Qt.TextElideMode.ElideRight, rect.width())
    if text != cell.text and rect.width() < metrics.horizontalAdvance("xxx…"):
        return   # the chip alone: a letter and an ellipsis would say less (the word is on hover)
    painter.drawText(rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, text)


def _badge(painter: QPainter, option, font: QFont, text: str):
    """The device as a small pill: colour by device kind, the name written inside."""
    if not text:
        return
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    font.setPointSizeF(max(7.0, font.pointSizeF() - 1))
    painter.setFont(font)
    metrics = painter.fontMetrics()
    width = min(metrics.horizontalAdvance(text) + 12, option.rect.width() - 8)
    height = metrics.height() + 2
    badge = QRectF(option.rect.left() + 6, option.rect.center().y() - height / 2 + 0.5, width, height)
    color = device_color(text)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(color))
    painter.drawRoundedRect(badge, height / 2, height / 2)
    painter.setPen(QColor(text_on(color)))
    painter.drawText(badge, Qt.AlignmentFlag.AlignCenter,
                     metrics.elidedText(text, Qt.TextElideMode.ElideRight, int(width) - 8))
