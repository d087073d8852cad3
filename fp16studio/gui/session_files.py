"""The files side of the SessionController: demo, open, new, save, export, report, the crash
copy (autosave) and shutting down. A mixin of SessionController, which provides `state`,
`worker`, `undo_stack` and the signals; what goes in a file comes from the SessionState."""

from __future__ import annotations

from pathlib import Path

from fp16studio.core import InputError, PipelineSpec
from .worker import Job


class SessionFiles:
    def load_demo(self, name: str | None = None):
        from fp16studio.core.demo.pipelines import DEMO_DEFAULT

        name = name or DEMO_DEFAULT
        self.logged.emit("info", f"Opening the demo pipeline {name!r}.")
        self._say("Preparing the demo pipeline…")
        self.worker.submit(Job("demo", "demo", (name,), on_result=self.start_with,
                               on_error=self._on_open_error))

    def open_path(self, path: str):
        """Open a spec, a session or `demo:NAME`. Files are this computer's: read by the local
        engine, or here while the engine runs on a box (which has its own files); a demo is
        made by the engine (it imports torch). A session made with another engine than this
        one is adopted once `engine_for` agreed (its paths are that machine's)."""
        def done(opened) -> bool:
            demo = str(path).startswith("demo:")
            if not demo and not self._engine_agreed(opened, Path(path).name):
                self._say("")
                return False
            local = None if demo else Path(path).absolute()
            self.start_with(opened.spec, opened.diagnosis, opened.bench, local)
            if self.state.dropped:   # a crafted or damaged file: its spec opens all the same
                note = f"Opened {Path(path).name} without its saved {self.state.dropped}."
                self.logged.emit("warning", note)
                self._say(note)
            else:
                self.logged.emit("info", f"Opened {path}")
            return True
        self._say(f"Opening {path}…")
        if self.engine_host is not None and not str(path).startswith("demo:"):
            from fp16studio.core.spec.session import open_session

            try:
                session = open_session(path)
            except InputError as exc:
                return self._on_open_error(str(exc), "")
            if done(session) and session.host is None:
                self._warn_files_here(session.spec, Path(path).name)
            return
        self.worker.submit(Job("open", "open", (path,), on_result=done, on_error=self._on_open_error))

    def _warn_files_here(self, spec: PipelineSpec, name: str):
        """A spec written here, opened while the engine runs on a box: the box reads the paths
        it names as its own, and the files here that they name never reach it."""
        named = (spec.model, spec.dataset, (spec.preprocess or "").rpartition(":")[0])
        here = [value for value in named if value and spec.local_path(value) is not None]
        if here:
            self.logged.emit("warning", f"{name} names files of this computer "
                             f"({', '.join(here)}); {self.engine_host} reads these paths on "
                             "its own disk: choose its files with Browse….")

    def _engine_agreed(self, opened, name: str) -> bool:
        """A session made with an engine on a host (`opened.host`, `opened.remote_python`) names
        that machine's paths: unless that engine is this one, `engine_for` offers it (and may
        switch to it). False: the user cancelled the open."""
        from fp16studio.engine.transport import DEFAULT_REMOTE_PYTHON

        made_with = ((opened.host, opened.remote_python or DEFAULT_REMOTE_PYTHON)
                     if opened.host else None)
        return made_with is None or made_with == self.engine_where or self.engine_for(
            *made_with, name)

    def new_pipeline(self):
        """A blank pipeline: every key at its default, the model to be chosen."""
        self.start_with(PipelineSpec(model="", dataset="synthetic"))
        self.logged.emit("info", "New pipeline.")

    def _on_open_error(self, message, detail):
        self.state.run_when_ready = False
        self._update_busy()
        self.logged.emit("error", message + (f"\n{detail}" if detail else ""))
        self.diagnosisFailed.emit(message)
        self.warned.emit("Cannot open", message)

    def save(self, path) -> bool:
        """Save the session to `path`. On failure (a read-only or full disk) the user is told
        and the session stays unsaved: the title keeps its dot."""
        from fp16studio.core.spec.session import save_session

        try:
            saved = save_session(self._session(with_path=False), path)
        except InputError as exc:
            self.logged.emit("error", str(exc))
            self.warned.emit("Cannot save", str(exc))
            return False
        self.state.saved(saved.path)
        self.undo_stack.setClean()
        self.logged.emit("info", f"Saved session {saved.path}")
        kept = saved.kept_as
        if kept is not None and kept.name != f"{saved.path.name}.bak":
            note = (f"Saved; the previous {saved.path.name} is kept as {kept.name}: "
                    f"{saved.path.name}.bak holds a file fp16studio did not write, which stays.")
            self.logged.emit("warning", note)
            self._say(note)
        self._emit_title()
        return True

    def export_script(self, path: str) -> bool:
        """Render the exported script in the engine (it reads the dataset, on the box when the
        engine runs on one) and write it here."""
        if self.spec is None or not self._has_model():
            return False

        def done(text):
            from fp16studio.core.common.files import write_text_atomic

            try:
                write_text_atomic(Path(path), text)
            except (InputError, OSError) as exc:
                return failed(str(exc), "")
            self.logged.emit("info", f"Exported script {path}")
            self.exportFinished.emit(str(path))

        def failed(message, detail):
            self.logged.emit("error", message + (f"\n{detail}" if detail else ""))
            self.warned.emit("Cannot export", message)
        self.worker.submit(Job("export", "export", (self.spec,), on_result=done, on_error=failed))
        return True

    def write_report(self, path) -> bool:
        from fp16studio.core.common.files import write_text_atomic
        from fp16studio.core.present.html import render_report

        try:
            write_text_atomic(Path(path), render_report(self.diagnosis, self.bench_result))
        except InputError as exc:
            self.warned.emit("Cannot write the report", str(exc))
            return False
        self.logged.emit("info", f"Wrote report {path}")
        return True

    def _session(self, with_path=True):
        from fp16studio.core.spec.documents import Session

        host, python = self.engine_where or (None, None)
        return Session(self.spec, self.state.saved_findings(), self.state.saved_bench(),
                       path=self.state.path if with_path else None, host=host,
                       remote_python=python)

    def autosave(self):
        """The crash copy of this window's session, written in order on a thread of its own: a
        file written on the GUI thread stalled it 10-100 ms on a busy disk. A blank pipeline
        has none: its spec (no model yet) could not be read back."""
        from fp16studio.core.spec.session import clear_autosave

        if self.spec is None or self._closing:
            return
        if self.state.missing():
            self._crash_copies.submit(clear_autosave, self.autosave_owner)
        else:
            self._crash_copies.submit(self._write_crash_copy, self._session())

    def _write_crash_copy(self, session):
        from fp16studio.core.spec.session import autosave

        try:
            autosave(session, self.autosave_owner)
        except InputError as exc:   # said in the Log (a queued signal from this thread)
            self.logged.emit("warning", f"Autosave failed: {exc}")

    def shutdown(self) -> bool:
        """Stop the worker and the engine, and drop this window's crash copy (a clean close)."""
        from fp16studio.core.spec.session import clear_autosave

        self._closing = True
        stopped = self.worker.shutdown()
        self._crash_copies.shutdown()   # what is being written first, then dropped
        clear_autosave(self.autosave_owner)
        return stopped
