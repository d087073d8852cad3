"""Garbage collection paused while a pass builds many long-lived records.

A traced pass of a 640-layer BERT makes 80 000 records (module calls, tensor descriptions) and
its tree 33 000 nodes; each 700 allocations start a collection, and the older generations'
collections walk every object of the model: a third of the pass, and up to 0.3 s of a tree.
Nothing of what is built then is garbage, and tensors are freed by reference counting anyway.
Pauses nest and may end in any order, from any thread: collection resumes (if it was on, and
not turned off for good since by `collection_off`) when the last one ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused():
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


def paused() -> bool:
    """Whether a pause is under way (on any thread)."""
    return _depth > 0


def collection_off():
    """Automatic collection off from now on: a pause under way leaves it off when it ends (the
    window collects on its own thread, gui/collector.py)."""
    global _was_enabled
    with _lock:
        _was_enabled = False
        gc.disable()
