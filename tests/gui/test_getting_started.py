"""Help › Getting Started (issue 43 item 6): the loop in pictures, each step's picture found
where the installed package keeps its resources, and the page fits a 1024x700 screen."""

import re

from PySide6.QtCore import QUrl
from PySide6.QtGui import QImage

from fp16studio.gui.getting_started import PICTURE_WIDTH, STEPS, GettingStarted, page_html
from fp16studio.resource_paths import resource


def test_the_page_walks_the_loop_in_order_with_a_picture_per_step():
    titles = [title for title, _, _ in STEPS]
    loop = ("Pick", "Run", "tree", "fix", "Compare", "Export")
    positions = [next(i for i, title in enumerate(titles) if word in title) for word in loop]
    assert positions == sorted(positions)
    sources = re.findall(r'<img src="([^"]+)"', page_html())
    assert len(sources) == len(STEPS)
    for source in sources:
        image = QImage(QUrl(source).toLocalFile())
        assert not image.isNull(), source                     # shipped, and a picture
        assert image.width() == PICTURE_WIDTH, source          # as docs/screenshots.py scales them
    assert {QUrl(s).toLocalFile() for s in sources} == {str(resource("help", p)) for _, _, p in STEPS}


def test_the_dialog_fits_the_smallest_screen(qtbot):
    dialog = GettingStarted()
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.width() <= 1024 and dialog.height() <= 700 - 40
    assert dialog.browser.document().toPlainText().startswith("Getting started")


def test_the_help_menu_opens_it(qtbot):
    from fp16studio.gui import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    assert window.act_getting_started in help_menu.actions()
    window.act_getting_started.trigger()
    assert any(isinstance(w, GettingStarted) and w.isVisible() for w in window.children())
