"""Steps the window tests share: a diagnosis run to its document, the findings listed, what an
edit makes stale shown."""

from fp16studio.gui.roles import NODE_ROLE

# A run on this shared 2-core machine can take a minute under load.
RUN_TIMEOUT_MS = 180_000


def run(qtbot, window):
    """Run the diagnosis and wait for its --json document."""
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        assert window.run_diagnosis()
    return finished.args[0]


def listed(window):
    """The findings the Findings panel lists, in its order."""
    model = window.findingsView.model()
    return [model.index(r, 0).data(NODE_ROLE) for r in range(model.rowCount())]


def shown(qtbot):
    """What an edit of the spec makes stale (the findings' notice, their fixes off, the form's
    notice) is shown an event after the edit: let that event come."""
    qtbot.wait(1)
