"""What keeps a large result from stalling the window (issue 21): checked as mechanisms, never
timed (benchmarks/gui_responsiveness.py measures the stalls). A tree arrives with garbage
collection paused and, when large, is kept out of the collector's passes; the tree model leaves
no reference cycle behind when it forgets rows, so nothing it froze is lost to the collector."""

import gc

import engine_jobs as work
import pytest

from fp16studio.core.common.gc_pause import paused
from fp16studio.core.diagnostics.tree import summary
from fp16studio.gui.long_lived import FREEZE_FROM_TENSORS, keep_out_of_collections
from fp16studio.gui.tree_model import TensorTreeModel
from fp16studio.gui.worker import Job, WorkerHost

TIMEOUT_MS = 60_000


@pytest.fixture
def host(qtbot):
    host = WorkerHost(kill_after_cancel_s=1.0)
    yield host
    assert host.shutdown(5000)


def test_a_lasting_result_arrives_with_garbage_collection_paused(qtbot, host):
    seen = []

    def arrive(result):
        seen.append(paused())
        return result

    for lasting in (True, False):
        job = Job("diagnose", work.report, (1,), on_arrival=arrive, lasting=lasting)
        with qtbot.waitSignal(host.jobDone, timeout=TIMEOUT_MS):
            host.submit(job)
    assert seen == [True, False]
    assert not paused()


def tracked(obj) -> bool:
    """Whether the collector's generations hold `obj` (the permanent one, frozen, is not listed)."""
    return any(o is obj for o in gc.get_objects())


def test_a_large_tree_is_kept_out_of_the_collectors_passes(make_tree):
    small, large = make_tree(), make_tree(wide=FREEZE_FROM_TENSORS)
    try:
        keep_out_of_collections(summary(small))
        assert tracked(small)
        keep_out_of_collections(None)            # a failed run: no tree
        assert tracked(small)
        keep_out_of_collections(summary(large))
        assert not tracked(large) and not tracked(small)
    finally:
        gc.unfreeze()


def test_forgotten_rows_leave_no_cycle_behind(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(modules=4, wide=300))
    net = model.index(0, 0)
    model.fetchMore(net)
    for row in range(model.rowCount(net)):
        model.fetchMore(model.index(row, 0, net))
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)       # what the collector finds is kept in gc.garbage
    try:
        model.set_tree(make_tree(modules=2))    # another structure: the model's rows replaced
        model.set_tree(None)
        gc.collect()
        assert not [obj for obj in gc.garbage if type(obj).__name__ == "_Item"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_a_result_is_shown_in_turns_tree_then_findings_then_the_log(qtbot):
    """A result's handling is split over events (issue 31): its own event shows the tree, the
    findings follow in the next, the Log's entries after them; the window's diagnosisFinished
    comes when the findings are shown."""
    from fp16studio.gui import MainWindow
    from window_steps import listed

    window = MainWindow()
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.spec is not None, timeout=TIMEOUT_MS)
    seen = {}

    def in_the_results_event(_doc):   # after the window's own slots, in the same event
        seen["tree"] = window.tensors.model.rowCount() > 0
        seen["findings"] = len(listed(window))
        seen["log"] = window.log.document().toPlainText()

    window.controller.diagnosisFinished.connect(in_the_results_event)
    with qtbot.waitSignal(window.diagnosisFinished, timeout=TIMEOUT_MS) as finished:
        window.run_diagnosis()
    assert seen["tree"] and seen["findings"] == 0
    assert "Diagnosis on" not in seen["log"]
    assert len(listed(window)) == len(finished.args[0]["findings"]) > 0
    qtbot.waitUntil(lambda: "Diagnosis on" in window.log.document().toPlainText(), timeout=TIMEOUT_MS)
