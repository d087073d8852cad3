"""The named tasks the engine process runs for the window (Qt-free; heavy imports inside).

Adding a task is one function here, decorated with `@task("name")`. A task that takes
`progress` and `cancel` gets them (a run: its progress shows, Cancel reaches it); one that takes
`on_sample` streams samples. Its annotations say what it takes and returns (`TaskTypes`): those
travel as the codec's documents of those types (core/common/codec.py), unannotated ones as plain
JSON, never a tensor or a module.

The engine keeps the last loaded model warm (core.run.warm): a run whose loading keys did not
change (a fix that casts inputs, a new batch size) reuses its weights.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import typing
from dataclasses import dataclass
from typing import Any, Callable

from fp16studio.core.common.codec import Document, decode, encoder
from fp16studio.core.diagnostics.findings import Finding
from fp16studio.core.diagnostics.report import Diagnosis
from fp16studio.core.precision.bench import BenchResult
from fp16studio.core.precision.drift import DriftResult
from fp16studio.core.precision.fp8_plan import Fp8Plan
from fp16studio.core.script.proof import FixedCopy, write_fixed_copy
from fp16studio.core.script.rank_merge import RankedTrace
from fp16studio.core.script.trace import ScriptTrace
from fp16studio.core.spec.value import PipelineSpec
from .code_to_run import check_agreed_script
from .lookups import DatasetPreview

TASKS: dict[str, Callable] = {}
_warm = None   # this engine process's core.run.warm.WarmModel, made on the first run


def task(name: str):
    """Register the decorated function as the engine task `name`."""
    def register(fn):
        TASKS[name] = fn
        return fn
    return register


def resolve(name: str) -> Callable:
    """The function of a task: a registered name, or "module:function" (tests, extensions)."""
    if name in TASKS:
        return TASKS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise LookupError(f"no engine task {name!r}")
    return getattr(importlib.import_module(module), attr)


def takes(fn: Callable, parameter: str) -> bool:
    return parameter in inspect.signature(fn).parameters


# What the engine gives a task itself: never sent.
_GIVEN = ("progress", "cancel", "on_sample")


class TaskTypes:
    """What a task takes and returns, by its annotations (none: plain JSON), and how those
    travel: both sides read the same function's, so a frame holds documents, never type names."""

    def __init__(self, fn: Callable):
        hints = typing.get_type_hints(fn)
        self._names = [name for name in inspect.signature(fn).parameters if name not in _GIVEN]
        self._hints = {name: hints.get(name, Any) for name in self._names}
        self._returns = hints.get("return", Any)

    def encode_arguments(self, args, kwargs: dict) -> tuple[list, dict]:
        hints = [self._hints[name] for name in self._names[:len(args)]]
        return ([encoder(hint, True)(value) for hint, value in zip(hints, args)],
                {name: encoder(self._hints.get(name, Any), True)(value)
                 for name, value in kwargs.items()})

    def decode_arguments(self, args: list, kwargs: dict) -> tuple[list, dict]:
        hints = [self._hints[name] for name in self._names[:len(args)]]
        return ([decode(hint, value, name) for hint, value, name in zip(hints, args, self._names)],
                {name: decode(self._hints.get(name, Any), value, name)
                 for name, value in kwargs.items()})

    def encode_result(self, value):
        return encoder(self._returns, True)(value)

    def decode_result(self, doc):
        return decode(self._returns, doc, "result")


@functools.lru_cache(maxsize=None)
def types_of(name: str) -> TaskTypes:
    """The types of the task `name` (LookupError, ImportError: no such task)."""
    return TaskTypes(resolve(name))


def torch_loaded(progress, what: str = "torch"):
    """Import torch, saying so first when this engine has not yet: the first task of a fresh
    engine spends seconds there (a minute on a busy machine), and the window tells the user."""
    if "torch" not in sys.modules:
        progress("libraries", f"Loading {what}…")
    import torch  # noqa: F401


@dataclass(frozen=True)
class Diagnosed(Document):
    """A run's diagnosis, and the GPU memory its engine holds in bytes (None: no GPU). The
    tree's index is built where it arrives (the window's worker), not sent."""

    diagnosis: Diagnosis
    gpu_memory: int | None = None


@dataclass(frozen=True)
class Opened(Document):
    """A spec or session file: its spec, and the documents of its last runs as the file holds
    them, whatever that is (a crafted or damaged file): the window reads them leniently
    (session_state.read_saved), so that a bad one never keeps the spec from opening."""

    spec: PipelineSpec
    diagnosis: Any = None
    bench: Any = None
    # The host whose engine the session was made with, and the Python there (None: this
    # computer, or a plain spec file): its paths are that machine's.
    host: str | None = None
    remote_python: str | None = None


@task("diagnose")
def diagnose(spec: PipelineSpec, progress, cancel) -> Diagnosed:
    torch_loaded(progress)
    import torch

    from fp16studio.core import diagnose as run

    diagnosis = run(spec, progress=progress, cancel=cancel, warm=warm_model())
    gpu_memory = torch.cuda.memory_reserved() if torch.cuda.is_available() else None
    return Diagnosed(diagnosis, gpu_memory)


def warm_model():
    """The engine's warm model. A benchmark loads its own variants: it clears this one first,
    so two models never share the memory."""
    global _warm
    if _warm is None:
        from fp16studio.core.run.warm import WarmModel

        _warm = WarmModel()
    return _warm


@task("trace")
def trace(path: str, args: tuple[str, ...], progress, cancel, on_sample) -> ScriptTrace:
    """A user's script, traced. The script's stdout/stderr lines stream as samples
    ["stdout"|"stderr", line] for the Log."""
    from fp16studio.core.script.trace import readable, trace_script

    check_agreed_script(path)
    return trace_script(path, tuple(args), progress=progress, cancel=cancel,
                        output=lambda stream, line: on_sample((stream, readable(line))))


@task("trace-launch")
def trace_launched(launch: str, path: str, args: tuple[str, ...], progress, cancel,
                   on_sample) -> RankedTrace:
    """A user's script run by their launcher (`torchrun --nproc-per-node 2`), every rank
    traced and their traces merged; output lines as `trace`'s."""
    from fp16studio.core.script.ranks import trace_launch
    from fp16studio.core.script.trace import readable

    check_agreed_script(path)
    return trace_launch(launch, path, tuple(args), progress=progress, cancel=cancel,
                        output=lambda stream, line: on_sample((stream, readable(line))))


@task("fixed-copy")
def fixed_copy(script: str, findings: list[Finding], ask: str) -> FixedCopy:
    """A traced script's fix written into a copy beside the script, on this engine's machine
    (the box's, where the script is)."""
    return write_fixed_copy(script, findings, ask)


@task("drift")
def drift(spec: PipelineSpec, variant: str | None, progress, cancel) -> DriftResult:
    """float32 against `variant` (None: the spec's own half precision), module by module: a
    DriftResult (plain values)."""
    torch_loaded(progress)
    from fp16studio.core.precision.drift import drift as run

    warm_model().clear()   # drift loads the spec twice (float32 and half): no third model beside
    return run(spec, variant, progress=progress, cancel=cancel)


@task("fp8")
def fp8(spec: PipelineSpec, recipe: str, progress, cancel) -> Fp8Plan:
    """The FP8 plan of `spec` with `recipe`."""
    from fp16studio.core.precision.fp8 import fp8_plan

    warm_model().clear()   # the plan loads its own bfloat16 model
    return fp8_plan(spec, recipe, progress=progress, cancel=cancel)


@task("bench")
def benchmark(spec: PipelineSpec, variants: list[str] | None, progress, cancel,
              on_sample=None) -> BenchResult:
    """Each precision variant of `spec` measured on the same batch (core.precision.bench)."""
    torch_loaded(progress)
    from fp16studio.core import benchmark as run

    warm_model().clear()
    return run(spec, variants, progress=progress, cancel=cancel, on_sample=on_sample)


@task("export")
def export(spec: PipelineSpec) -> str:
    """The standalone script for `spec` (core.present.export), written where the window is."""
    from fp16studio.core import export_script

    return export_script(spec)


@task("warm-up")
def warm_up(progress) -> None:
    """Import the heavy libraries now, while the user is still reading the window, so that the
    first Run does not wait seconds for them."""
    if not {"datasets", "transformers.modeling_utils"} <= sys.modules.keys():
        progress("libraries", "Loading torch, transformers and datasets…")
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401  (from_pretrained's own heavy imports)


@task("demo")
def demo(name: str, progress) -> PipelineSpec:
    """A built-in demo spec (builds its tiny model and data on first use: imports torch)."""
    torch_loaded(progress)
    progress("demo", f"Preparing the demo pipeline {name!r}…")
    from fp16studio.core.demo.pipelines import demo_spec

    return demo_spec(name)


@task("open")
def open_source(path: str, progress) -> Opened:
    """A spec, a session file or a demo."""
    from fp16studio.core.demo.pipelines import DEMO_PREFIX, open_spec

    if str(path).startswith(DEMO_PREFIX):
        torch_loaded(progress)
        return Opened(open_spec(path))
    from fp16studio.core.spec.session import open_session

    session = open_session(path)
    return Opened(session.spec, session.diagnosis, session.bench, session.host,
                  session.remote_python)


@task("preview")
def preview(spec: PipelineSpec, cancel) -> DatasetPreview:
    """The dataset preview (reading rows needs `datasets`, so it runs here, not in the window)."""
    from .lookups import dataset_preview

    cancel.check()
    return dataset_preview(spec)
