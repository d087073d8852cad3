"""A launched run's trace in the window: the rank picker shows its ranks, and choosing one shows
that rank's findings and its own tensor tree."""

from fp16studio.core import PipelineSpec
from fp16studio.core.diagnostics.findings import Finding
from fp16studio.core.script.rank_merge import RankRecord, merged_trace
from fp16studio.core.script.trace import ScriptTrace
from fp16studio.gui.main_window import MainWindow

SPEC = PipelineSpec(model="script", dataset="script")


def rank_document(*codes) -> dict:
    findings = [Finding(code, "warning", "loss", "m") for code in codes]
    return ScriptTrace(spec=SPEC, device="cpu", script="train.py", findings=findings).to_json()


def test_a_launched_trace_shows_its_ranks_and_the_chosen_rank_s_findings_and_tree(qtbot, make_tree):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=60_000)
    assert window.ranks.isHidden()
    trees = {0: make_tree(modules=2).to_json(), 1: make_tree(modules=3).to_json()}
    records = [RankRecord(0, rank_document("half-reduction"), None, True, True, tree=trees[0]),
               RankRecord(1, rank_document("half-reduction", "overflow"), None, True, True,
                          tree=trees[1])]
    trace = merged_trace(records, "train.py", (), "torchrun --nproc-per-node 2", 0, None,
                         None, 60)
    window.controller._on_diagnosis(None, trace, None, None)   # as the engine's answer arrives
    qtbot.waitUntil(lambda: window.ranks.isVisible())
    assert window.ranks.model.rowCount() == 2
    # No rank went bad: the lowest is chosen, with its findings and its tree (no layer2).
    assert window.ranks.chosen_findings() == ["warning  half-reduction  at loss (on all 2 ranks)"]
    assert shown_tree(window).find("layer1") is not None and shown_tree(window).find("layer2") is None
    window.ranks.table.selectRow(1)
    assert window.ranks.chosen_findings() == [
        "warning  half-reduction  at loss (on all 2 ranks)", "warning  overflow  at loss (rank 1 only)"]
    assert shown_tree(window).find("layer2") is not None
    window.ranks.table.selectRow(0)
    assert shown_tree(window).find("layer2") is None

def shown_tree(window):
    return window.tensors.model.tree_index.root


def test_a_script_launched_from_the_window_is_traced_on_each_rank(qtbot, tmp_path):
    """File → Trace Script…'s "Launch with" runs the script under the user's launcher: each rank
    traced by the engine, the ranks in the picker."""
    import shutil
    from pathlib import Path

    import pytest

    from fp16studio.gui.trace_dialog import TraceDialog

    if shutil.which("torchrun") is None:
        pytest.skip("needs torchrun")
    dialog = TraceDialog("train.py")
    qtbot.addWidget(dialog)
    dialog.args.setText("--steps 2")
    dialog.launch.setText("torchrun --nproc-per-node 2")
    assert dialog.values() == (["--steps", "2"], "torchrun --nproc-per-node 2")
    dialog.launch.setText("torchrun '--nproc-per-node 2")
    with pytest.raises(ValueError):
        dialog.values()
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=60_000)
    script = Path(__file__).parent.parent / "scripts" / "ranks_ddp_fp16_hook.py"
    assert window.open_script(str(script), (), "torchrun --nproc-per-node 2")
    qtbot.waitUntil(lambda: window.ranks.isVisible(), timeout=300_000)
    assert window.ranks.model.rowCount() == 2
    assert any("half-reduction" in line for line in window.ranks.chosen_findings())


def test_a_launched_trace_s_fixed_copy_is_traced_under_its_launcher(qtbot, tmp_path, monkeypatch):
    """"Trace a fixed copy" on a launched run re-runs the copy as the script ran: under its
    launcher, with its arguments."""
    from pathlib import Path

    window = MainWindow()
    qtbot.addWidget(window)
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    records = [RankRecord(rank, rank_document("half-reduction"), None, True, True)
               for rank in (0, 1)]
    trace = merged_trace(records, str(script), ("--x",), "torchrun --nproc-per-node 2", 0, None,
                         None, 60)
    state = window.controller.state
    monkeypatch.setattr(type(state), "trace", property(lambda _self: trace))
    monkeypatch.setattr("fp16studio.core.script.proof.fixed_script",
                        lambda _script, _findings, asks: ("print(2)\n",
                                                          [{"id": "f", "line": 1, "code": "c"}]))
    traced = []
    monkeypatch.setattr(window.controller, "run_trace", lambda path, args, launch=None:
                        traced.append((Path(path).name, tuple(args), launch)) or True)
    assert window.controller._trace_fixed_copy("f:1")
    assert traced == [("train.fixed.py", ("--x",), "torchrun --nproc-per-node 2")]
