"""The status bar: the engine (this computer or a host, and its GPUs' memory, read there),
device, torch/transformers/CUDA versions, and memory.

Versions come from the engine's environment report (the GUI thread never imports torch); the
resident memory of the window and of the engine process (where the model lives) is sampled
here every few seconds with psutil, which is cheap once imported: its import (15-20 ms of CPU)
runs on the window's import thread, once the window has shown. The message and the versions
shrink to an ellipsis (the whole text in their tooltip) rather than widen the window.
"""

from __future__ import annotations

import os
import threading

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar

from fp16studio.core.present import vocabulary
from .fit import ElidedLabel

MEMORY_INTERVAL_MS = 2000
THIS_COMPUTER = "This computer"


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
        self.message = ElidedLabel("")   # the controller says what it does from the start
        self.engine = ElidedLabel(THIS_COMPUTER)   # where the engine runs, and its GPUs
        self.device = QLabel("device: —")
        self.versions = ElidedLabel("torch not loaded yet")
        self.memory = ElidedLabel("")
        bar.addWidget(self.message, 1)
        for label in (self.engine, self.device, self.versions, self.memory):
            bar.addPermanentWidget(label)
        self._gpu = ""
        self._env: dict = {}
        self._device: str | None = None
        self._engine_pid = lambda: None
        self._host: str | None = None     # the engine's host; None: this computer
        self._psutil = self._process = None
        self._loading: threading.Thread | None = None   # psutil's import (start_sampling)
        self._timer = QTimer(bar, interval=MEMORY_INTERVAL_MS, timeout=self._sample)

    def start_sampling(self, loading: threading.Thread):
        """Show the memory from now on, every few seconds, from the first tick after `loading`
        (a thread that imports psutil, import_meanwhile: the window's start does without it)."""
        self._loading = loading
        self._timer.start()

    def set_device(self, device: str | None):
        """Where the latest result ran (any run: a diagnosis, a benchmark, a comparison, a
        plan), with the GPU's name once the engine has said it."""
        self._device = device
        name = self._env.get("gpu") if device and device.startswith("cuda") else None
        self.device.setText(f"device: {device or '—'}" + (f" ({name})" if name else ""))

    def set_environment(self, env: dict, device: str | None = None, gpu_memory: int | None = None):
        """Show the engine's environment report (Diagnosis.environment) and the GPU's memory."""
        if env is None:
            return   # not reported yet (a new session announces every field of the state)
        self._env = env
        self.set_device(device or self._device)
        parts = [f"torch {env['torch']}" if env.get("torch") else None,
                 f"transformers {env['transformers']}" if env.get("transformers") else None,
                 f"CUDA {env['cuda']}" if env.get("cuda") else "no CUDA"]
        self.versions.setText(" · ".join(p for p in parts if p))
        self._gpu = f" · GPU {vocabulary.size(gpu_memory)} reserved" if gpu_memory else ""
        self._sample()

    def put_engine_selector(self, selector):
        """The Engine selector, first of the permanent widgets (after the message, index 0)."""
        self.bar.insertPermanentWidget(1, selector)

    def set_engine(self, host: str | None):
        """The engine now runs on `host` (None: this computer): what was said of the last one
        goes until its report comes (set_engine_report)."""
        self._host, self._env = host, {}
        self.engine.setText(host or THIS_COMPUTER)
        self.versions.setText("torch not loaded yet")
        self._sample()

    def set_engine_report(self, report: dict):
        """The engine's report, read where it runs: its host, torch, CUDA and GPUs."""
        self._env = {**self._env, **{key: report.get(key) for key in
                                     ("torch", "transformers", "cuda")}}
        self.set_environment(self._env)
        gpus = gpus_summary(report.get("gpus") or [])
        self.engine.setText(" · ".join(p for p in (self._host or THIS_COMPUTER, gpus) if p))

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
