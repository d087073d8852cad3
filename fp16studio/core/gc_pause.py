"""Garbage collection paused while a pass builds many long-lived records.

A traced pass of a 640-layer BERT makes 80 000 records (module calls, tensor descriptions) and
its tree 33 000 nodes; each 700 allocations start a collection, and the older generations'
collections walk every object of the model: a third of the pass, and up to 0.3 s of a tree.
Nothing of what is built then is garbage, and tensors are freed by reference counting anyway.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def gc_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
