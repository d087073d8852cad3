"""What lives as long as the window kept out of the garbage collector's passes: its start-up
(the modules, the pages) once made, and a large result while it is shown.

A 20 000-tensor tree arrives as some 100 000 Python objects that live until the next run. Each
pass of the collector over an older generation walks every such object holding the GIL: 30 to
70 ms in which the window does not answer, at moments unrelated to the tree (a click, a
repaint). The tree holds no reference cycles (reference counting frees it when the next run
replaces it), so nothing is lost by moving it into the permanent generation, which no pass
walks. The worker pauses collection while such a result arrives (Job.lasting), so no pass walks
it on its way in either.

`gc.freeze` moves every object alive at that moment, not the tree alone: what else is frozen is
the window's own long-lived objects, and any cycle that became garbage since the last pass,
which stays uncollected: 54 objects after a whole session of runs, measured.

A window made is some 85 000 objects too (Qt's and pyqtgraph's modules, NumPy, the pages and
their plots) that live as long as it: a full pass over them costs the GUI thread 17-20 ms of
CPU (0.1 ms once frozen), and held the window 154 ms as a benchmark's result arrived under
load (`benchmarks/gui_responsiveness.py --why`). They are frozen once the last page is made.
"""

from __future__ import annotations

import gc

# Below this many tensors a full pass over the tree takes a few milliseconds: not worth it.
FREEZE_FROM_TENSORS = 5_000


def keep_out_of_collections(inventory):
    """Freeze what is alive now when `inventory` (core's tree summary, an Inventory or None)
    says the tree is large."""
    if inventory is not None and inventory.tensors >= FREEZE_FROM_TENSORS:
        gc.freeze()


def keep_lasting_out_of_collections():
    """Freeze what is alive now, at a moment when what was just made lives as long as the
    window: its start-up once the window and its pages are made, and the modules its import
    thread loaded (later_pages.ImportsMeanwhile), whose objects the GUI thread's next pass
    would otherwise walk (22-38 ms, measured). Any garbage alive at that moment is frozen with
    them."""
    gc.freeze()
