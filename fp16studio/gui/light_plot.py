"""A chart of a view box and its left and bottom axes, with a title over it where it has one:
what the Drift and Compare tabs draw with, without pyqtgraph's PlotItem.

A PlotItem makes its "Plot Options" form in its constructor, about 40 widgets (group boxes,
spin boxes, a list) that the window's style sheet then polishes: 20-35 ms of the GUI thread per
plot (most of a chart page's making, issue 43's start-up stalls), for a form shown only from a
context menu. A LightPlot is the view box, axes and title alone, placed in the cells of a
GraphicsLayout it is given, with the few PlotItem methods the tabs use: its axes' titles fitted
to their length (axis_titles) and their tick labels kept apart (SpacedAxis), curves and items in
the view box, a grid, log y, axes linked to another plot, a legend beside the view, the view
box's own context menu (range, mouse mode, export). A PlotDataItem's own options (clip to view,
downsampling) are given to `plot` as a PlotItem's `plot` takes them.

A chart whose data only grows (the live throughput plot) follows it with `grow`: its view in
round steps, not pyqtgraph's auto range, which moves the view at almost every new sample and so
draws the axes and their grid anew at each redraw (their ticks and grid lines, 10-20 ms of the
GUI thread under load, issue 43).
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt

from .axis_titles import FittedTitleAxis
from .plot_style import LabelSizedAxis, MenuOnFirstUse, OpaqueGridAxis, SpacedAxis

TITLE_SIZE = "11pt"   # a PlotItem's title's
# The ends a growing view steps to, per decade: each at most 1.67 times the one before, so
# the data fills at least 60 % of the view, and a view grows a few steps per tenfold growth.
STEPS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.5)
HEADROOM = 1.05   # the largest value stays clear of the view's edge


def step_up(value: float) -> float:
    """The least of the round ends (STEPS × 10^k) at or above `value` > 0."""
    decade = 10.0 ** math.floor(math.log10(value))
    return next((step * decade for step in STEPS if step * decade >= value), 10 * decade)


def _stepped(low: float, high: float) -> tuple[float, float]:
    """From 0, or the round step below a negative `low`, to the round step above `high`."""
    low, high = low * HEADROOM, high * HEADROOM
    return (-step_up(-low) if low < 0 else 0.0), (step_up(high) if high > 0 else 1.0)


class _LegendBeside(pg.LegendItem):
    """A legend in a layout's cell: at least as wide as its entries, whose names a narrow
    layout cut ("floa"), and no taller than them, so a sample stays beside its name rather
    than spread down the view's height."""

    def updateSize(self):   # pyqtgraph's sets a free legend's geometry; a cell's is the layout's
        size = self.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize)
        self.setMinimumWidth(size.width())
        self.setMaximumHeight(size.height())


class ChartAxis(FittedTitleAxis, SpacedAxis, LabelSizedAxis, OpaqueGridAxis):
    """Its title fitted to its length; along a horizontal axis, its tick labels kept apart; as
    wide as the labels it is given before it is drawn; its grid opaque, beneath the view."""


class LightPlot:
    # What a PlotItem forwards to its view box, as it does.
    _VIEW_METHODS = frozenset({"setRange", "enableAutoRange", "disableAutoRange", "viewRange",
                               "invertY", "setMouseEnabled"})

    def __init__(self, layout: pg.GraphicsLayout, row: int, col: int = 0, *, title: str = "",
                 placed: bool = True):
        """In `layout` from cell (`row`, `col`): the title over the view box's column where
        there is one, then the left axis and the view box, then the bottom axis, in the rows
        below; `placed=False` keeps it out of the layout until `place(True)`."""
        self.layout = layout
        self.vb = MenuOnFirstUse(enableMenu=False)   # its menu made when first opened
        self._axes = {side: ChartAxis(side) for side in ("left", "bottom")}
        for axis in self._axes.values():
            axis.linkToView(self.vb)
        cells = []   # (item, row, column, columns spanned)
        self.title = pg.LabelItem(title, size=TITLE_SIZE) if title else None
        if self.title is not None:
            cells.append((self.title, row, col + 1, 1))
            row += 1
        self.view_row, self.view_col = row, col + 1
        cells += [(self._axes["left"], row, col, 1), (self.vb, row, col + 1, 1),
                  (self._axes["bottom"], row + 1, col + 1, 1)]
        self._cells = cells
        self._log_y = False
        self.legend = None
        self._grown = None   # the view `grow` set, None before or after `regrow`
        self.vb.sigRangeChangedManually.connect(self._moved_by_hand)
        self.placed = False
        self.place(placed)

    def place(self, placed: bool):
        """Put its items in the layout's cells, or take them out (the layout closes up)."""
        if placed == self.placed:
            return
        for item, row, col, span in self._cells:
            if placed:
                self.layout.addItem(item, row=row, col=col, colspan=span)
            else:
                self.layout.removeItem(item)
        if placed and self.legend is not None:   # at its cell's top, its own height
            self.layout.layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignTop)
        self.placed = placed

    def items(self) -> list:
        """What it draws, title to axes: each a QGraphicsItem of its layout's scene when placed."""
        return [item for item, *_ in self._cells]

    def getAxis(self, side: str) -> ChartAxis:
        return self._axes[side]

    def setLabel(self, side: str, text: str, short: str = ""):
        """`short`: what the axis says where `text` does not fit (axis_titles)."""
        self._axes[side].setLabel(text, short=short)

    def showGrid(self, x: bool = False, y: bool = False, alpha: float = 0.3):
        for side, shown in (("bottom", x), ("left", y)):
            self._axes[side].setGrid(int(alpha * 255) if shown else False)

    def setLogMode(self, y: bool):
        """The y axis in powers of ten: curves plot log10 of their values (as a PlotItem's)."""
        self._log_y = y
        self._axes["left"].setLogMode(y)
        for item in self.listDataItems():
            item.setLogMode(False, y)

    def plot(self, *args, **kwargs) -> pg.PlotDataItem:
        """A curve in the view (PlotDataItem's arguments: data, pen, name, clipToView, ...)."""
        curve = pg.PlotDataItem(*args, **kwargs)
        curve.setLogMode(False, self._log_y)
        self.vb.addItem(curve)
        return curve

    def grow(self, x: tuple[float, float], y: tuple[float, float]):
        """Show the data's bounds `x` and `y` (low, high), a chart whose data only grows: the
        view from 0 (or a round step below a negative low) to the round step above each high,
        set anew only when the data passes a step (a few times per tenfold growth), so its axes
        are drawn anew as seldom, not at each redraw. A view moved by hand stays where it was
        put until `regrow`."""
        if self._grown is False:
            return
        view = (_stepped(*x), _stepped(*y))
        if view != self._grown:
            self._grown = view
            self.vb.setRange(xRange=view[0], yRange=view[1], padding=0)

    def regrow(self):
        """No data: the view empty (0 to 1), to be grown again."""
        self._grown = None
        self.vb.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)

    def _moved_by_hand(self, _axes):
        self._grown = False

    def listDataItems(self) -> list[pg.PlotDataItem]:
        return [item for item in self.vb.addedItems if isinstance(item, pg.PlotDataItem)]

    def addItem(self, item):
        self.vb.addItem(item)

    def removeItem(self, item):
        self.vb.removeItem(item)

    def addLine(self, x=None, y=None, pen=None) -> pg.InfiniteLine:
        """A line across the view at `x` or at `y` (in view coordinates: log10 on a log axis)."""
        line = pg.InfiniteLine(pos=x if x is not None else y, angle=90 if x is not None else 0, pen=pen)
        self.vb.addItem(line)
        return line

    def legend_beside(self) -> pg.LegendItem:
        """A legend in the cell right of the view box, not over the curves it names (its
        entries added with its `addItem(curve, name)`); the title then spans both, so the
        view's column is not held as wide as the title with the legend beside it (the chart
        then ran past a narrow page's edge, cutting the legend's names)."""
        placed = self.placed
        self.place(False)
        self.legend = _LegendBeside()
        self._cells = [(item, row, col, 2 if item is self.title else span)
                       for item, row, col, span in self._cells]
        self._cells.append((self.legend, self.view_row, self.view_col + 1, 1))
        self.place(placed)
        return self.legend

    def setXLink(self, other: LightPlot):
        self.vb.setXLink(other.vb)

    def setYLink(self, other: LightPlot):
        self.vb.setYLink(other.vb)

    def setMenuEnabled(self, enabled: bool = True):
        self.vb.setMenuEnabled(enabled)

    def __getattr__(self, name):
        if name in LightPlot._VIEW_METHODS:
            return getattr(self.vb, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
