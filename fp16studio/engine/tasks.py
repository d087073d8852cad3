"""The named tasks the engine process runs for the window (Qt-free; heavy imports inside).

Adding a task is one function here, decorated with `@task("name")`. A task that takes
`progress` and `cancel` gets them (a run: its progress shows, Cancel reaches it); one that takes
`on_sample` streams samples. Each returns a plain snapshot that travels back to the window as
typed JSON (numbers, strings, pure-Python trees, the types messages.WIRE names), never a tensor
or a module.

The engine keeps the last loaded model warm (core.run.warm): a run whose loading keys did not
change (a fix that casts inputs, a new batch size) reuses its weights.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Callable

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


def torch_loaded(progress, what: str = "torch"):
    """Import torch, saying so first when this engine has not yet: the first task of a fresh
    engine spends seconds there (a minute on a busy machine), and the window tells the user."""
    if "torch" not in sys.modules:
        progress("libraries", f"Loading {what}…")
    import torch  # noqa: F401


@task("diagnose")
def diagnose(spec, progress, cancel):
    """(Diagnosis, its TreeIndex or None, GPU memory in bytes or None). The index travels as
    the tree it indexes, so it is built once, where it arrives (the window's worker)."""
    torch_loaded(progress)
    import torch

    from fp16studio.core import diagnose as run
    from fp16studio.core.diagnostics.tree_index import IndexOnArrival

    diagnosis = run(spec, progress=progress, cancel=cancel, warm=warm_model())
    index = IndexOnArrival(diagnosis.tree) if diagnosis.tree is not None else None
    gpu_memory = torch.cuda.memory_reserved() if torch.cuda.is_available() else None
    return diagnosis, index, gpu_memory


def warm_model():
    """The engine's warm model. A benchmark loads its own variants: it clears this one first,
    so two models never share the memory."""
    global _warm
    if _warm is None:
        from fp16studio.core.run.warm import WarmModel

        _warm = WarmModel()
    return _warm


@task("trace")
def trace(path: str, args, progress, cancel, on_sample):
    """A user's script, traced: (ScriptTrace, its TreeIndex or None, None) like `diagnose`. The
    script's stdout/stderr lines stream as samples ("stdout"|"stderr", line) for the Log."""
    from fp16studio.core.script.trace import readable, trace_script
    from fp16studio.core.diagnostics.tree_index import IndexOnArrival

    result = trace_script(path, tuple(args), progress=progress, cancel=cancel,
                          output=lambda stream, line: on_sample((stream, readable(line))))
    return result, IndexOnArrival(result.tree) if result.tree is not None else None, None


@task("drift")
def drift(spec, variant, progress, cancel):
    """float32 against `variant` (None: the spec's own half precision), module by module: a
    DriftResult (plain values)."""
    torch_loaded(progress)
    from fp16studio.core.precision.drift import drift as run

    warm_model().clear()   # drift loads the spec twice (float32 and half): no third model beside
    return run(spec, variant, progress=progress, cancel=cancel)


@task("fp8")
def fp8(spec, recipe, progress, cancel) -> dict:
    """The FP8 plan of `spec` with `recipe`: its --json document (plain values)."""
    from fp16studio.core.precision.fp8 import fp8_plan

    warm_model().clear()   # the plan loads its own bfloat16 model
    return fp8_plan(spec, recipe, progress=progress, cancel=cancel).to_json()


@task("bench")
def benchmark(spec, variants, progress, cancel, on_sample=None) -> dict:
    torch_loaded(progress)
    from fp16studio.core import benchmark as run

    warm_model().clear()
    return run(spec, variants, progress=progress, cancel=cancel, on_sample=on_sample).to_json()


@task("export")
def export(spec) -> str:
    """The standalone script for `spec` (core.present.export), written where the window is."""
    from fp16studio.core import export_script

    return export_script(spec)


@task("warm-up")
def warm_up(progress):
    """Import the heavy libraries now, while the user is still reading the window, so that the
    first Run does not wait seconds for them."""
    if not {"datasets", "transformers.modeling_utils"} <= sys.modules.keys():
        progress("libraries", "Loading torch, transformers and datasets…")
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401  (from_pretrained's own heavy imports)


@task("demo")
def demo(name: str, progress):
    """A built-in demo spec (builds its tiny model and data on first use: imports torch)."""
    torch_loaded(progress)
    progress("demo", f"Preparing the demo pipeline {name!r}…")
    from fp16studio.core.demo.pipelines import demo_spec

    return demo_spec(name)


@task("open")
def open_source(path: str, progress):
    """A spec or session file -> (spec, diagnosis document or None, bench document or None)."""
    from fp16studio.core.demo.pipelines import DEMO_PREFIX, open_spec

    if str(path).startswith(DEMO_PREFIX):
        torch_loaded(progress)
        return open_spec(path), None, None
    from fp16studio.core.spec.session import open_session

    session = open_session(path)
    return session.spec, session.diagnosis, session.bench


@task("preview")
def preview(spec, cancel):
    """The dataset preview (reading rows needs `datasets`, so it runs here, not in the window)."""
    from .lookups import dataset_preview

    cancel.check()
    return dataset_preview(spec)
