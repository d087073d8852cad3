"""Cell painters: a dtype chip beside the dtype's name, a device badge, a status dot.

The text is always drawn: colour adds to it, never replaces it.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from .palette import device_color, text_on
from .roles import COLOR_ROLE



def _background(painter, option):
    # The selection/hover background the style would draw, without its text.
    opt = QStyleOptionViewItem(option)
    opt.text = ""
    style = opt.widget.style() if opt.widget else None
    if style is not None:
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)


def _text_color(option) -> QColor:
    # The stylesheet's selection is a pale tint, so selected rows keep the normal text colour.
    return option.palette.color(QPalette.ColorRole.Text)


class ChipDelegate(QStyledItemDelegate):
    """A rounded colour chip (from COLOR_ROLE) followed by the cell's text."""

    def paint(self, painter: QPainter, option, index):
        self.initStyleOption(option, index)
        _background(painter, option)
        text = index.data() or ""
        color = index.data(COLOR_ROLE)
        rect = option.rect.adjusted(6, 0, -4, 0)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        if color is not None and text:
            chip = QRectF(rect.left(), rect.center().y() - 5, 10, 10)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            painter.drawRoundedRect(chip, 3, 3)
            rect = rect.adjusted(16, 0, 0, 0)
        painter.setPen(_text_color(option))
        painter.setFont(option.font)
        painter.drawText(rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                         option.fontMetrics.elidedText(text, Qt.TextElideMode.ElideRight, rect.width()))
        painter.restore()

    def sizeHint(self, option, index):
        hint = super().sizeHint(option, index)
        return QSize(hint.width() + 18, hint.height())


class BadgeDelegate(QStyledItemDelegate):
    """The device as a small pill: colour by device kind, the name written inside."""

    def paint(self, painter: QPainter, option, index):
        self.initStyleOption(option, index)
        _background(painter, option)
        text = index.data() or ""
        if not text:
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = option.font
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
        painter.restore()

    def sizeHint(self, option, index):
        hint = super().sizeHint(option, index)
        return QSize(hint.width() + 16, hint.height())
