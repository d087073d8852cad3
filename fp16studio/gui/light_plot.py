"""A chart of a view box and its left and bottom axes: what the Drift tab draws with, without
pyqtgraph's PlotItem.

A PlotItem makes its "Plot Options" form in its constructor, about 40 widgets (group boxes,
spin boxes, a list) that the window's style sheet then polishes: 20-35 ms of the GUI thread per
plot (half the Drift page's making, issue 43's start-up stalls), for a form shown only from a
context menu. A LightPlot is the view box and axes alone, with the few PlotItem methods the tab
uses: its axes' titles fitted to their length (axis_titles), curves and lines in the view box,
log y, x linked to another plot, the view box's own context menu (range, mouse mode, export).
"""

from __future__ import annotations

import pyqtgraph as pg

from .axis_titles import FittedTitleAxis
from .plot_style import MenuOnFirstUse


class LightPlot:
    def __init__(self, layout: pg.GraphicsLayout, row: int):
        """In `layout`'s rows `row` (the axis and the view box) and `row + 1` (the bottom axis)."""
        self.vb = MenuOnFirstUse(enableMenu=False)   # its menu made when first opened
        self._axes = {side: FittedTitleAxis(side) for side in ("left", "bottom")}
        for axis in self._axes.values():
            axis.linkToView(self.vb)
        layout.addItem(self._axes["left"], row=row, col=0)
        layout.addItem(self.vb, row=row, col=1)
        layout.addItem(self._axes["bottom"], row=row + 1, col=1)
        self._log_y = False

    def getAxis(self, side: str) -> FittedTitleAxis:
        return self._axes[side]

    def setLabel(self, side: str, text: str, short: str = ""):
        """`short`: what the axis says where `text` does not fit (axis_titles)."""
        self._axes[side].setLabel(text, short=short)

    def setLogMode(self, y: bool):
        """The y axis in powers of ten: curves plot log10 of their values (as a PlotItem's)."""
        self._log_y = y
        self._axes["left"].setLogMode(y)
        for item in self.vb.addedItems:
            if isinstance(item, pg.PlotDataItem):
                item.setLogMode(False, y)

    def plot(self, *args, **kwargs) -> pg.PlotDataItem:
        curve = pg.PlotDataItem(*args, **kwargs)
        curve.setLogMode(False, self._log_y)
        self.vb.addItem(curve)
        return curve

    def addItem(self, item):
        self.vb.addItem(item)

    def addLine(self, x=None, y=None, pen=None) -> pg.InfiniteLine:
        """A line across the view at `x` or at `y` (in view coordinates: log10 on a log axis)."""
        line = pg.InfiniteLine(pos=x if x is not None else y, angle=90 if x is not None else 0, pen=pen)
        self.vb.addItem(line)
        return line

    def setXLink(self, other: LightPlot):
        self.vb.setXLink(other.vb)

    def setMenuEnabled(self, enabled: bool = True):
        self.vb.setMenuEnabled(enabled)
