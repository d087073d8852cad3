"""File → Trace Script…'s second step: the script's own arguments, and optionally the launcher
that starts it on many processes (`torchrun --nproc-per-node 2`, `accelerate launch`), as
`fp16studio trace --launch` takes it: each rank traced, the ranks shown in the rank picker."""

from __future__ import annotations

import shlex

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit


class TraceDialog(QDialog):
    """Arguments and launcher for one script; `values()` → (args, launch or None), or a
    ValueError with the field's reason (an unclosed quote)."""

    def __init__(self, script_name: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Trace {script_name}")
        form = QFormLayout(self)
        self.args = QLineEdit()
        self.args.setPlaceholderText("as on a command line; may be empty")
        self.launch = QLineEdit()
        self.launch.setPlaceholderText("empty: one process; e.g. torchrun --nproc-per-node 2")
        form.addRow(QLabel(f"Arguments for {script_name}:"), self.args)
        form.addRow(QLabel("Launch with:"), self.launch)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def values(self) -> tuple[list[str], str | None]:
        args = shlex.split(self.args.text())
        launch = self.launch.text().strip()
        if launch:
            shlex.split(launch)     # the launcher is read the same way, so it fails here first
        return args, launch or None
