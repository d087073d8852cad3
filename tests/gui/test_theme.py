"""Stylesheets, icons and the palette module."""

from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QAction, QColor, QPalette
from PySide6.QtWidgets import QApplication

from fp16studio.gui import MainWindow, palette, theme


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_stylesheets_load_with_resolved_resource_urls(scheme):
    text = theme.stylesheet(scheme)
    assert "@RESOURCES@" not in text
    for url in text.split("url(")[1:]:
        assert Path(url.split(")")[0]).is_file()


def test_every_icon_renders(qapp):
    names = [p.stem for p in theme.resource("icons").glob("*.svg")]
    assert {"run", "stop", "undo", "redo", "fix", "status-error"} <= set(names)
    for name in names:
        assert not theme.icon(name).pixmap(24, 24).isNull(), name


def test_app_icon_has_every_size(qapp):
    sizes = {s.width() for s in theme.app_icon().availableSizes()}
    assert {16, 24, 32, 48, 64, 128, 256, 512} <= sizes


def test_pinned_theme_applies_its_stylesheet(qapp):
    try:
        pinned = theme.Theme(qapp, "dark")
        assert pinned.scheme == "dark" and qapp.styleSheet() == theme.stylesheet("dark")
        pinned._on_system_change(None)           # the system switching does not move it
        assert pinned.scheme == "dark"
    finally:
        qapp.setStyleSheet("")
        qapp.setPalette(QPalette())


def test_palette_is_okabe_ito_and_text_reads_on_it():
    assert set(palette.DTYPE_COLORS.values()) <= set(palette.OKABE_ITO.values())
    assert palette.dtype_color("int8") == palette.DTYPE_COLORS["int64"]
    assert palette.text_on(palette.OKABE_ITO["blue"]) == "#ffffff"
    assert palette.text_on(palette.OKABE_ITO["yellow"]) == "#000000"


def test_view_theme_pins_a_scheme_and_follows_the_system_again(qapp):
    try:
        chosen = theme.Theme(qapp)
        assert theme.app_theme(qapp) is chosen and chosen.choice == "system"
        chosen.choose("dark")
        assert chosen.scheme == "dark" and chosen.choice == "dark"
        assert qapp.styleSheet() == theme.stylesheet("dark")
        chosen._on_system_change(None)           # pinned: the system switching does not move it
        assert chosen.scheme == "dark"
        chosen.choose("system")
        assert chosen.choice == "system" and chosen.scheme == theme.system_scheme()
    finally:
        qapp.setStyleSheet("")
        qapp.setPalette(QPalette())


# -- a theme switch reaches every icon and plot at once ------------------------------------------

def luminance(color: QColor) -> float:
    def lin(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(color.redF()) + 0.7152 * lin(color.greenF()) + 0.0722 * lin(color.blueF())


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio: 1 (the same) to 21 (black on white)."""
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def ink(icon, size=24) -> QColor:
    """The colour most of an icon is drawn in: its opaque pixels' median by luminance."""
    image = icon.pixmap(size, size).toImage()
    pixels = sorted((image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())
                     if image.pixelColor(x, y).alpha() > 128), key=luminance)
    assert pixels, "the icon draws nothing"
    return pixels[len(pixels) // 2]


def settle(qtbot):
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(10)


@pytest.fixture
def window_in_light(qtbot, qapp):
    theme.Theme(qapp, "light")
    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1280, 760)
    window.show()
    window.main_tabs.setCurrentWidget(window.drift)
    window.compare   # made whole now: on a busy machine its parts could still be on their way
    settle(qtbot)    # when the switch comes, and a plot made during it is styled as it is made
    yield window
    qapp.setStyleSheet("")
    qapp.setPalette(QPalette())
    qapp.setStyle("Fusion")
    theme._current.pop("theme", None)   # the next test's window follows the system again


def test_a_theme_switch_redraws_the_plots_at_once(qtbot, window_in_light):
    """The drift plot on screen turns dark with the theme, not at the next tab change or resize,
    and every plot's axes and titles are in the new text colour."""
    window = window_in_light
    plot = window.drift.plot
    assert luminance(plot.grab().toImage().pixelColor(8, 8)) > 0.8
    window.choose_theme("dark")
    settle(qtbot)
    background = plot.grab().toImage().pixelColor(8, 8)
    assert luminance(background) < 0.05
    text = plot.palette().color(QPalette.ColorRole.Text)
    assert contrast(text, background) > 7
    for view in (plot, window.benchPlot, window.compare.bars):
        items = view.scene().items()
        axes = [item for item in items if isinstance(item, pg.AxisItem)]
        assert axes
        for axis in axes:
            assert axis.textPen().color() == text
            assert contrast(axis.pen().color(), background) > 3
        for label in (item for item in items if isinstance(item, pg.LabelItem)):
            assert label.opts["color"] == text


def test_icons_stand_out_in_the_dark_theme_after_a_switch(qtbot, window_in_light):
    """The browse buttons, the toolbar's and the line edits' clear buttons: each icon contrasts
    with what it is drawn on (3:1, WCAG's figure for graphics), in both themes."""
    window = window_in_light
    picker = window.form.dataset_picker
    picker.edit.setText("data/images")
    edits = [picker.edit, window.tensors.search]

    def assert_visible(scheme):
        for button in (picker.folder_button, picker.file_button):
            field = button.palette().color(QPalette.ColorRole.Button)
            assert contrast(ink(button.icon()), field) >= 3, (scheme, button.toolTip())
        field = window.toolbar.palette().color(QPalette.ColorRole.Window)
        for action in (window.act_bench, window.act_export, window.act_undo):
            assert contrast(ink(action.icon()), field) >= 3, (scheme, action.text())
        for edit in edits:
            clear = [a for a in edit.findChildren(QAction) if not a.icon().isNull()]
            assert clear, scheme
            field = edit.palette().color(QPalette.ColorRole.Base)
            assert contrast(ink(clear[0].icon()), field) >= 3, (scheme, edit.placeholderText())

    assert_visible("light")
    window.choose_theme("dark")
    settle(qtbot)
    assert_visible("dark")
    window.choose_theme("light")
    settle(qtbot)
    assert_visible("light again")


def test_a_switch_restyles_each_plot_once_and_keeps_the_style(qtbot, window_in_light, qapp,
                                                              monkeypatch):
    """A switch cost the window seconds on a busy machine: the style was made and set again
    (every widget repolished once more), and each plot restyled once per palette or style
    event it got. The style stays; each plot is restyled once, after the switch."""
    from fp16studio.gui import plot_style

    window = window_in_light
    style = qapp.style()
    restyled = []
    real = plot_style.restyle
    monkeypatch.setattr(plot_style, "restyle", lambda view: (restyled.append(view), real(view)))
    window.choose_theme("dark")
    assert qapp.style() is style and restyled == []   # not yet: after the switch's events
    settle(qtbot)
    plots = [window.drift.plot, window.benchPlot, window.compare.bars]
    assert all(restyled.count(view) == 1 for view in plots), [restyled.count(v) for v in plots]


def test_the_menu_closes_before_the_theme_switches(qtbot, window_in_light, qapp):
    window = window_in_light
    dark = next(a for a in window.theme_actions.actions() if a.data() == "dark")
    dark.trigger()
    assert qapp.styleSheet() == theme.stylesheet("light")   # the menu's own trigger returns first
    qtbot.waitUntil(lambda: qapp.styleSheet() == theme.stylesheet("dark"), timeout=5000)


@pytest.mark.parametrize("scheme, surface", [("light", "#ffffff"), ("dark", "#181a1e")])
def test_item_views_are_drawn_frameless_on_their_surface_without_a_styled_box(qtbot, qapp, scheme, surface):
    """A `border` or `background` rule on an item view sends its every paint through the
    stylesheet's slow path (the window's repaint after a result 18-20 ms of CPU instead of 8-9,
    issue 31): the views get no frame and the palette's Base instead, in those rules' colours."""
    from PySide6.QtWidgets import QFrame, QTableView, QTreeView

    views = ("QTreeView", "QListView", "QTableView")
    for rule in theme.stylesheet(scheme).split("}"):
        selectors, _, body = rule.partition("{")
        if any(v in s and "::" not in s for s in selectors.split(",") for v in views):
            assert not {p.split(":")[0].strip() for p in body.split(";")} & {"border", "background"}, rule
    try:
        theme.Theme(qapp, scheme)
        for view in (QTreeView(), QTableView()):
            qtbot.addWidget(view)
            view.show()
            assert view.frameShape() == QFrame.Shape.NoFrame
            assert view.viewport().palette().color(QPalette.ColorRole.Base) == QColor(surface)
    finally:
        qapp.setStyleSheet("")
        qapp.setPalette(QPalette())


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_scroll_bars_are_drawn_flat_without_arrows(qtbot, qapp, scheme):
    """Fusion draws a scroll bar with gradients and arrow buttons, 1.2 ms of the GUI thread's CPU
    a paint, and a result's repaint shows four or five of them: the stylesheet draws them flat
    (0.25 ms), a handle of one colour on a track of one colour, with no arrows."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QScrollBar, QStyle, QStyleOptionSlider

    class Bar(QScrollBar):
        def option(self):
            option = QStyleOptionSlider()
            self.initStyleOption(option)
            return option

    try:
        theme.Theme(qapp, scheme)
        bar = Bar(Qt.Orientation.Vertical)
        qtbot.addWidget(bar)
        bar.setRange(0, 100)
        bar.setPageStep(25)
        bar.resize(bar.sizeHint().width(), 240)
        bar.show()
        control, style, option = QStyle.ComplexControl.CC_ScrollBar, bar.style(), bar.option()
        for arrow in (QStyle.SubControl.SC_ScrollBarAddLine, QStyle.SubControl.SC_ScrollBarSubLine):
            assert style.subControlRect(control, option, arrow, bar).isEmpty()
        handle = style.subControlRect(control, option, QStyle.SubControl.SC_ScrollBarSlider, bar)
        image = bar.grab().toImage()
        across = {image.pixelColor(x, handle.center().y()).name()
                  for x in range(handle.left() + 4, handle.right() - 3)}
        along = {image.pixelColor(handle.center().x(), y).name()
                 for y in range(handle.top() + 4, handle.bottom() - 3)}
        track = {image.pixelColor(handle.center().x(), y).name() for y in range(handle.bottom() + 4, 236)}
        assert len(across | along) == 1 and len(track) == 1 and across != track
    finally:
        qapp.setStyleSheet("")
        qapp.setPalette(QPalette())
