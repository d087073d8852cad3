"""The picture of the connect dialog in docs/remote.md: the dialog against a real OpenSSH server
on 127.0.0.1 (tests/remote_box.py), its Test pressed and answered.

    python docs/connect_dialog_shot.py      # writes docs/img/connect-dialog.png (offscreen)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "connect-dialog.png"


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from remote_box import running_box

    with tempfile.TemporaryDirectory(prefix="fp16studio-shot-") as folder:
        folder = Path(folder)
        with running_box(folder) as box:
            # The user's ~/.ssh/config, as the dialog reads it: its hosts are offered.
            (folder / "me" / ".ssh").mkdir(parents=True)
            (folder / "me" / ".ssh" / "config").write_text(
                "Host box\n    HostName 127.0.0.1\nHost gpu1 lab-a100\nHost *.internal\n")
            os.environ.update(HOME=str(folder / "me"), FP16STUDIO_SSH_COMMAND=box.ssh_command)
            # The box's Python: a venv's python as a user names it (this checkout's, there).
            python = folder / "venvs" / "train" / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text(f'#!/bin/sh\nexec {box.python} "$@"\n')
            python.chmod(0o755)
            return shoot(str(python))


def shoot(python: str) -> int:
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtGui import QFont
    from PySide6.QtWidgets import QApplication

    from fp16studio.gui.connect_dialog import ConnectDialog
    from fp16studio.gui.theme import Theme

    app = QApplication(sys.argv[:1])
    app.setFont(QFont("DejaVu Sans", 9))
    Theme(app, "light")
    dialog = ConnectDialog(host="box", python=python)
    dialog.show()
    loop = QEventLoop()
    dialog.tested.connect(lambda _line: QTimer.singleShot(100, loop.quit))
    QTimer.singleShot(300_000, loop.quit)
    dialog.test()
    loop.exec()
    dialog.resize(620, dialog.sizeHint().height())
    app.processEvents()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    dialog.grab().save(str(OUT))
    print(f"{OUT}: {dialog.result.text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
