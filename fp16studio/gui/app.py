"""Entry point of the desktop app: `fp16studio gui [SPEC]` calls `main([SPEC])`."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fp16studio gui", description="Open the fp16studio window.")
    parser.add_argument("spec", nargs="?", help="a spec or session file, or demo:NAME (default: the demo)")
    args = parser.parse_args(sys.argv[1:] if argv is None else [a for a in argv if a is not None])
    from fp16studio.display import why_no_window

    missing = why_no_window()
    if missing:  # before Qt, which would abort the process over it
        print(f"fp16studio: {missing}", file=sys.stderr)
        return 2

    from PySide6.QtWidgets import QApplication, QMessageBox

    from fp16studio.desktop import APP_ID

    from .theme import Theme, app_icon

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("fp16studio")
    app.setOrganizationName("fp16studio")
    app.setDesktopFileName(APP_ID)  # matches the window to its launcher
    app.setWindowIcon(app_icon())
    from .file_actions import settings
    from .main_window import MainWindow

    choice = settings().value("theme", "system")   # View → Theme, as the user left it
    Theme(app, choice if choice in ("light", "dark") else None)   # app_theme(app) from now on

    spec = args.spec
    restored = None
    if spec is None:
        from fp16studio.core.spec.session import clear_orphan_autosaves, restore_autosave

        restored = restore_autosave()
        if restored is not None:
            answer = QMessageBox.question(
                None, "Restore session?",
                "fp16studio did not close cleanly last time. Restore the pipeline you were working on?")
            if answer != QMessageBox.StandardButton.Yes:
                restored = None
            # Asked once: a restored pipeline is autosaved again under the new window's name.
            clear_orphan_autosaves()
    window = MainWindow(restored.spec if restored else spec)
    if restored is not None:
        window.restore_session(restored)
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
