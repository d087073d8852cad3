"""The engine's versions are a field of the session state (issue 43 item 1): the controller
forwards the state's event, in its one table, rather than emitting by hand."""

from fp16studio.core.diagnostics.report import Environment
from fp16studio.gui.session_controller import SessionController


def test_the_environment_is_announced_by_the_state_once_per_change(qtbot):
    controller = SessionController()
    try:
        seen = []
        controller.environmentChanged.connect(seen.append)
        environment = Environment(torch="2.13.0+cpu", transformers="5.24.0")
        controller.state.environment = environment   # as the engine's report arrives
        assert seen == [environment] and controller.environment is environment
        controller.state.environment = environment   # the same report again: nothing to say
        assert seen == [environment]
    finally:
        controller.shutdown()
