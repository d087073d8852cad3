"""The functions the worker thread runs for the window (Qt-free; they import the engine lazily).

Each returns plain, immutable-enough snapshots: a Diagnosis with its tree indexed, a bench
document, a spec. Nothing returned holds a tensor or a module.
"""

from __future__ import annotations

from .tree_index import TreeIndex


def diagnose(spec, progress, cancel):
    """Run the engine's diagnosis; index its tree here so the GUI thread does not have to.

    Returns (Diagnosis, TreeIndex or None, GPU memory in bytes or None).
    """
    import torch

    from fp16studio.core import diagnose as run

    diagnosis = run(spec, progress=progress, cancel=cancel)
    index = TreeIndex(diagnosis.tree) if diagnosis.tree is not None else None
    gpu_memory = torch.cuda.memory_reserved() if torch.cuda.is_available() else None
    return diagnosis, index, gpu_memory


def benchmark(spec, variants, on_sample, progress, cancel) -> dict:
    from fp16studio.core import benchmark as run

    return run(spec, variants, progress=progress, cancel=cancel, on_sample=on_sample).to_json()


def warm_up():
    """Import the engine's heavy libraries now, while the user is still reading the window.

    Loading torch holds the GIL for long stretches (the dynamic loader, static initialisers),
    which stalls the GUI thread whenever it happens; better once at start-up than mid-run.
    Freezing the objects created by the imports keeps later full garbage collections (the
    engine runs one after each diagnosis) from walking them again with the GIL held.
    """
    import gc

    import datasets  # noqa: F401
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401  (from_pretrained's own heavy imports)

    gc.collect()
    gc.freeze()


def demo(name: str):
    """A built-in demo spec (builds its tiny model and data on first use: imports torch)."""
    from fp16studio.core.demo import demo_spec

    return demo_spec(name)


def open_source(path: str):
    """A spec or session file -> (spec, diagnosis document or None, bench document or None)."""
    from fp16studio.core.spec import DEMO_PREFIX, PipelineSpec

    if str(path).startswith(DEMO_PREFIX):
        return PipelineSpec.load(path), None, None
    from fp16studio.core.session import open_session

    session = open_session(path)
    return session.spec, session.diagnosis, session.bench

