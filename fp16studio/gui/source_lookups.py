"""What the pickers and the Dataset tab show about the spec's sources, looked up as it changes.

Look-ups are not runs: the cache scan, model info and Hub search need no torch and run on the
window's thread pool; the dataset preview reads rows with `datasets`, so it is an engine task,
cancellable and superseded by a newer one. Either way the latest look-up wins. While the engine
runs on a box (`on_host`), the cache scan and model info are the box's: engine tasks too.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from fp16studio.core.present.vocabulary import size
from fp16studio.engine import lookups
from .lookup_pool import LookupPool
from .worker import Job


class SourceLookups(QObject):
    def __init__(self, form, preview, worker, log, parent=None):
        super().__init__(parent)
        self.form, self.preview, self.worker, self.log = form, preview, worker, log
        self.pool = LookupPool(self)
        self._last = None
        self.host: str | None = None   # the engine's host: its files are the ones looked up
        for picker, repo_type in ((form.model_picker, "model"), (form.dataset_picker, "dataset")):
            picker.searchRequested.connect(lambda query, p=picker, t=repo_type: self.search(query, t, p))
        form.modelChanged.connect(self.model_info)
        form.datasetChanged.connect(self.dataset_preview)

    def _allow_hub_search(self, allowed: bool):
        self.form.model_picker.hub_search = self.form.dataset_picker.hub_search = allowed

    def spec_changed(self, spec):
        """Look up what changed: the model's checkpoint, the dataset's rows."""
        old, self._last = self._last, spec
        if old is None or (old.model, old.revision) != (spec.model, spec.revision):
            if spec.model:
                self.model_info(spec)
            else:   # a blank pipeline: no size line of the previous model
                self.pool.submit("model-info", _nothing)
                self.form.model_picker.set_info("")
        if old is None or (old.dataset, old.dataset_config, old.split) != (
                spec.dataset, spec.dataset_config, spec.split):
            self.dataset_preview(spec)

    def start(self):
        """The look-ups that need no spec (once the window shows: their imports on the pool's
        threads take the GIL from the window's first paint): what the cache holds, and whether
        the Hub may be searched."""
        self.pool.submit("hub", _hub_allowed, on_result=self._allow_hub_search)
        self.scan_cache()

    def on_host(self, host: str | None):
        """The engine now runs on `host` (None: this computer): look the sources up there."""
        self.host = host
        self.scan_cache()
        if self._last is not None and self._last.model:
            self.model_info(self._last)

    def _look_up(self, kind, fn, args=(), on_result=None, on_error=None):
        """On the pool here, or in the engine on the box (where the files are)."""
        if self.host is None:
            return self.pool.submit(kind, fn, args, on_result=on_result, on_error=on_error)
        self.worker.submit(Job(kind, f"{fn.__module__}:{fn.__name__}", args, supersede=True,
                               on_result=on_result,
                               on_error=on_error and (lambda message, _detail: on_error(message))))

    def scan_cache(self):
        def done(found):
            self.form.model_picker.set_cached(found["models"])
            self.form.dataset_picker.set_cached(found["datasets"])
        self._look_up("cache", lookups.scan_cache, on_result=done,
                      on_error=lambda m: self.log("warning", f"Cache scan: {m}"))

    def search(self, query: str, repo_type: str, picker):
        self.pool.submit(f"search-{repo_type}", lookups.hub_search, (query, repo_type),
                         on_result=picker.add_found)

    def model_info(self, spec):
        picker = self.form.model_picker

        def done(info):
            dtypes = ", ".join(f"{d} ×{n}" for d, n in sorted(info["dtypes"].items(), key=lambda x: -x[1]))
            picker.set_info(f"{size(info['bytes'])} · {info['format']}" + (f" · {dtypes}" if dtypes else ""),
                            info["folder"])
        self._look_up("model-info", lookups.model_info, (spec,), on_result=done, on_error=picker.set_info)

    def dataset_preview(self, spec):
        def done(preview):
            self.preview.set_preview(preview)
            self.form.set_dataset_choices(preview.columns, preview.splits, preview.roles,
                                          preview.configs)
            self.form.dataset_picker.set_info(
                f"{len(preview.columns)} columns" if preview.columns else preview.note)

        def failed(message, _detail):
            self.preview.show_note(message)
            self.form.dataset_picker.set_info(message)
        self.worker.submit(Job("preview", "preview", (spec,), supersede=True,
                               on_result=done, on_error=failed))

    def shutdown(self):
        self.pool.shutdown()


def _hub_allowed() -> bool:
    """Whether the pickers may search the Hub (not when offline is asked for). On the pool's
    thread: the Hub module imports an HTTP client."""
    from fp16studio.core.hf.hub import offline_requested

    return not offline_requested()


def _nothing():
    """Supersedes a pending look-up whose answer no longer belongs to the spec."""
