"""Help › Getting Started: the loop a newcomer goes through, a picture per step, taken by
docs/screenshots.py on a real X server and shipped in the package's resources (help/).

pick a pipeline → Run → the tensor tree → the findings → a fix → Compare → Export Script.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout

from fp16studio.resource_paths import resource

PICTURE_WIDTH = 720   # as docs/screenshots.py scales them: the dialog fits a 1024x700 screen

# (title, what to do and what it shows, picture in resources/help/)
STEPS = (
    ("Pick a pipeline",
     "Type a Hub id or a local folder in Model and a dataset in Dataset, or open a demo from "
     "Help › Demo Pipelines. Every field says what it takes when you hover it.",
     "start-1-pick.png"),
    ("Run",
     "Run (Ctrl+R) loads the model, takes one batch and runs it with every module watched.",
     "start-2-run.png"),
    ("Read the tree and the findings",
     "The Tensors tab shows each module and tensor with its dtype and device; a chip marks "
     "what went wrong. The Findings panel lists each problem, worst first: what happened, the "
     "evidence, and its fixes.",
     "start-2-run.png"),
    ("Apply a fix",
     "Click a fix: it edits the spec (the Changes tab shows how) and runs again. Undo brings "
     "the previous spec back with its results.",
     "start-3-fix.png"),
    ("Compare",
     "Benchmark (Ctrl+B) times float32, float16 and bfloat16 on your batch; Compare with "
     "float32 (Ctrl+D) shows where, module by module, the half run parts from float32.",
     "start-4-compare.png"),
    ("Export",
     "Export Script writes the fixed pipeline as a Python script that runs without "
     "fp16studio: the fixes are code in it.",
     "start-5-export.png"),
)


def page_html() -> str:
    parts = ["<h2>Getting started</h2><p>The loop: pick a pipeline, Run, read the tree and "
             "the findings, apply a fix, compare, export.</p>"]
    for number, (title, text, picture) in enumerate(STEPS, 1):
        url = QUrl.fromLocalFile(str(resource("help", picture))).toString()
        parts.append(f"<h3>{number}. {html.escape(title)}</h3><p>{html.escape(text)}</p>"
                     f'<p><img src="{html.escape(url)}" width="{PICTURE_WIDTH}" '
                     f'alt="{html.escape(title)}"></p>')
    return "".join(parts)


class GettingStarted(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Getting Started — fp16studio")
        self.browser = QTextBrowser(openExternalLinks=True)
        self.browser.setHtml(page_html())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.browser, 1)
        layout.addWidget(buttons)
        # As wide as a picture and its margins, as tall as a 700-pixel screen leaves.
        self.resize(PICTURE_WIDTH + 70, 600)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
