"""An engine lost mid-job (a box gone, its process dead) is said in one line, and every view
keeps its last result (issue 41): the findings, the benchmark's figures, the drift and the FP8
plan are still of their spec, so nothing is cleared nor marked. The window's own engine is
killed as each job is sent: the same ending as a box that cannot be reached again."""

from fp16studio.core.precision.bench import BenchResult
from fp16studio.core.precision.drift import DriftResult
from fp16studio.engine import messages as m
from fp16studio.engine.client import ENGINE_LOST
from window_steps import RUN_TIMEOUT_MS, listed

from tests.gui.test_crafted_sessions import BENCH, DIAGNOSIS, SPEC, opened, session_file
from tests.gui.test_results_follow_the_spec import plan

DRIFT = {"variant": "float16", "device": "cpu", "ok": False, "first_divergent": "layer.1",
         "output": {"sqnr_db": 12.5, "finite": True},
         "modules": [{"name": f"layer.{i}", "class": "Linear", "call": 0, "max_abs_diff": 0.1,
                      "cosine": 0.99, "sqnr_db": 30.0 - 10 * i, "abs_max_float32": 3.0,
                      "abs_max_variant": 3.0, "nonfinite": 0} for i in range(3)]}


def lost_as_sent(engine, tasks):
    """The engine ends as soon as it is sent a job of `tasks` (not the window's own lookups)."""
    send = engine._send

    def send_then_end(message):
        sent = send(message)
        if isinstance(message, m.Run) and message.task in tasks:
            engine.kill()
        return sent
    engine._send = send_then_end


def shown(window) -> dict:
    """What each view shows of its result."""
    window.compare.finish_drawing()
    return {"findings": [f.code for f in listed(window)],
            "bench": (window.bench_result, window.compare.model.rowCount()),
            "drift": (window.drift.verdict.text(), window.drift.model.rowCount()),
            "fp8": (window.fp8.summary.text(), window.fp8.model.rowCount()),
            "stale": [view.stale.isVisibleTo(view) for view in (window.compare, window.drift, window.fp8)]}


def test_an_engine_lost_mid_job_keeps_every_view_s_result_and_says_so_in_one_line(qtbot, tmp_path):
    window = opened(qtbot, session_file(tmp_path, SPEC, DIAGNOSIS, BENCH))
    state = window.controller.state
    state.took_drift(window.spec, DriftResult.from_json(DRIFT))
    state.took_fp8(window.spec, plan(["layer.0", "layer.1"]))
    before = shown(window)
    assert before["findings"] == ["half-on-cpu"] and before["bench"] == (BenchResult.from_json(BENCH), 2)
    assert before["drift"][1] == 3 and before["fp8"][1] == 2 and before["stale"] == [False] * 3
    lost_as_sent(window.worker.engine, ("diagnose", "trace", "drift", "fp8", "bench"))

    starts = {"diagnose": window.run_diagnosis, "trace": lambda: window.open_script("demo:map-cast"),
              "drift": window.compare_with_float32, "fp8": window.plan_fp8,
              "bench": window.run_benchmark}
    lost, failed = [], []
    window.controller.engineLost.connect(lambda *said: lost.append(said))
    window.diagnosisFailed.connect(failed.append)   # a run's end is still announced, as failed
    for kind, start in starts.items():
        with qtbot.waitSignal(window.worker.jobDone, timeout=RUN_TIMEOUT_MS,
                              check_params_cb=lambda job, _outcome: job.kind == kind):
            assert start()
        (said_kind, line), = lost
        assert said_kind == kind and line.startswith(ENGINE_LOST) and "\n" not in line
        assert window.controller.status == line and line in window.log.toPlainText()
        assert shown(window) == before, kind
        assert failed == ([line] if kind in ("diagnose", "trace") else [])
        lost.clear(), failed.clear()
