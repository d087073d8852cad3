"""The Tensors tab: filter bar (with "colour by"), the lazy tensor tree, and the key of the
colours the tree is drawn in.

Nothing here sets the window's narrowest width: the filter box takes a row of its own when the
tab is narrow, the filter choosers shrink (their text elided), the legend and the inventory line
wrap, and the tree scrolls sideways."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QItemSelectionModel, QModelIndex, QPoint, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QCursor, QFont, QFontMetrics, QPalette
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QGridLayout, QHBoxLayout, QHeaderView,
                               QLabel, QLineEdit, QMenu, QStyle, QStyleOptionViewItem, QTreeView,
                               QVBoxLayout, QWidget)

from fp16studio.core.present import vocabulary
from .delegates import TensorCellDelegate, cell_width, text_rect
from .fit import ShrinkingComboBox, WholeCellTips, stale_note
from .palette import colour_key
from .roles import NODE_ROLE
from .tree_model import (ABSMAX, COLOUR_BY, DEVICE, KIND, NAME, SHAPE, SIZE, STATUS, Cell,
                         TensorFilterProxy, TensorTreeModel)

# Expanding every match of a filter is only friendly while the matches are few.
AUTO_EXPAND_LIMIT = 200
# Each column is as wide as its title and its contents (the rows loaded so far); Name takes what
# the others leave. While that is less than NAME_ROOM_PX the columns in FOLDED go, first to last
# (Abs-max: empty but for activations; then Device and Size, a badge and a figure per row), back
# when there is room, unless the user chose them in the header's menu. Where even then the room
# is short, Status shows its chip alone (its word on hover), and then Shape gives up what Name
# needs down to NAME_MIN_PX, down to SHAPE_LEAST_PX itself; past that the tree scrolls sideways.
# A cut name or shape is whole on hover.
NAME_MIN_PX = 150
NAME_ROOM_PX = 210
SHAPE_LEAST_PX = 64
TITLE_ROOM_PX = 28   # a title's margins and the sort arrow
FOLDED = (ABSMAX, DEVICE, SIZE)
CHIP_ALONE_PX = 40   # a Status cell narrowed to its chip (the header's least section)
INVENTORY_TIP = ("The run's tensor inventory, as `fp16studio diagnose --json` reports it: every "
                 "tensor seen (weights, the batch and the activations of the pass; activations are "
                 "made one after another, not all held at once). Each group's share is on its row.")


def inventory_text(inventory: dict) -> str:
    """Core's inventory in one line: parameters, tensors per dtype, bytes."""
    dtypes = ", ".join(f"{dtype} {count:,}" for dtype, count in sorted(
        (inventory.get("dtypes") or {}).items(), key=lambda item: -item[1]))
    return (f"{vocabulary.count(inventory.get('parameters', 0), 'parameter')} · "
            f"{vocabulary.count(inventory.get('tensors', 0), 'tensor')}"
            + (f" ({dtypes})" if dtypes else "")
            + f" · {vocabulary.size(inventory.get('bytes', 0))}")


class TensorTreeView(QTreeView):
    """`row_cells(index)`: the Cells of a view's index's row (through the view's proxy)."""

    def __init__(self, row_cells, parent=None):
        super().__init__(parent)
        self._row_cells = row_cells
        self._painting: _Painting | None = None   # what the rows of the paint under way share
        self.setObjectName("tensorTree")
        self.setUniformRowHeights(True)  # lets the view skip measuring 10 000 rows
        self.setAlternatingRowColors(True)
        self.setSortingEnabled(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        # Deep names keep both ends (`encoder…layer.0.attention`); the tooltip has the path.
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.setIndentation(14)
        # A scroll bar that came with a result's rows narrowed the rows already drawn: the tree
        # was drawn whole again, its columns fitted again (a flat track where rows fit).
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        # The rows stay where they are drawn when the view's foot moves (the stale note under
        # it comes and goes): nothing is drawn again, or only the rows a taller view uncovers.
        self.viewport().setAttribute(Qt.WidgetAttribute.WA_StaticContents)

        self.chosen_columns: set[int] = set()   # shown or hidden by the user: never folded
        self.sized_columns: set[int] = set()    # widened or narrowed by the user: kept so
        self._fitting = False
        # Rows fetched or shown change what the columns hold: measured once per change, before
        # the window's next paint (its UpdateRequest, watched while a fit is due), so that the
        # paint showing the rows shows them in their columns; in the next event where no
        # paint comes (a hidden tab). A timer alone fires after the paint: the tree drawn with
        # the old widths, then again.
        self._refit = QTimer(self, singleShot=True, interval=0, timeout=self.fit_columns)
        self._painted_by = None   # the window watched for its paint while a fit is due
        self.expanded.connect(lambda _index: self._refit_soon())
        self.header().sectionResized.connect(self._sized)

    def setModel(self, model):
        super().setModel(model)
        # dataChanged: a finding's rows turn bold, a colour mode adds chips beside the names.
        for signal in (model.modelReset, model.layoutChanged, model.rowsInserted, model.dataChanged):
            signal.connect(lambda *_: self._refit_soon())

    def _refit_soon(self):
        self._refit.start()
        if self._painted_by is None:
            self._painted_by = self.window()
            self._painted_by.installEventFilter(self)

    def eventFilter(self, watched, event):
        if watched is self._painted_by and event.type() == QEvent.Type.UpdateRequest:
            self.fit_columns()
        return super().eventFilter(watched, event)

    def _sized(self, column: int, _old: int, _new: int):
        if not self._fitting:   # the user dragged a column's edge
            if column != NAME:
                self.sized_columns.add(column)
            self.fit_columns()

    def cell_of(self, index) -> Cell:
        """The Cell at a view's index. A paint looks each row's cells up once: each look-up
        through the proxy is a call into the model's Python for the source index, and the
        painter asks for every cell in view."""
        if self._painting is None:
            return self._row_cells(index)[index.column()]
        rows = self._painting.rows
        key = (index.row(), index.internalId())   # a proxy index's id: its parent's rows
        cells = rows.get(key)
        if cells is None:
            cells = rows[key] = self._row_cells(index)
        return cells[index.column()]

    def paintEvent(self, event):
        self._painting = _Painting(self)
        try:
            super().paintEvent(event)
        finally:
            self._painting = None

    def drawRow(self, painter, option, index):
        """A row no state is drawn on, in one call into Python: its background, branches and
        cells as the view's own drawRow draws them, which calls the delegate once per cell and
        the model, through the proxy, for each cell's index and flags (a repaint of the demo's
        tree: 6.5 ms of CPU that way, 4.9 this way). A row the style draws a state on
        (selected, current, under the mouse), or a first column narrower than its
        indentation, the view draws itself."""
        painting, parent = self._painting, index.parent()
        if painting is None or not painting.plain(option, index, parent):
            return super().drawRow(painter, option, index)
        indent = self.indentation() * (painting.level(parent) + self.rootIsDecorated())
        sections = painting.sections
        if any(column == NAME and size < indent for _, size, column in sections):
            return super().drawRow(painter, option, index)
        y, height = option.rect.y(), option.rect.height()
        row = QStyleOptionViewItem(option)
        row.palette = painting.palette(option)
        if painting.alternate and (y + painting.offset) // height % 2:
            row.features |= QStyleOptionViewItem.ViewItemFeature.Alternate
            start, end = sections[0][0], sections[-1][0] + sections[-1][1]
            row.rect = QRect(start, y, end - start, height)
            self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewRow, row, painter, self)
        cells = self._row_cells(index)
        for left, size, column in sections:
            if column == NAME:
                self.drawBranches(painter, QRect(left, y, indent, height), index)
                left, size = left + indent, size - indent
            painting.delegate.draw(painter, row, QRect(left, y, size, height), cells[column], column)

    def content_width(self, column: int) -> int:
        """The width `column` (not Name) needs for its title and the rows in view."""
        return self._content_widths()[column]

    def _content_widths(self) -> dict[int, int]:
        """Each column's (but Name's) width for its title and the widest of its cells in the
        rows in view, as the painter draws them (delegates.cell_width): one call into the
        model per row. The view's own sizeHintForColumn asks the delegate for each cell, and
        the delegate's style for each of its roles: 20-30 ms of the GUI thread per result."""
        header, model = self.header(), self.model()
        title_metrics = header.fontMetrics()
        widths = {c: title_metrics.horizontalAdvance(model.headerData(c, Qt.Orientation.Horizontal) or "")
                  + TITLE_ROOM_PX for c in range(header.count()) if c != NAME}
        font = QFont(self.font())
        plain = QFontMetrics(font)
        font.setBold(True)
        bold = QFontMetrics(font)
        index, bottom = self.indexAt(QPoint(0, 0)), self.viewport().height()
        while index.isValid() and self.visualRect(index).top() < bottom:
            for column, cell in enumerate(self._row_cells(index)):
                if column in widths:
                    widths[column] = max(widths[column],
                                         cell_width(cell, column, bold if cell.bold else plain))
            index = self.indexBelow(index)
        return widths

    def fit_columns(self):
        """Size the columns to their contents within the viewport's width (module docstring)."""
        if self._fitting or self.model() is None:
            return
        self._refit.stop()
        if self._painted_by is not None:
            self._painted_by.removeEventFilter(self)
            self._painted_by = None
        self._fitting = True
        try:
            header = self.header()
            foldable = [c for c in FOLDED if c not in self.chosen_columns]
            shown = {c for c in range(header.count())
                     if c != NAME and (c in foldable or not header.isSectionHidden(c))}
            contents = self._content_widths()
            width = {c: header.sectionSize(c) if c in self.sized_columns else contents[c]
                     for c in shown}
            for column in foldable:   # first to last, while Name is short of room
                if self.viewport().width() - sum(width[c] for c in shown) >= NAME_ROOM_PX:
                    break
                shown.discard(column)
            left = self.viewport().width() - sum(width[c] for c in shown if c != SHAPE)
            if STATUS in shown and STATUS not in self.sized_columns and SHAPE in shown \
                    and left - width[SHAPE] < NAME_ROOM_PX:
                left += width[STATUS] - CHIP_ALONE_PX
                width[STATUS] = CHIP_ALONE_PX
            if SHAPE in shown and SHAPE not in self.sized_columns:   # whole while Name keeps its least
                width[SHAPE] = min(width[SHAPE], max(SHAPE_LEAST_PX, left - NAME_MIN_PX))
            width[NAME] = max(NAME_MIN_PX, left - (width[SHAPE] if SHAPE in shown else 0))
            # The header's signals held: QTreeView answers a section's resize with a repaint of
            # the columns from it rightwards an event later, after the paint this fitting is
            # for has drawn them (the whole tree painted twice per result); the one repaint
            # is asked for below, in this event.
            resized, blocked = False, header.blockSignals(True)
            try:
                for column in foldable:
                    if header.isSectionHidden(column) == (column in shown):
                        header.setSectionHidden(column, column not in shown)
                        resized = True
                for column, size in width.items():
                    if (column == NAME or column in shown) and header.sectionSize(column) != size:
                        header.resizeSection(column, size)
                        resized = True
            finally:
                header.blockSignals(blocked)
            if resized:
                # The scroll bars follow the new widths now, not in the view's next event: a
                # sideways bar shown for the old widths would go again there, the tree laid out
                # and painted once more each time (the first result's vertical bar did that).
                self.updateGeometries()
                self.viewport().update()
        finally:
            self._fitting = False

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self.fit_columns()


class _Painting:
    """What every row of one paint of the tree shares: the columns in view, the row states the
    style draws, the rows' depths (TensorTreeView.drawRow), and the rows' cells looked up once
    each (TensorTreeView.cell_of)."""

    def __init__(self, view: TensorTreeView):
        header, width = view.header(), view.viewport().width()
        columns = [(header.sectionViewportPosition(column), header.sectionSize(column), column)
                   for column in map(header.logicalIndex, range(header.count()))
                   if not header.isSectionHidden(column)]
        # No columns in a right-to-left layout: every row goes to the view's own drawRow, which
        # mirrors each rect.
        self.sections = [] if view.isRightToLeft() else [
            section for section in columns if section[0] + section[1] > 0 and section[0] < width]
        self._view = view
        self.delegate, self.alternate = view.itemDelegate(), view.alternatingRowColors()
        self.offset = view.verticalOffset()
        self._selection, self._current = view.selectionModel(), view.currentIndex()
        viewport = view.viewport()
        self._mouse_y = viewport.mapFromGlobal(QCursor.pos()).y() if viewport.underMouse() else None
        self.rows: dict[tuple, list[Cell]] = {}   # (row, proxy index id) -> the row's cells
        self._levels: dict[tuple, int] = {}
        self._palettes: dict[bool, QPalette] = {}

    def level(self, parent) -> int:
        """How deep the rows under `parent` are (0: the top rows)."""
        if not parent.isValid():
            return 0
        key = (parent.row(), parent.internalId())
        level = self._levels.get(key)
        if level is None:
            level = self._levels[key] = self.level(parent.parent()) + 1
        return level

    def plain(self, option, index, parent) -> bool:
        """Whether `index`'s row is drawn with no state: there are columns in view, and the
        row is enabled, not spanned, not selected, not current and not under the mouse."""
        current, row = self._current, index.row()
        return bool(self.sections) and bool(option.state & QStyle.StateFlag.State_Enabled) and \
            not self._view.isFirstColumnSpanned(row, parent) and \
            not (current.isValid() and current.row() == row and current.parent() == parent) and \
            not self._selection.rowIntersectsSelection(row, parent) and \
            not (self._mouse_y is not None and option.rect.top() <= self._mouse_y <= option.rect.bottom())

    def palette(self, option) -> QPalette:
        """The option's palette in the colour group the view's drawRow gives a cell."""
        active = bool(option.state & QStyle.StateFlag.State_Active)
        palette = self._palettes.get(active)
        if palette is None:
            palette = self._palettes[active] = QPalette(option.palette)
            palette.setCurrentColorGroup(QPalette.ColorGroup.Active if active else QPalette.ColorGroup.Inactive)
        return palette


class TreeCellTips(WholeCellTips):
    """A cut name or shape whole on hover: cut as the tree's painter draws it (bold where a
    finding names the row, past the chip where the cell has one)."""

    def __init__(self, view: QTreeView, cell_of):
        super().__init__(view)
        self._cell_of = cell_of

    def cut_text(self, index) -> str:
        cell = self._cell_of(index)
        if not cell.text:
            return ""
        font = QFont(self._view.font())
        font.setBold(cell.bold)
        room = text_rect(cell, self._view.visualRect(index), index.column()).width()
        shown = QFontMetrics(font).elidedText(cell.text, Qt.TextElideMode.ElideRight, room)
        return cell.text if shown != cell.text else ""


class TensorPanel(QWidget):
    """Owns the source model and the proxy; `tree` is the view (MainWindow.tensorTree)."""

    nodeSelected = Signal(object)  # TensorNode or None

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = TensorTreeModel(self)
        self.proxy = TensorFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self.tree = TensorTreeView(
            lambda index: self.model.row_cells(self.proxy.mapToSource(index)), self)
        self.tree.setModel(self.proxy)
        self.tree.setItemDelegate(TensorCellDelegate(self.tree.cell_of, self.tree))
        self.tree.sortByColumn(-1, Qt.SortOrder.AscendingOrder)  # model order until a click
        self.tips = TreeCellTips(self.tree, self.tree.cell_of)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setMinimumSectionSize(40)
        # A column's contents are measured on the rows in view (fit_columns), not a thousand,
        # also when its edge is double-clicked.
        header.setResizeContentsPrecision(0)
        # Every column as wide as its contents, within the tab's width (TensorTreeView.fit_columns);
        # each can be dragged wider or narrower, and stays so.
        for column in range(self.model.columnCount()):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        # Kind is plain from the names (a module, `weight`, `batch.input_ids`); it is one
        # right-click away on the header, which lists every column.
        header.setSectionHidden(KIND, True)
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._column_menu)
        self.tree.selectionModel().currentRowChanged.connect(self._on_current)

        self.search = QLineEdit(placeholderText="Filter by name…", clearButtonEnabled=True)
        self.dtype_filter = ShrinkingComboBox()
        self.device_filter = ShrinkingComboBox()
        self.only_problems = QCheckBox("Only problems")
        self.colour_by = ShrinkingComboBox(toolTip="What the chip beside each name shows: a module's "
                                           "headroom (share of its dtype's range used), drift "
                                           "(SQNR against float32, after Compare with float32) "
                                           "or fp8 (a Linear's SQNR in FP8 against bfloat16, "
                                           "after Plan FP8); a collapsed row shows the worst "
                                           "below it")
        for kind in COLOUR_BY:
            self.colour_by.addItem(f"Colour: {kind}", kind)
        self.colour_by.currentIndexChanged.connect(self._apply_colour)
        self._module_values: dict = {}   # "headroom" / "drift" / "fp8" -> {module path: value}
        self.summary = QLabel(objectName="muted", toolTip=INVENTORY_TIP, wordWrap=True)
        self.notice = stale_note("")
        self.inventory: dict | None = None
        self._reset_choices(set(), set())
        self._debounce = QTimer(self, singleShot=True, interval=150, timeout=self._apply_filter)
        self.search.textChanged.connect(self._debounce.start)
        self.dtype_filter.currentIndexChanged.connect(self._apply_filter)
        self.device_filter.currentIndexChanged.connect(self._apply_filter)
        self.only_problems.toggled.connect(self._apply_filter)

        self._filter_bar = QGridLayout()
        self._filter_bar.setHorizontalSpacing(8)
        self._filter_bar.setVerticalSpacing(6)
        self._filter_shape = None   # (search on its own row, choosers per row) as laid out
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 6)
        layout.setSpacing(6)
        layout.addLayout(self._filter_bar)
        # Under the tree, not over it: a note that comes with an edit and goes with the next run
        # moved every row, and the whole tree was drawn again each time (see TensorTreeView).
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.notice)
        # The legend and the inventory each wrap to the width there is.
        footer = QHBoxLayout()
        self.legend = ColourKey(self)
        footer.addWidget(self.legend, 3)
        footer.addWidget(self.summary, 2)
        self.summary.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        layout.addLayout(footer)
        self._arrange_filters()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._arrange_filters()

    def _arrange_filters(self):
        """The filter box beside the choosers while they all fit at their preferred widths; on a
        row of its own above them when not, so it is never squeezed to a few letters; and the
        choosers on as many rows as they need to be read whole ("All dtypes", not "All dtyp")."""
        choosers = (self.dtype_filter, self.device_filter, self.only_problems, self.colour_by)
        bar = self._filter_bar
        margins = self.layout().contentsMargins()
        room = self.width() - margins.left() - margins.right()
        gap = bar.horizontalSpacing()
        beside = self.search.sizeHint().width() + sum(gap + w.sizeHint().width() for w in choosers)
        rows, used = [[]], 0
        for widget in choosers:
            need = widget.sizeHint().width() + (gap if rows[-1] else 0)
            if rows[-1] and used + need > room:
                rows.append([])
                used, need = 0, widget.sizeHint().width()
            rows[-1].append(widget)
            used += need
        own_row = room < beside
        shape = (own_row, tuple(map(len, rows)))
        if shape == self._filter_shape:
            return
        self._filter_shape = shape
        for widget in (self.search, *choosers):
            bar.removeWidget(widget)
        columns = max(map(len, rows))
        bar.addWidget(self.search, 0, 0, 1, columns + 1 if own_row else 1)
        for r, row in enumerate(rows):
            for column, widget in enumerate(row):
                bar.addWidget(widget, r + int(own_row), column if own_row else column + 1)
        # The room left goes to the filter box beside the choosers, after them below it.
        for column in range(len(choosers) + 1):
            bar.setColumnStretch(column, 0)
        bar.setColumnStretch(0 if not own_row else columns, 1)

    # -- content --------------------------------------------------------------------------------
    def set_tree(self, root, tree_index=None):
        self.model.set_tree(root, tree_index)
        index = self.model.tree_index
        self._reset_choices(index.dtypes if index else set(), index.devices if index else set())
        self._apply_filter()
        if self.tree.model().rowCount() and not any(
                self.tree.isExpanded(self.proxy.index(r, 0)) for r in range(self.proxy.rowCount())):
            self.tree.expandToDepth(0)

    def set_inventory(self, inventory: dict | None):
        """The footer: the run's inventory as core summarised it (the `inventory` of its
        --json document, the same numbers `fp16studio diagnose --json` gives), or nothing. The
        window counts nothing itself: what each group holds is on the group's own row."""
        self.inventory = inventory
        self.summary.setText(inventory_text(inventory) if inventory else "")

    def set_notice(self, text: str | None):
        """A note under the tree when it is not of the current spec (None: none)."""
        self.notice.setText(text or "")
        self.notice.setVisible(bool(text))

    def set_module_values(self, kind: str, values: dict | None):
        """The per-module values of `kind` the tree can be coloured by (None: none known)."""
        self._module_values[kind] = values or {}
        if self.colour_by.currentData() == kind:
            self._apply_colour()

    def _apply_colour(self):
        kind = self.colour_by.currentData()
        values = self._module_values.get(kind)
        self.model.set_colour_by(kind, values)
        self.legend.show_key(kind, bool(values) or kind not in NOTHING_YET)
        self.tree.viewport().update()

    def reveal(self, node) -> bool:
        """Select `node` (a finding's module) and show it (`show_node`); False when it cannot be."""
        index = self.show_node(node)
        if not index.isValid():
            return False
        self.tree.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        return True

    def show_node(self, node) -> QModelIndex:
        """`node`'s row in view: fetched, its parents expanded (the filters cleared if they hide
        it) and the tree scrolled to put it in the middle, unless it is in view already (the
        tree does not move under the user for nothing, nor paint itself whole again). Its index
        in the view, invalid when it is not in the tree."""
        source = self.model.index_for_node(node)
        index = self.proxy.mapFromSource(source)
        if not index.isValid() and self.proxy.active:
            self.clear_filters()
            index = self.proxy.mapFromSource(self.model.index_for_node(node))
        if not index.isValid():
            return index
        parent = index.parent()
        while parent.isValid():
            self.tree.expand(parent)
            parent = parent.parent()
        if not self.tree.viewport().rect().contains(self.tree.visualRect(index)):
            self.tree.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return index

    def clear_filters(self):
        for widget in (self.search, self.dtype_filter, self.device_filter, self.only_problems):
            widget.blockSignals(True)
        self.search.clear()
        self.dtype_filter.setCurrentIndex(0)
        self.device_filter.setCurrentIndex(0)
        self.only_problems.setChecked(False)
        for widget in (self.search, self.dtype_filter, self.device_filter, self.only_problems):
            widget.blockSignals(False)
        self._apply_filter()

    # -- filtering ------------------------------------------------------------------------------
    def _reset_choices(self, dtypes, devices):
        for combo, everything, values in ((self.dtype_filter, "All dtypes", dtypes),
                                          (self.device_filter, "All devices", devices)):
            if [combo.itemData(i) for i in range(combo.count())] == ["", *sorted(values)]:
                continue   # the same choices (a re-run): the chooser and the bar not redone and repainted
            current = combo.currentData()
            combo.blockSignals(True)
            combo.clear()
            combo.addItem(everything, "")
            for value in sorted(values):
                combo.addItem(value, value)
            combo.setCurrentIndex(max(0, combo.findData(current)))
            combo.blockSignals(False)

    def _apply_filter(self):
        self.proxy.set_filter(text=self.search.text(), dtype=self.dtype_filter.currentData() or "",
                              device=self.device_filter.currentData() or "",
                              only_problems=self.only_problems.isChecked())
        if self.proxy.kept is not None and self.proxy.kept <= AUTO_EXPAND_LIMIT:
            self._expand_matches()

    def _expand_matches(self):
        # Fetch and expand down to each match; the proxy keeps only the matching branches.
        stack = [self.proxy.index(r, 0) for r in range(self.proxy.rowCount())]
        while stack:
            index = stack.pop()
            if not self.proxy.hasChildren(index):
                continue
            while self.proxy.canFetchMore(index):
                self.proxy.fetchMore(index)
            self.tree.expand(index)
            stack.extend(self.proxy.index(r, 0, index) for r in range(self.proxy.rowCount(index)))

    def _column_menu(self, position):
        header = self.tree.header()
        menu = QMenu(self)
        for column in range(1, self.model.columnCount()):
            action = menu.addAction(self.model.headerData(column, Qt.Orientation.Horizontal))
            action.setCheckable(True)
            action.setChecked(not header.isSectionHidden(column))
            action.toggled.connect(lambda on, c=column: self._choose_column(c, on))
        menu.exec(header.mapToGlobal(position))

    def _choose_column(self, column: int, shown: bool):
        self.tree.chosen_columns.add(column)   # the user's choice: no longer folded for room
        self.tree.header().setSectionHidden(column, not shown)
        self.tree.fit_columns()

    def _on_current(self, current, _previous):
        self.nodeSelected.emit(current.data(NODE_ROLE) if current.isValid() else None)


# What a "colour by" mode that has no values yet says instead of its key.
NOTHING_YET = {
    "headroom": "Colour: headroom colours each module by how much of its dtype's range it uses: "
                "Run to measure it.",
    "drift": "Colour: drift colours each module by how far it parts from float32: nothing is "
             "compared yet (Compare with float32).",
    "fp8": "Colour: fp8 colours each Linear layer by what FP8 loses on it: no plan yet (Plan FP8 "
           "in the FP8 tab).",
}


class ColourKey(QLabel):
    """The key of the colour mode shown: a chip and what it means for each colour (wrapping
    between entries, never between a chip and its words when the tab is narrow), or, for a
    mode with nothing to show yet, what fills it."""

    def __init__(self, parent=None):
        super().__init__(parent, wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.show_key("dtype", True)

    def show_key(self, kind: str, has_values: bool):
        if not has_values:
            self.setText(f"<span style='color:#6b717b'>{NOTHING_YET[kind]}</span>")
            return
        title, entries = colour_key(kind)
        chips = "&nbsp;&nbsp; ".join(f"<span style='color:{colour}'>\u25a0</span>&nbsp;"
                                     f"{label.replace(' ', '&nbsp;')}" for colour, label in entries)
        self.setText(f"<span style='color:#6b717b'>{title}:</span>&nbsp;&nbsp; {chips}")
