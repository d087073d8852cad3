"""pyqtgraph plots drawn in the window's palette (kept in it when the theme switches), and axes
whose tick labels never run together.

pyqtgraph draws axes, titles and legends in its own configured foreground and caches a view's
background (QGraphicsView.CacheBackground): left alone, a plot keeps the old theme's colours
until it is resized. A followed view takes the palette's colours now and at each palette or
style change: its background the palette's (transparent over the viewport), axes in the muted
text colour, labels, titles and legend entries in the text colour.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from pyqtgraph.graphicsItems.ViewBox.ViewBoxMenu import ViewBoxMenu
from PySide6.QtCore import QEvent, QObject, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPalette, QPen, QPicture
from PySide6.QtWidgets import QGraphicsItem

_RESTYLE_ON = (QEvent.Type.PaletteChange, QEvent.Type.StyleChange)


class _PaletteFollower(QObject):
    """Restyles its view once per theme switch, after the switch: one switch sends a view a
    palette change and a style change or more, and each restyle sets every axis's pens."""

    def __init__(self, view):
        super().__init__(view)
        self._due = False

    def eventFilter(self, watched, event):
        if event.type() in _RESTYLE_ON and not self._due:
            self._due = True
            QTimer.singleShot(0, self, self._restyle)
        return False

    def _restyle(self):
        self._due = False
        restyle(self.parent())


def show_values(plot, shown: bool):
    """Tick values only on a chart (`plot`: a LightPlot, anything with `getAxis`) that has
    figures: an empty one is drawn empty (no 0.2 ... 0.8 of nothing), the line over it saying
    what fills it."""
    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        if not hasattr(axis, "values_shown"):   # as the chart was made: a shared axis shows none
            axis.values_shown = axis.style["showValues"]
        axis.setStyle(showValues=shown and axis.values_shown)


def follow_palette(view: pg.GraphicsView):
    """Draw `view` (a GraphicsLayoutWidget, any pyqtgraph GraphicsView) in the palette, now and
    after every theme switch."""
    view.setBackground(None)
    follower = _PaletteFollower(view)   # parented: it lives as long as the view, and its timer
    view.installEventFilter(follower)
    restyle(view)


def menus_in_parts(*plots):
    """Give `plots` (LightPlots: a MenuOnFirstUse view box made with `enableMenu=False`) pyqtgraph's
    context menus, in a part of its own of a page made in parts (it yields before): the menus
    themselves are made on first use."""
    yield
    for plot in plots:
        plot.setMenuEnabled(True)


class MenuOnFirstUse(pg.ViewBox):
    """A view box whose context menu is made the first time it is asked for: a ViewBoxMenu is
    about 40 widgets (an axis form each for x and y), 7-15 ms of the GUI thread to make and as
    much again to polish under the style sheet, a part of its own per plot of a page made in
    parts (issue 43), for a menu most sessions never open. Make it with `enableMenu=False`."""

    def _applyMenuEnabled(self):
        if not self.menuEnabled():   # enabling makes nothing yet; disabling drops a made menu
            super()._applyMenuEnabled()

    def getMenu(self, ev):
        if self.menu is None and self.menuEnabled():
            self.menu = ViewBoxMenu(self)
            self.updateViewLists()
        return self.menu

    def getContextMenus(self, event):
        return self.getMenu(event).actions() if self.menuEnabled() else []


def restyle(view: pg.GraphicsView):
    """`view`'s axes, titles and legend in its palette's colours, its background drawn anew;
    its axes drawn from a cache."""
    palette = view.palette()
    text = palette.color(QPalette.ColorRole.Text)
    muted = palette.color(QPalette.ColorRole.PlaceholderText)
    for item in view.scene().items():
        if isinstance(item, pg.AxisItem):
            # An axis with a grid spans its plot: each repaint of a curve replayed its ticks,
            # labels and grid lines (about 3 ms an axis, most of the live plot's repaint). Its
            # pixmap is drawn anew only when the axis changes (range, pens, size: each calls
            # update()).
            item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            if isinstance(item, OpaqueGridAxis):
                item.ground = palette.color(QPalette.ColorRole.Window)   # what the view shows through
            item.setPen(muted)
            item.setTextPen(text)
        elif isinstance(item, pg.LegendItem):
            item.setLabelTextColor(text)
        elif isinstance(item, pg.LabelItem):   # a plot's title, a legend entry's name
            item.setText(item.text, color=text)
    view.resetCachedContent()   # the background cached in the previous palette


class SpacedAxis(pg.AxisItem):
    """A horizontal axis whose tick labels keep a character's width apart: pyqtgraph keeps two
    intervals and more whatever the axis's length, so on a narrow plot the labels run together
    ("0 200400600")."""

    def tickSpacing(self, minVal, maxVal, size):
        levels = super().tickSpacing(minVal, maxVal, size)
        if not levels or self.orientation not in ("top", "bottom") or size <= 0:
            return levels
        metrics = QFontMetricsF(self.style["tickFont"] or self.font())
        per_unit = size / abs(maxVal - minVal)
        spacing = levels[0][0]
        while True:
            ends = [math.ceil(minVal / spacing) * spacing, math.floor(maxVal / spacing) * spacing]
            labels = self.tickStrings(ends, self.autoSIPrefixScale * self.scale, spacing)
            widest = max(map(metrics.horizontalAdvance, labels))
            if spacing * per_unit >= widest + metrics.horizontalAdvance("0"):
                break
            spacing *= 2
        # When spread out, labelled ticks only: the finer levels would crowd them again.
        return levels if spacing == levels[0][0] else [(spacing, 0)]


class LabelSizedAxis(pg.AxisItem):
    """An axis given its tick labels (`setTicks`) takes the room they need at once. pyqtgraph
    learns their size while drawing the axis, then resizes it, which draws it again, with the
    plots beside it (a vertical axis's names: each chart's four axes drawn twice when a result
    arrived, 2-3 ms an axis of the GUI thread, issue 43); and that first drawing left out the
    labels wider than the room it had."""

    def setTicks(self, ticks):
        super().setTicks(ticks)
        labels = [text for level in (ticks or ())[:self.style["maxTextLevel"] + 1] for _, text in level]
        if labels:
            self._updateMaxTextSize(self._labels_extent(labels))

    def _labels_extent(self, labels: list[str]) -> float:
        """The labels' extent across the axis, measured as its drawing measures them (a painter
        on a picture, in the tick font; the height taken at 0.8, as pyqtgraph does)."""
        picture = QPicture()
        painter = QPainter(picture)
        try:
            if self.style["tickFont"]:
                painter.setFont(self.style["tickFont"])
            rects = [painter.boundingRect(QRectF(0, 0, 100, 100), Qt.AlignmentFlag.AlignCenter, text)
                     for text in labels]
        finally:
            painter.end()
        if self.orientation in ("left", "right"):
            return max(rect.width() for rect in rects)
        return max(rect.height() * 0.8 for rect in rects)


class OpaqueGridAxis(pg.AxisItem):
    """An axis whose grid lines are drawn opaque, in the colour pyqtgraph's translucent ones
    take over the chart's `ground` (the palette's window colour, set by `restyle`), beneath the
    view box it is linked to: the same pixels where nothing is drawn, at an eighth of the cost (26
    translucent lines across the live plot took 4-8 ms of the GUI thread each time its axis was
    drawn anew, opaque ones 0.5 ms); beneath the curves and bars rather than over them."""

    ground: QColor | None = None

    def linkToView(self, view):
        super().linkToView(view)
        self.setZValue(view.zValue() - 1)

    def generateDrawSpecs(self, p):
        specs = super().generateDrawSpecs(p)
        if specs is None or self.ground is None:
            return specs
        axis, ticks, texts = specs
        return axis, [(self._opaque(pen), start, end) for pen, start, end in ticks], texts

    def _opaque(self, pen: QPen) -> QPen:
        """`pen` in the opaque colour its translucent one takes over the ground (a few pens, one
        per grid level and ground: kept)."""
        color, ground = pen.color(), self.ground
        if color.alpha() == 255:
            return pen
        key = (color.rgba(), ground.rgba(), pen.widthF(), pen.style())
        made = _OPAQUE.get(key)
        if made is None:
            a = color.alphaF()
            made = _OPAQUE[key] = QPen(pen)
            made.setColor(QColor(*(round(a * fore + (1 - a) * back) for fore, back in
                                   zip(color.getRgb()[:3], ground.getRgb()[:3]))))
        return made


_OPAQUE: dict[tuple, QPen] = {}   # (colour, ground, width, style): the opaque pen
