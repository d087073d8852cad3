"""The rank picker of a launched run's trace: a row per rank, the first bad one chosen, and the
chosen rank's findings."""

from fp16studio.core import PipelineSpec
from fp16studio.core.script.rank_merge import RankedTrace
from fp16studio.core.script.rank_summary import RankedFinding, RankSummary
from fp16studio.gui.rank_picker import RankPicker


def row(rank, status, first=None, findings=()):
    return {"rank": rank, "status": status, "last_step": 2, "in_step": False, "at": None,
            "first_nonfinite": first, "error": None if status == "ok" else
            {"type": "X", "message": f"rank {rank} {status}"}, "findings": list(findings),
            "pid": None}


def finding(code, ranks):
    return {"code": code, "severity": "warning", "location": "loss", "message": "m",
            "evidence": {}, "fixes": [], "source": None, "ranks": ranks}


AT = {"phase": "forward", "location": "loss", "step": 2, "source": None}   # a row's
FIRST = dict(AT, rank=1)                                                      # the run's
RANKS = {"launch": "torchrun --nproc-per-node 2", "world_size": 2, "ended": "failed",
         "launcher_exit": 1, "first_nonfinite": FIRST, "first_failed": None,
         "disagreements": [],
         "per_rank": [row(0, "stopped", dict(AT, phase="collective", from_rank=1),
                          ["half-reduction"]),
                      row(1, "failed", AT, ["half-reduction", "overflow"])]}
TRACE = RankedTrace(spec=PipelineSpec(model="script", dataset="script"), device="cpu",
                    findings=[RankedFinding.from_json(finding("half-reduction", [0, 1])),
                              RankedFinding.from_json(finding("overflow", [1]))],
                    ranks=RankSummary.from_json(RANKS))


def test_a_row_per_rank_and_the_first_bad_rank_chosen(qtbot, qtmodeltester):
    picker = RankPicker()
    qtbot.addWidget(picker)
    with qtbot.waitSignal(picker.rankChosen) as chosen:
        picker.set_trace(TRACE)
    assert chosen.args == [1]
    qtmodeltester.check(picker.model)
    assert picker.model.rowCount() == 2
    assert picker.model.index(1, 1).data() == "failed"
    assert picker.model.index(0, 2).data().startswith("step 2, collective, from rank 1")
    assert picker.chosen_findings() == ["warning  half-reduction  at loss (on all 2 ranks)",
                                        "warning  overflow  at loss (rank 1 only)"]


def test_choosing_a_rank_shows_its_findings_and_a_single_process_trace_hides_the_picker(qtbot):
    picker = RankPicker()
    qtbot.addWidget(picker)
    picker.set_trace(TRACE)
    with qtbot.waitSignal(picker.rankChosen) as chosen:
        picker.table.selectRow(0)
    assert chosen.args == [0]
    assert picker.chosen_findings() == ["warning  half-reduction  at loss (on all 2 ranks)"]
    picker.set_trace(RankedTrace(spec=TRACE.spec, device="cpu"))
    assert picker.isHidden() and picker.model.rowCount() == 0
