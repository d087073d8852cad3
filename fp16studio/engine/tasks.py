"""The functions the engine process runs for the window (Qt-free; they import the engine lazily).

Each returns a plain snapshot that pickles back to the window: a Diagnosis with its tree
indexed, a bench document, a spec. Nothing returned holds a tensor or a module.
"""

from __future__ import annotations

from .tree_index import IndexOnArrival


def diagnose(spec, progress, cancel):
    """Run the engine's diagnosis. Returns (Diagnosis, TreeIndex or None, GPU memory in bytes
    or None) as the window receives it: the index is built on its worker thread, on arrival."""
    import torch

    from fp16studio.core import diagnose as run

    diagnosis = run(spec, progress=progress, cancel=cancel)
    index = IndexOnArrival(diagnosis.tree) if diagnosis.tree is not None else None
    gpu_memory = torch.cuda.memory_reserved() if torch.cuda.is_available() else None
    return diagnosis, index, gpu_memory


def benchmark(spec, variants, progress, cancel, on_sample=None) -> dict:
    from fp16studio.core import benchmark as run

    return run(spec, variants, progress=progress, cancel=cancel, on_sample=on_sample).to_json()


def export(spec, path: str) -> str:
    """Write the standalone script for `spec` (atomically; see core.export); returns the path."""
    from fp16studio.core import export_script

    export_script(spec, path)
    return path


def warm_up():
    """Import the engine's heavy libraries now, while the user is still reading the window, so
    that the first Run does not wait seconds for them."""
    import datasets  # noqa: F401
    import torch  # noqa: F401
    import transformers.modeling_utils  # noqa: F401  (from_pretrained's own heavy imports)


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

