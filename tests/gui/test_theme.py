"""Stylesheets, icons and the palette module."""

from pathlib import Path

import pytest
from PySide6.QtGui import QPalette

from fp16studio.gui import palette, theme


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
