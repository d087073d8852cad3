"""The window's File menu and dialogs: open, save, export, report, recent files, and asking
before unsaved changes are discarded. A mixin of MainWindow, which provides `controller`,
`form` and the panels; the work itself is the SessionController's."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from fp16studio import __version__


# What to do with unsaved changes (`_ask_unsaved`).
SAVE, DISCARD, CANCEL = "save", "discard", "cancel"


def settings() -> QSettings:
    """The window's own settings (theme, last folder), beside the sessions' config files."""
    from fp16studio.core.common.config_folder import config_dir

    return QSettings(str(config_dir() / "window.ini"), QSettings.Format.IniFormat)


class FileActions:
    def new_pipeline(self) -> bool:
        """Start over with a blank pipeline; unsaved changes go only after the user agrees."""
        if not self._may_discard():
            return False
        self.controller.new_pipeline()
        self.form.model_picker.setFocus()
        return True

    def _may_discard(self) -> bool:
        """Unsaved changes may go: there are none, or the user saved them (Save; a Save As
        dialog cancelled or a failed save keeps them), or chose Discard. Cancel keeps them."""
        if not self.controller.dirty:
            return True
        what = ("changes" if not self.controller.undo_stack.isClean()
                else "a benchmark's figures")
        answer = self._ask_unsaved(
            "Save changes?", f"This pipeline has {what} that are not saved. Save them first?")
        if answer == SAVE:
            return self.save_session()
        return answer == DISCARD

    def _ask_unsaved(self, title: str, text: str) -> str:
        """SAVE, DISCARD or CANCEL (also Escape and closing the dialog)."""
        buttons = QMessageBox.StandardButton
        box = QMessageBox(QMessageBox.Icon.Question, title, text,
                          buttons.Save | buttons.Discard | buttons.Cancel, self)
        box.setDefaultButton(buttons.Save)
        box.setEscapeButton(buttons.Cancel)
        box.exec()
        answer = box.standardButton(box.clickedButton()) if box.clickedButton() else buttons.Cancel
        return {buttons.Save: SAVE, buttons.Discard: DISCARD}.get(answer, CANCEL)

    def _open_dialog(self):
        from fp16studio.core.spec.session import FILE_FILTER

        path, _ = QFileDialog.getOpenFileName(self, "Open spec or session", self._dialog_dir(), FILE_FILTER)
        if path and self._may_discard():
            self._remember_dir(path)
            self.controller.open_path(path)

    def _trace_dialog(self):
        """File → Trace Script…: a .py file, then its command-line arguments (may be empty)
        and the launcher of a run on many processes (may be empty)."""
        start = self._dialog_dir() if self.browse.host is None else ""   # the box's: its home
        self.browse.choose(self, "Trace a Python script", start, self._trace_chosen,
                           suffixes=(".py",), name_filter="Python scripts (*.py);;All files (*)",
                           sendable=True)

    def _trace_chosen(self, path: str):
        from .trace_dialog import TraceDialog

        if self.browse.host is None:   # a box's folder is no place to open this computer's dialogs
            self._remember_dir(path)
        dialog = TraceDialog(Path(path).name, self)
        if not dialog.exec():
            return
        try:
            args, launch = dialog.values()
        except ValueError as exc:   # an unclosed quote
            self._warn("Cannot read the arguments", str(exc))
            return
        self.open_script(path, args, launch)

    def _fill_recent(self):
        from fp16studio.core.spec.session import recent_files

        self.recent_menu.clear()
        files = recent_files()
        for path in files:
            action = self.recent_menu.addAction(path.name)
            action.setToolTip(str(path))
            action.triggered.connect(lambda _c=False, p=str(path): self._may_discard() and self.controller.open_path(p))
        if not files:
            self.recent_menu.addAction("No recent files").setEnabled(False)

    def save_session(self, ask: bool = False, path: str | None = None) -> bool:
        from fp16studio.core.spec.session import FILE_FILTER, SUFFIX

        if self.spec is None:
            return False
        current = self.session_path
        if path is None and (ask or current is None or current.suffix != SUFFIX):
            suggested = str(Path(self._dialog_dir()) / f"pipeline{SUFFIX}")
            path, _ = QFileDialog.getSaveFileName(self, "Save session", suggested, FILE_FILTER)
            if not path:
                return False
            self._remember_dir(path)
        return self.controller.save(path or str(current))

    def export_script(self, path, overwrite: bool = False) -> bool:
        """Write the exported script (in the engine); `exportFinished(path)` once written. An
        existing file is replaced only after the user agrees (or with overwrite=True)."""
        path = Path(path)
        if path.exists() and not overwrite and not self._confirm(
                "Replace file?", f"{path.name} already exists. Replace it with the exported script?"):
            return False
        return self.controller.export_script(str(path))

    def _export_dialog(self):
        name = Path(self.spec.model).name.replace("-", "_") if self.spec and self.spec.model else "pipeline"
        path, _ = QFileDialog.getSaveFileName(self, "Export script", str(Path(self._dialog_dir()) / f"{name}.py"),
                                              "Python script (*.py)")
        if path:   # the dialog asked before replacing an existing file
            self._remember_dir(path)
            self.export_script(path, overwrite=True)

    def _report_dialog(self):
        if not self.diagnosis_doc:
            self._warn("Nothing to report", "Run a diagnosis first.")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export HTML report",
                                              str(Path(self._dialog_dir()) / "fp16studio-report.html"),
                                              "HTML (*.html)")
        if path:
            self._remember_dir(path)
            self.controller.write_report(path)

    def _dialog_dir(self) -> str:
        """Where file dialogs open: the last folder used in one, else the session's, else here."""
        last = settings().value("last_dir", "")
        if last and Path(last).is_dir():
            return last
        return str(self.session_path.parent) if self.session_path else os.getcwd()

    @staticmethod
    def _remember_dir(path: str):
        settings().setValue("last_dir", str(Path(path).parent))

    def _confirm(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def _warn(self, title: str, text: str):
        if not self.isVisible():
            return
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
        box.setTextFormat(Qt.TextFormat.PlainText)   # an error's text is never read as markup
        box.exec()

    def _about(self):
        import html

        import PySide6
        from PySide6.QtCore import qVersion

        from fp16studio.core.demo.pipelines import DEMOS

        env = self.diagnosis.environment.to_json() if self.diagnosis else {}
        engine = ", ".join(f"{k} {v}" for k, v in env.items() if isinstance(v, (str, int, float)))
        demos = "".join(f"<li><b>{name}</b>: {html.escape(text)}</li>" for name, text in DEMOS.items())
        QMessageBox.about(self, "About fp16studio", (
            f"<h3>fp16studio {__version__}</h3>"
            "<p>Find and fix half-precision (FP16/BF16) problems in Hugging Face pipelines.</p>"
            f"<p>PySide6 {PySide6.__version__}, Qt {qVersion()}<br>"
            f"{html.escape(engine) or 'Engine versions appear after the first run.'}</p>"
            f"<p>Demo pipelines (Help → Demo Pipelines):</p><ul>{demos}</ul>"))
