"""Stylesheets, icons and the light/dark choice, all read from resources/ (via resource_paths).

The window follows the system colour scheme (QStyleHints.colorScheme) and restyles itself when
it changes. Line icons are drawn in the palette's button-text colour: the SVGs say `currentColor`,
which is replaced before rendering, so one file serves both themes; what shows one (`set_icon`)
is given it again, in the new colour, whenever the theme switches.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QObject, QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication, QLineEdit, QProxyStyle, QStyle

from fp16studio import resource_paths

ICON_SIZES = (16, 20, 24, 32, 48)
ICON_NAME = "iconName"   # the property that names an action's or a button's icon (set_icon)

# The application's Theme (app_theme).
_current: dict = {}


def resource(*parts: str) -> Path:
    return resource_paths.resource(*parts)


def system_scheme() -> str:
    """'dark' or 'light' as the platform reports it; light when it does not say."""
    scheme = QGuiApplication.styleHints().colorScheme()
    return "dark" if scheme == Qt.ColorScheme.Dark else "light"


def stylesheet(scheme: str) -> str:
    # url(...) in a stylesheet needs a real path; the files say @RESOURCES@ for this folder.
    text = resource_paths.stylesheet_file(scheme).read_text(encoding="utf-8")
    return text.replace("@RESOURCES@", resource_paths.resources_dir().as_posix())


def icon(name: str) -> QIcon:
    """The named icon from resources/icons, in the current palette's button-text colour."""
    return _icon(name, QGuiApplication.palette().color(QPalette.ColorRole.ButtonText).name())


def set_icon(target, name: str):
    """Give `target` (an action, a button, a menu) the named icon, and it again in the new
    colours whenever the theme switches."""
    target.setProperty(ICON_NAME, name)
    target.setIcon(icon(name))


def _recolour_icons():
    """Every icon that set_icon gave, and the line edits' clear buttons, in the palette's colours."""
    for window in QApplication.topLevelWidgets():
        for item in [window, *window.findChildren(QObject)]:
            name = item.property(ICON_NAME)
            if name:
                item.setIcon(icon(name))
        for edit in window.findChildren(QLineEdit):
            if edit.isClearButtonEnabled():   # its button made again, from _Style.standardIcon
                edit.setClearButtonEnabled(False)
                edit.setClearButtonEnabled(True)


class _Style(QProxyStyle):
    """Fusion, with the line edits' clear button drawn as a line icon in the palette's colour
    (Fusion's own is a dark grey disc, lost on a dark field)."""

    def standardIcon(self, which, option=None, widget=None):
        if which == QStyle.StandardPixmap.SP_LineEditClearButton:
            return icon("clear")
        return super().standardIcon(which, option, widget)


@lru_cache(maxsize=None)
def _icon(name: str, color: str) -> QIcon:
    svg = resource_paths.icon_file(name).read_text(encoding="utf-8")
    svg = svg.replace("currentColor", color)
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    result = QIcon()
    for size in ICON_SIZES:
        for ratio in (1, 2):
            pixmap = QPixmap(size * ratio, size * ratio)
            pixmap.fill(Qt.GlobalColor.transparent)
            painter = QPainter(pixmap)
            renderer.render(painter, QRectF(0, 0, size * ratio, size * ratio))
            painter.end()
            pixmap.setDevicePixelRatio(ratio)
            result.addPixmap(pixmap)
    return result


def app_icon() -> QIcon:
    result = QIcon()
    for path in resource_paths.app_icon_files():
        if path.suffix == ".png":
            result.addFile(str(path))
    return result


CHOICES = ("system", "light", "dark")   # View → Theme; "system" follows the desktop


class Theme(QObject):
    """The current scheme, applied to the application (style, palette, stylesheet, icons) when it
    switches between light and dark: the system switched, or the user chose in View → Theme."""

    def __init__(self, app, scheme: str | None = None, parent=None):
        """`scheme` "light" or "dark" pins the theme (screenshots, the user's choice); None
        follows the system."""
        super().__init__(parent)
        self._app = app
        self.pinned = scheme is not None
        self.scheme = scheme or system_scheme()
        # Once: the style is the same in both schemes, and setting it again repolishes every
        # widget (a quarter of a switch's time).
        app.setStyle(_Style("Fusion"))
        self._apply()
        app.styleHints().colorSchemeChanged.connect(self._on_system_change)
        _current["theme"] = self

    @property
    def choice(self) -> str:
        return self.scheme if self.pinned else "system"

    def choose(self, choice: str):
        """Pin "light" or "dark", or follow the "system" again."""
        self.pinned = choice != "system"
        scheme = choice if self.pinned else system_scheme()
        if scheme != self.scheme:
            self.scheme = scheme
            self._apply()

    def _on_system_change(self, _scheme):
        scheme = system_scheme()
        if scheme != self.scheme and not self.pinned:
            self.scheme = scheme
            self._apply()

    def _apply(self):
        self._app.setPalette(_palette(self.scheme))
        self._app.setStyleSheet(stylesheet(self.scheme))
        _recolour_icons()


def app_theme(app) -> Theme:
    """The application's Theme (made by app.main), or a new one that follows the system."""
    theme = _current.get("theme")
    return theme if isinstance(theme, Theme) else Theme(app)


def _palette(scheme: str) -> QPalette:
    # Fusion draws from the palette; the stylesheet only refines. Keep both in step.
    colors = {
        "light": dict(window="#f4f5f7", base="#ffffff", alt="#f7f8fa", text="#1f2329",
                      button="#eceef1", highlight="#0072B2", mid="#c9ced6", disabled="#8a9099",
                      tooltip="#ffffff"),
        "dark": dict(window="#1e2126", base="#181a1e", alt="#1b1e22", text="#dfe3ea",
                     button="#2a2e35", highlight="#3a8fd6", mid="#3a3f47", disabled="#6b717b",
                     tooltip="#2a2e35"),
    }[scheme]
    p = QPalette()
    role = QPalette.ColorRole
    p.setColor(role.Window, QColor(colors["window"]))
    p.setColor(role.WindowText, QColor(colors["text"]))
    p.setColor(role.Base, QColor(colors["base"]))
    p.setColor(role.AlternateBase, QColor(colors["alt"]))
    p.setColor(role.Text, QColor(colors["text"]))
    p.setColor(role.Button, QColor(colors["button"]))
    p.setColor(role.ButtonText, QColor(colors["text"]))
    p.setColor(role.Highlight, QColor(colors["highlight"]))
    p.setColor(role.HighlightedText, QColor("#ffffff"))
    p.setColor(role.Mid, QColor(colors["mid"]))
    p.setColor(role.ToolTipBase, QColor(colors["tooltip"]))
    p.setColor(role.ToolTipText, QColor(colors["text"]))
    p.setColor(role.PlaceholderText, QColor(colors["disabled"]))
    p.setColor(role.Link, QColor(colors["highlight"]))
    for r in (role.Text, role.WindowText, role.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, r, QColor(colors["disabled"]))
    return p
