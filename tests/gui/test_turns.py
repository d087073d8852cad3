"""A result shown in turns: a part per event, `then` after the last, all at once on demand."""

from fp16studio.gui.turns import Turns


def test_parts_run_one_per_event_then_what_follows(qtbot, qapp):
    from PySide6.QtCore import QObject

    owner = QObject()
    done = []
    turns = Turns(owner, then=lambda: done.append("then"))
    turns.start(lambda: done.append(1), lambda: done.append(2))
    assert done == [] and turns.pending
    qapp.processEvents()
    assert done[:1] == [1]
    qtbot.waitUntil(lambda: done == [1, 2, "then"], timeout=1000)
    assert not turns.pending

    done.clear()
    turns.start(lambda: done.append(1), lambda: done.append(2))
    turns.finish()                       # what is left, now: and then only once
    assert done == [1, 2, "then"]
    qtbot.wait(20)
    assert done == [1, 2, "then"]

    done.clear()
    turns.start(lambda: done.append(1))
    turns.drop()                         # forgotten: nothing runs, not even `then`
    qtbot.wait(20)
    assert done == [] and not turns.pending
