"""A traced script's quiet-value finding in the window (issues 39 and 40): its value drawn
against its float32 shadow, and its fix written into a copy of the script that is traced again,
never into the script."""

from pathlib import Path

from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.script.proof import free_name
from fp16studio.core.script.trace import ScriptTrace
from fp16studio.core.spec.value import PipelineSpec
from fp16studio.gui.findings_panel import FindingDetail
from fp16studio.gui.session_controller import SessionController

SCRIPT = "import torch\ntotal = torch.zeros((), dtype=torch.bfloat16)\nfor x in range(3):\n    total += 1\n"


def quiet_trace(folder: Path) -> ScriptTrace:
    script = folder / "train.py"
    script.write_text(SCRIPT)
    source = {"file": str(script), "line": 4}
    fix = Fix("float32-accumulator", "Keep the updated value in float32", {},
              code=CodeEdit("total = total.float() + 1", "replace", source))
    finding = Finding("precision-loss", "error", "train.py:4", "absorbed",
                      {"kind": "absorbed", "dtype": "bfloat16",
                       "series": [[1, 1.0, 1.0], [2, 2.0, 2.0], [3, 2.0, 3.0]]},
                      (fix,), source=source)
    return ScriptTrace(spec=PipelineSpec(model="script", dataset="script"), device="cpu",
                       findings=[finding], script=str(script), args=("--fast",))


def test_the_detail_draws_the_value_against_its_shadow_and_offers_a_fixed_copy(qtbot, tmp_path):
    detail = FindingDetail()
    qtbot.addWidget(detail)
    detail.code_fixes = True
    asked = []
    detail.fixRequested.connect(asked.append)
    (finding,) = quiet_trace(tmp_path).findings
    detail.show_finding(finding)
    detail.show()
    assert detail.sketch.isVisible() and len(detail.sketch.lines) == 2   # value and float32's
    assert "series" not in detail.evidence.text()
    (button,) = detail.fix_buttons
    button.click()
    assert asked == ["float32-accumulator:4"]
    detail.show_text("nothing")
    assert not detail.sketch.isVisible()


def test_a_traced_script_s_fix_goes_into_a_copy_that_is_traced(qtbot, tmp_path, monkeypatch):
    controller = SessionController()
    try:
        trace = quiet_trace(tmp_path)
        controller.state.took_diagnosis(None, trace)
        traced = []
        monkeypatch.setattr(controller, "run_trace", lambda path, args=(), launch=None:
                            traced.append((path, args, launch)) or True)
        assert controller.fixes_enabled
        assert controller.apply_fix("float32-accumulator:4")
        copy = tmp_path / "train.fixed.py"
        assert traced == [(str(copy), ("--fast",), None)]     # one process, as traced
        assert copy.read_text().splitlines()[3] == "    total = total.float() + 1"
        assert (tmp_path / "train.py").read_text() == SCRIPT          # never the script
        assert free_name(tmp_path / "train.py") == tmp_path / "train.fixed-2.py"
        assert not controller.apply_fix("no-such-fix:4")
    finally:
        controller.shutdown()


def test_with_the_engine_on_a_box_the_fixed_copy_is_written_there(qtbot, tmp_path, monkeypatch):
    """The script of a trace on a box is the box's: the engine writes the copy (the engine here
    stands in for the box's; the window's own writer fails if it is called)."""
    def here(*_args):
        raise AssertionError("the window wrote the copy")

    monkeypatch.setattr("fp16studio.core.script.proof.write_fixed_copy", here)
    controller = SessionController()
    try:
        controller.engine_host = "box"
        controller.state.took_diagnosis(None, quiet_trace(tmp_path))
        traced = []
        monkeypatch.setattr(controller, "run_trace", lambda path, args=(), launch=None:
                            traced.append((path, args, launch)) or True)
        assert controller.apply_fix("float32-accumulator:4")
        qtbot.waitUntil(lambda: bool(traced), timeout=60_000)
        copy = tmp_path / "train.fixed.py"
        assert traced == [(str(copy), ("--fast",), None)]
        assert copy.read_text().splitlines()[3] == "    total = total.float() + 1"
    finally:
        controller.shutdown()

