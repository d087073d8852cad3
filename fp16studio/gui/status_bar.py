"""The status bar: the engine (this computer or a host, and its GPUs' memory, read there),
device, torch/transformers/CUDA versions, and memory.

Versions come from the engine's environment report (the GUI thread never imports torch); the
resident memory of the window and of the engine process (where the model lives) is sampled
here every few seconds with psutil, which is cheap once imported: its import (15-20 ms of CPU)
runs on the window's import thread, once the window has shown. The versions and the memory
shrink to an ellipsis (the whole text in their tooltip) before the message does: the message is
what the window says to do next, whole up to MESSAGE_WHOLE_PX. Where the engine runs is said
once, by the Engine selector; the engine label beside it adds only what the selector does not
(the GPUs there), and is hidden while it has nothing to add.
"""

from __future__ import annotations

import dataclasses
import os

from PySide6.QtCore import QSize, QTimer
from PySide6.QtWidgets import QLabel, QStatusBar

from fp16studio.core.diagnostics.report import Environment
from fp16studio.core.present import vocabulary
from .fit import ElidedLabel
from .later_pages import Loading

MEMORY_INTERVAL_MS = 2000
THIS_COMPUTER = "This computer"
# The message keeps its whole text up to this width while the labels beside it shrink; a longer
# one is elided there (the whole of it on hover). At 1024 wide the bar then still holds the
# Engine selector, the device and a few letters of each of the other labels.
MESSAGE_WHOLE_PX = 420


class StatusMessage(ElidedLabel):
    """The status message: never shrunk below its text (up to MESSAGE_WHOLE_PX) to make room for
    the labels beside it; a status bar's layout takes the room from those instead."""

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        margins = self.contentsMargins()
        whole = self.fontMetrics().horizontalAdvance(self.text()) + margins.left() + margins.right()
        return QSize(max(hint.width(), min(whole, MESSAGE_WHOLE_PX)), hint.height())

    def setText(self, text: str):
        if text != self.text():
            super().setText(text)
            self.updateGeometry()   # its least width follows its text


class ShownWhenSaid(ElidedLabel):
    """A label shown while it has something to say (an empty one would leave a gap in the bar)."""

    def setText(self, text: str):
        super().setText(text)
        self.setVisible(bool(text))


def engine_summary(report: dict) -> str:
    """An engine report (engine.lookups.engine_report) in one line: its machine's torch, CUDA
    and each GPU with its memory used and total."""
    parts = [f"fp16studio {report['fp16studio']}" if report.get("fp16studio") else None,
             f"torch {report['torch']}" if report.get("torch") else None,
             f"CUDA {report['cuda']}" if report.get("cuda") else "no CUDA"]
    return " · ".join(p for p in [*parts, gpus_summary(report.get("gpus") or [])] if p)


def gpus_summary(gpus: list[dict]) -> str:
    return ", ".join(
        f"GPU {index} {gpu.get('name') or '?'}"
        + (f" {vocabulary.size(gpu['used'])}/{vocabulary.size(gpu['total'])}"
           if gpu.get("total") else "")
        for index, gpu in enumerate(gpus))


class StatusInfo:
    def __init__(self, bar: QStatusBar):
        self.bar = bar
        self.message = StatusMessage("")   # the controller says what it does from the start
        self.engine = ShownWhenSaid(THIS_COMPUTER)   # where the engine runs (until a selector does), its GPUs
        self.device = QLabel("device: —")
        self.versions = ElidedLabel("torch not loaded yet")
        self.memory = ElidedLabel("")
        bar.addWidget(self.message, 1)
        for label in (self.engine, self.device, self.versions, self.memory):
            bar.addPermanentWidget(label)
        self._gpu = ""
        self._env = Environment()
        self._device: str | None = None
        self._engine_pid = lambda: None
        self._host: str | None = None     # the engine's host; None: this computer
        self._selector_says_host = False   # an Engine selector beside the label names the host
        self._psutil = self._process = None
        self._loading: Loading | None = None   # psutil's import (start_sampling)
        self._timer = QTimer(bar, interval=MEMORY_INTERVAL_MS, timeout=self._sample)

    def start_sampling(self, loading: Loading):
        """Show the memory from now on, every few seconds, from the first tick after `loading`
        (psutil's import, later_pages.ImportsMeanwhile: the window's start does without it)."""
        self._loading = loading
        self._timer.start()

    def set_device(self, device: str | None):
        """Where the latest result ran (any run: a diagnosis, a benchmark, a comparison, a
        plan), with the GPU's name once the engine has said it."""
        self._device = device
        name = self._env.gpu if device and device.startswith("cuda") else None
        self.device.setText(f"device: {device or '—'}" + (f" ({name})" if name else ""))

    def set_environment(self, env: Environment | None, device: str | None = None,
                        gpu_memory: int | None = None):
        """Show the engine's environment report (Diagnosis.environment) and the GPU's memory."""
        if env is None:
            return   # not reported yet (a new session announces every field of the state)
        self._env = env
        self.set_device(device or self._device)
        parts = [f"torch {env.torch}" if env.torch else None,
                 f"transformers {env.transformers}" if env.transformers else None,
                 f"CUDA {env.cuda}" if env.cuda else "no CUDA"]
        self.versions.setText(" · ".join(p for p in parts if p))
        self._gpu = f" · GPU {vocabulary.size(gpu_memory)} reserved" if gpu_memory else ""
        self._sample()

    def put_engine_selector(self, selector):
        """The Engine selector, first of the permanent widgets (after the message, index 0): it
        names where the engine runs, so the engine label no longer does."""
        self.bar.insertPermanentWidget(1, selector)
        self._selector_says_host = True
        self._say_engine("")

    def set_engine(self, host: str | None):
        """The engine now runs on `host` (None: this computer): what was said of the last one
        goes until its report comes (set_engine_report)."""
        self._host, self._env = host, Environment()
        self._say_engine("")
        self.versions.setText("torch not loaded yet")
        self._sample()

    def set_engine_report(self, report: dict):
        """The engine's report, read where it runs: its host, torch, CUDA and GPUs."""
        # The engine's report is the engine's own object (engine.lookups.engine_report).
        self._env = dataclasses.replace(self._env, **{key: report.get(key) for key in
                                                      ("torch", "transformers", "cuda")})
        self.set_environment(self._env)
        self._say_engine(gpus_summary(report.get("gpus") or []))

    def _say_engine(self, gpus: str):
        """The engine label: its host unless the selector names it, then its GPUs; hidden when
        that is nothing."""
        host = None if self._selector_says_host else self._host or THIS_COMPUTER
        self.engine.setText(" · ".join(p for p in (host, gpus) if p))

    def watch_engine(self, pid):
        """`pid()`: the engine process's id or None; its memory is shown beside the window's."""
        self._engine_pid = pid

    def _sample(self):
        if self._loading is None or self._loading.is_alive():
            return   # not sampling yet, or psutil still being imported
        if self._process is None:
            import psutil

            self._psutil, self._process = psutil, psutil.Process(os.getpid())
        window = self._process.memory_info().rss
        engine = self._engine_rss()
        text = f"RAM {vocabulary.size(window)}" if engine is None else (
            f"RAM engine {vocabulary.size(engine)} · window {vocabulary.size(window)}")
        self.memory.setText(text + self._gpu)

    def _engine_rss(self) -> int | None:
        pid = self._engine_pid()
        if pid is None or self._host is not None:   # a box's engine: its pid here is ssh's
            return None
        try:
            return self._psutil.Process(pid).memory_info().rss
        except self._psutil.Error:  # ended or restarting between the two calls
            return None
