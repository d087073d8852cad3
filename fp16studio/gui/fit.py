"""Widgets that let the window fit its screen (DESIGN "The window": 1280x800 and smaller).

A QLabel without word wrap, a QComboBox sized to its longest item and a scroll area whose widget
is wider than its viewport each make their minimum the width of their longest text, and a
window is never smaller than the sum of its children's minimums. These keep a panel's minimum
small: text that does not fit is elided (the whole of it in the tooltip) or wrapped, and a
panel taller than the room it gets scrolls vertically, never sideways. Where a word may be
longer than the panel is wide (a module path, a line of code), WrappedText breaks it anywhere.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QPainter, QPalette, QTextOption
from PySide6.QtWidgets import (QAbstractItemView, QComboBox, QHeaderView, QLabel, QLineEdit, QScrollArea,
                               QSizePolicy, QStyle, QStyleOptionComboBox, QStyleOptionFrame, QStylePainter,
                               QTableView, QTextEdit, QToolTip)

from .palette import OKABE_ITO

# The fewest characters an elided label or a shrunk combo shows before its ellipsis.
MIN_CHARS = 6
TEXT_MARGIN_PX = 3   # a cell's text margin each side (the style's focus frame margin + 1)


class ElidedLineEdit(QLineEdit):
    """A text field that, while it is not being edited and its text is wider than it, shows
    the text's start and end around an ellipsis (a path's folder and its last name, not a cut
    mid-word), the whole text in its tooltip. Editing shows and edits the whole text."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.textChanged.connect(self._tip)

    def _room(self):
        option = QStyleOptionFrame()
        self.initStyleOption(option)
        room = self.style().subElementRect(QStyle.SubElement.SE_LineEditContents, option, self)
        margins = self.textMargins()
        room = room.adjusted(margins.left() + 2, margins.top(), -margins.right() - 2, -margins.bottom())
        if self.isClearButtonEnabled() and self.text():
            room.setRight(room.right() - room.height())   # the clear button's square
        return option, room

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.text()) > self._room()[1].width()

    def paintEvent(self, event):
        if self.hasFocus() or not self.is_elided():
            return super().paintEvent(event)
        option, room = self._room()
        painter = QPainter(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelLineEdit, option, painter, self)
        painter.setPen(self.palette().color(QPalette.ColorRole.Text))
        painter.drawText(room, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                         self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideMiddle,
                                                       room.width()))

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._tip()

    def _tip(self, *_):
        tip = self.text() if self.is_elided() else ""
        if tip != self.toolTip():
            self.setToolTip(tip)


class ElidedLabel(QLabel):
    """One line of plain text that shrinks to a few characters and an ellipsis; the whole text
    is its tooltip while it is cut. `text()` is always the whole text."""

    def __init__(self, text: str = "", parent=None, **kwargs):
        super().__init__(text, parent, **kwargs)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        margins = self.contentsMargins()
        least = self.fontMetrics().horizontalAdvance("x" * MIN_CHARS + "…") + margins.left() + margins.right()
        return QSize(min(hint.width(), least), hint.height())

    def is_elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._tip()

    def setText(self, text: str):
        # The same text again (a status figure sampled every few seconds) changes nothing: no
        # measuring, no tooltip event, no relayout of the bar it sits in.
        if text != self.text():
            super().setText(text)
            self._tip()

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._tip()

    def _tip(self):
        tip = self.text() if self.is_elided() else ""
        if tip != self.toolTip():
            self.setToolTip(tip)

    def paintEvent(self, event):
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter = QPainter(self)
        self.style().drawItemText(painter, rect, int(self.alignment()), self.palette(), self.isEnabled(),
                                  text, self.foregroundRole())


class MeasuredLabel(QLabel):
    """A word-wrapped label that lays its text out once per width it is asked about: QLabel
    lays a rich text out anew at each heightForWidth, and a panel's layout asks several times
    per change (a finding's evidence: 0.5-0.9 ms a time). Forgotten when the text, the font or
    the style changes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._heights: dict[int, int] = {}   # width -> height, for the text shown

    def setText(self, text: str):
        if text != self.text():
            self._heights = {}
            super().setText(text)

    def changeEvent(self, event):
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._heights = {}
        super().changeEvent(event)

    def heightForWidth(self, width: int) -> int:
        if width not in self._heights:
            self._heights[width] = self.measure(width)
        return self._heights[width]

    def measure(self, width: int) -> int:
        """The text's height laid out `width` wide (QLabel's own answer)."""
        return super().heightForWidth(width)


class WrappedText(QTextEdit):
    """Read-only text, plain or rich, that wraps to any width: between words where it can,
    inside a word that is wider than the room (which a QLabel never does), so its minimum width
    is a few characters and its height follows its width. Selectable and copyable as it is
    (nothing inserted to break it). `text()`, `setText()`, `textFormat()` and `wordWrap()` as a
    QLabel's."""

    def __init__(self, text: str = "", text_format=Qt.TextFormat.PlainText, parent=None, objectName=""):
        super().__init__(parent)
        self.setObjectName(objectName)
        self._format = text_format
        self._text = ""
        self._heights: dict[int, int] = {}   # width -> height, for the text shown
        self.setReadOnly(True)
        self.setFrameShape(QTextEdit.Shape.NoFrame)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.document().setDocumentMargin(0)
        self.viewport().setAutoFillBackground(False)
        self.setStyleSheet("QTextEdit { background: transparent; border: none; padding: 0; }")
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.setText(text)

    def text(self) -> str:
        return self._text

    def textFormat(self):
        return self._format

    def wordWrap(self) -> bool:
        return True

    def setText(self, text: str):
        self._text = text
        self._heights = {}
        if self._format == Qt.TextFormat.PlainText:
            self.setPlainText(text)
        else:
            self.setHtml(text)
        self.updateGeometry()

    def changeEvent(self, event):
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._heights = {}
        super().changeEvent(event)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        """The text's height laid out `width` wide (a copy of it: the shown one keeps its own)."""
        if width not in self._heights:
            frame = 2 * self.frameWidth()
            document = self.document().clone()
            document.setTextWidth(max(1, width - frame))
            self._heights[width] = int(document.size().height() + 0.999) + frame
        return self._heights[width]

    def sizeHint(self) -> QSize:
        width = max(self.width(), self.fontMetrics().horizontalAdvance("x" * 40))
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("x" * MIN_CHARS), self.fontMetrics().height())

    def wheelEvent(self, event):
        event.ignore()   # all of it is in view: the panel around it scrolls


class ShrinkingComboBox(QComboBox):
    """A combo box as wide as its longest item while there is room, down to a few characters
    when there is not: then its current text ends in an ellipsis (never cut mid-letter) and the
    whole text leads its tooltip. An editable one edits in an ElidedLineEdit, likewise."""

    def __init__(self, parent=None, *, editable: bool = False, toolTip: str = ""):
        super().__init__(parent)
        self.setToolTip(toolTip)
        if editable:
            self.setEditable(True)
            self.setLineEdit(ElidedLineEdit(self))

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        text = self.fontMetrics().horizontalAdvance("x" * MIN_CHARS)
        least = self.style().sizeFromContents(QStyle.ContentsType.CT_ComboBox, option,
                                              QSize(text, hint.height()), self).width()
        return QSize(min(hint.width(), least), hint.height())

    def _label_room(self, option) -> int:
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)
        icon = option.iconSize.width() + 4 if not option.currentIcon.isNull() else 0
        return field.width() - icon - 2

    def is_elided(self) -> bool:
        if self.isEditable():
            return self.lineEdit().is_elided()
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        return self.fontMetrics().horizontalAdvance(self.currentText()) > self._label_room(option)

    def paintEvent(self, event):
        if self.isEditable():
            return super().paintEvent(event)
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, option)
        option.currentText = self.fontMetrics().elidedText(
            option.currentText, Qt.TextElideMode.ElideRight, self._label_room(option))
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, option)

    # The tooltip is worked out when asked for: the current text may be set with the combo's
    # signals blocked (a spec shown in the form), and its room changes with styles and fonts.
    def setToolTip(self, tip: str):
        self._own_tip = tip
        super().setToolTip(tip)

    def toolTip(self) -> str:
        """The whole current text while it is elided, then the combo's own tooltip."""
        whole = self.currentText() if self.is_elided() else ""
        return "\n\n".join(part for part in (whole, self._own_tip) if part)

    def event(self, event):
        if event.type() == QEvent.Type.ToolTip:
            tip = self.toolTip()
            if tip:
                QToolTip.showText(event.globalPos(), tip, self)
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().event(event)


class VerticalScrollArea(QScrollArea):
    """Scrolls its widget vertically only: the widget is exactly as wide as the viewport, so
    nothing hides past the right edge and Tab never scrolls sideways; it is as tall as the
    viewport, or as its own minimum at that width when that is more (then it scrolls).

    With `fit_content` the area is never narrower than its widget's own minimum (a form: every
    control whole); without, the widget takes whatever width the area gets and its text wraps
    to it (the Findings detail)."""

    def __init__(self, widget=None, fit_content: bool = False, parent=None):
        super().__init__(parent)
        self.fit_content = fit_content
        # Sized here (fit_widget), not by QScrollArea: a resizable widget with wrapping text
        # would be made as tall as its preferred height, not its least, and never shrink.
        self.setWidgetResizable(False)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        if widget is not None:
            self.setWidget(widget)

    def setWidget(self, widget):
        widget.setMinimumWidth(1)   # never set the area's width: it is sized to the viewport
        # Its contents stay where they are when it grows or shrinks (fit_widget): the children
        # that moved repaint, not the whole panel (a note's new height repainted the whole form).
        widget.setAttribute(Qt.WidgetAttribute.WA_StaticContents)
        super().setWidget(widget)
        widget.installEventFilter(self)
        self.fit_widget()

    def eventFilter(self, watched, event):
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            if watched.layout() is not None:
                watched.layout().activate()   # take the change in first, then measure
            self.fit_widget()
        return super().eventFilter(watched, event)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self.fit_widget()

    def fit_widget(self):
        widget = self.widget()
        if widget is None:
            return
        width = self.viewport().width()
        layout = widget.layout()
        if layout is not None and layout.hasHeightForWidth():
            least = layout.minimumHeightForWidth(width)
        else:
            least = widget.minimumSizeHint().height()
        size = QSize(width, max(least, self.viewport().height()))
        if widget.size() != size:
            widget.resize(size)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        widget = self.widget()
        if not self.fit_content or widget is None:
            return hint
        frame = 2 * self.frameWidth()
        scrollbar = self.verticalScrollBar().sizeHint().width()
        return QSize(max(hint.width(), widget.minimumSizeHint().width() + scrollbar + frame), hint.height())


def stale_note(text: str) -> QLabel:
    """The line over a panel whose content is of an earlier version of the spec."""
    note = QLabel(text, objectName="staleNote", wordWrap=True, textFormat=Qt.TextFormat.PlainText)
    note.setStyleSheet(f"QLabel#staleNote {{ border-left: 3px solid {OKABE_ITO['orange']}; "
                       "padding: 3px 6px; background: rgba(230, 159, 0, 40); }")
    note.hide()
    return note


class WholeCellTips(QObject):
    """Hover texts whole: over a cell of an item view whose text is cut (elided by the view or
    its delegate), the tooltip is the cell's whole text, then the model's own tooltip if it has
    one. Installed on the view's viewport (`whole_cell_tips`), so every view gets it alike."""

    def __init__(self, view: QAbstractItemView, margin: int = TEXT_MARGIN_PX):
        super().__init__(view)
        self._view, self._margin = view, margin
        view.viewport().installEventFilter(self)

    def cut_text(self, index) -> str:
        """The cell's whole text when the view cannot show all of it, else ""."""
        text = index.data(Qt.ItemDataRole.DisplayRole)
        if not isinstance(text, str) or not text:
            return ""
        rect = self._view.visualRect(index)
        room = rect.width() - 2 * self._margin
        return text if self._view.fontMetrics().horizontalAdvance(text) > room else ""

    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.ToolTip:
            index = self._view.indexAt(event.pos())
            whole = self.cut_text(index) if index.isValid() else ""
            if whole:
                own = index.data(Qt.ItemDataRole.ToolTipRole)
                tip = whole if not own or own == whole else f"{whole}\n\n{own}"
                QToolTip.showText(event.globalPos(), tip, watched)
                return True
        return False


def whole_cell_tips(view: QAbstractItemView, margin: int = TEXT_MARGIN_PX) -> WholeCellTips:
    """`margin`: what a cell keeps clear each side of its text (a delegate's chip: more)."""
    return WholeCellTips(view, margin)


def share_the_width(view: QTableView, shares: dict[int, float]):
    """A table whose name columns (a module path, its class: `shares`, column -> the most of
    the view's width it takes) are elided in the middle (the path's start and its last name),
    and whose other columns are as wide as their contents, the last taking what is left
    (elided at the end): at 1024 wide the figures stay in view beside the names instead of
    behind a sideways scroll. Cut texts are whole on hover."""
    header = view.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setStretchLastSection(True)
    view.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    view.setWordWrap(False)
    for column, share in shares.items():
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        _ElasticColumn(view, column, share)
    whole_cell_tips(view)


class _ElasticColumn(QObject):
    """Keeps a column at its contents' width, capped at a share of the viewport, as rows arrive
    and the view is resized."""

    def __init__(self, view: QTableView, column: int, share: float):
        super().__init__(view)
        self._view, self._column, self._share = view, column, share
        view.viewport().installEventFilter(self)
        model = view.model()
        for signal in (model.modelReset, model.rowsInserted, model.layoutChanged, model.dataChanged):
            signal.connect(self.fit)

    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.Resize:
            self.fit()
        return False

    def fit(self, *_):
        view = self._view
        wanted = max(view.sizeHintForColumn(self._column) + 2 * TEXT_MARGIN_PX,
                     view.horizontalHeader().sectionSizeHint(self._column))
        cap = max(int(view.viewport().width() * self._share), view.fontMetrics().horizontalAdvance("x" * 12))
        width = min(wanted, cap)
        if view.columnWidth(self._column) != width:
            view.setColumnWidth(self._column, width)
