"""A quiet-value finding shown, not only told (issue 40): the line's value against its float32
shadow over the run (a running total and its float32 twin across the loop's iterations), else
the share of each call's elements on a boundary. Painted with QPainter from the finding's
`series` evidence: no plotting library to load for one small picture."""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from .palette import DTYPE_COLORS, OKABE_ITO

_PAD = 8


class ShadowSketch(QWidget):
    """`set_series(points, dtype)`: [call, value, float32's] or [call, share] per point."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("shadowSketch")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(90)
        self.lines: list[tuple[str, list]] = []
        self.caption = ""

    def sizeHint(self) -> QSize:
        return QSize(240, 110)

    def set_series(self, points, dtype: str) -> bool:
        """Shown when there is a picture to show (two or more finite points)."""
        points = [p for p in points or () if len(p) in (2, 3)]
        twin = bool(points) and all(len(p) == 3 for p in points)
        self.lines = [(dtype, [(p[0], p[1]) for p in points])]
        if twin:
            self.lines.append(("float32", [(p[0], p[2]) for p in points]))
        self.caption = (f"{dtype} (solid) against float32 (dashed), over the line's calls" if twin
                        else "share of each call's elements on a boundary")
        self.setToolTip(self.caption)
        shown = sum(1 for _, line in self.lines for _, y in line if _finite(y)) >= 2
        self.setVisible(shown)
        self.update()
        return shown

    def paintEvent(self, event):
        values = [(x, y) for _, line in self.lines for x, y in line if _finite(y)]
        if len(values) < 2:
            return
        painter = QPainter(self)
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            x0, x1 = min(x for x, _ in values), max(x for x, _ in values)
            y0, y1 = min(0.0, min(y for _, y in values)), max(y for _, y in values)
            width, height = self.width() - 2 * _PAD, self.height() - 2 * _PAD - 14

            def at(x, y):
                return QPointF(_PAD + width * (x - x0) / ((x1 - x0) or 1),
                               _PAD + 14 + height * (1 - (y - y0) / ((y1 - y0) or 1)))

            for index, (_, line) in enumerate(self.lines):
                pen = QPen(QColor(OKABE_ITO["vermillion"] if index == 0 else
                                  DTYPE_COLORS["float32"]))
                pen.setWidthF(1.5)
                if index:
                    pen.setStyle(Qt.PenStyle.DashLine)
                painter.setPen(pen)
                path = QPainterPath()
                started = False
                for x, y in line:
                    if not _finite(y):
                        started = False
                        continue
                    if started:
                        path.lineTo(at(x, y))
                    else:
                        path.moveTo(at(x, y))
                        started = True
                painter.drawPath(path)
            painter.setPen(self.palette().color(self.foregroundRole()))
            painter.drawText(_PAD, _PAD + 10, f"{self.caption}: up to {y1:.4g}")
        finally:
            painter.end()


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
