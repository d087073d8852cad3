"""Plot axes whose title keeps to the axis's length.

pyqtgraph centres an axis's title on the axis whatever its length: on a short plot a rotated
title ("SQNR dB") runs past the plot's ends into the title of the plot above or below (at
1024x700 the Drift tab's two read "range used SQNR dB"). A FittedTitleAxis shows its title
where it fits, else its short form (`short`: "dB" for "SQNR dB") where that fits, else that
elided; the whole title in the axis's tooltip when it is not shown whole. Where not even a
letter and the ellipsis fit, it shows none.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetricsF

ENDS_PX = 4   # kept clear at each end of the axis


class FittedTitleAxis(pg.AxisItem):
    whole_title = short_title = ""

    def setLabel(self, text=None, units=None, *args, short: str = "", **kwargs):
        self.whole_title, self.short_title = text or "", short
        super().setLabel(text, units, *args, **kwargs)
        self._fit_title()

    def resizeEvent(self, ev=None):
        self._fit_title()
        super().resizeEvent(ev)   # places the title, at its new length

    def _fit_title(self):
        if self.label is None or not self.whole_title:
            return
        size = self.size()
        length = size.height() if self.orientation in ("left", "right") else size.width()
        metrics = QFontMetricsF(self.label.font())
        units = f" ({self.labelUnits})" if self.labelUnits else ""
        room = length - 2 * ENDS_PX - metrics.horizontalAdvance(units)
        room = max(0.0, room)
        text = self.whole_title
        if metrics.horizontalAdvance(text) > room:
            text = metrics.elidedText(self.short_title or text, Qt.TextElideMode.ElideRight, room)
        if text == "…":
            text = ""
        if text != self.labelText:
            self.labelText = text
            self.label.setHtml(self.labelString() if text else "")
        tip = self.whole_title + units if text != self.whole_title else ""
        if tip != self.toolTip():
            self.setToolTip(tip)

