"""The Compare view on a GPU's document: the verdict, busy time against the rest of each step at
a glance, and empty axes once the figures are gone (Continue as a Pipeline clears them)."""

import pytest

from fp16studio.gui.compare import CompareView

FIGURES = {"ok": True, "stable": True, "spread": 0.01, "peak_memory_bytes": 2**30,
           "weights_bytes": 2**29, "max_abs_diff_vs_float32": 0.0, "top1_agreement": None}
GPU_DOC = {
    "device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3", "note": None,
    "verdict": "float16 pays: 4.17x float32's throughput but launch-bound.",
    "variants": [
        dict(FIGURES, name="float32", samples_per_s=880.0, busy_ms=36.0, overhead_ms=0.3,
             bound="math", kernel_speedup=1.0, verdict="float32 is math-bound.",
             latency_ms={"p50": 36.3, "p90": 37.0, "min": 36.0}),
        dict(FIGURES, name="float16", samples_per_s=3674.0, busy_ms=2.9, overhead_ms=5.8,
             bound="launch", kernel_speedup=12.4, verdict="float16 is launch-bound.",
             latency_ms={"p50": 8.7, "p90": 9.0, "min": 8.6})]}
CPU_DOC = {"device": "cpu", "verdict": "Half precision does not pay on this CPU (2 threads).",
           "variants": [dict(FIGURES, name="float32", samples_per_s=10.0, busy_ms=None,
                             overhead_ms=None, bound=None, kernel_speedup=None,
                             verdict="float32 on this CPU (2 threads): the reference.",
                             latency_ms={"p50": 400.0, "p90": 410.0, "min": 390.0})]}


@pytest.fixture
def view(qtbot):
    widget = CompareView()
    qtbot.addWidget(widget)
    widget.resize(1100, 900)
    widget.show()
    return widget


def test_busy_and_the_rest_of_each_step_are_stacked_per_variant(view):
    view.set_result(GPU_DOC)
    view.finish_drawing()
    assert view._time_plot in view.bars.ci.items
    busy, rest = view._busy_bars.opts, view._overhead_bars.opts
    assert list(busy["width"]) == [36.0, 2.9] and list(rest["x0"]) == [36.0, 2.9]
    assert list(rest["width"]) == [0.3, 5.8]
    assert view.summary.text().startswith("Verdict: float16 pays: 4.17x")
    headers = view.model.headers()
    assert {"Busy ms", "Overhead ms", "Bound", "Kernels vs fp32"} <= set(headers)
    tip = view.model.data(view.model.index(1, 0), 3)  # ToolTipRole on the variant's name
    assert tip == "float16 is launch-bound."


def test_on_a_cpu_there_is_no_time_chart_and_no_gpu_columns(view):
    view.set_result(GPU_DOC)
    view.finish_drawing()
    view.set_result(CPU_DOC)
    view.finish_drawing()
    assert view._time_plot not in view.bars.ci.items
    assert not {"Busy ms", "Bound"} & set(view.model.headers())
    assert "Verdict: Half precision does not pay on this CPU" in view.summary.text()


def test_once_cleared_the_charts_keep_no_names_nor_ranges_of_the_old_figures(view):
    view.set_result(GPU_DOC)
    view.finish_drawing()
    view.clear()
    for plot in view._result_plots:
        assert plot.getAxis("left")._tickLevels is None
        assert [list(r) for r in plot.viewRange()] == [[0.0, 1.0], [0.0, 1.0]]
    assert view.charts.currentWidget() is view.plot
    assert view._time_plot not in view.bars.ci.items


def test_the_log_says_a_variant_this_device_cannot_run_is_unsupported_not_failed(qtbot):
    from fp16studio.core.spec.value import PipelineSpec
    from fp16studio.gui.session_controller import SessionController

    controller = SessionController()
    try:
        logged = []
        controller.logged.connect(lambda level, text: logged.append((level, text)))
        why = "TF32 is a mode of NVIDIA GPUs (compute capability 8.0 or newer)"
        doc = {"device": "cpu", "variants": [
            {"name": "tf32", "ok": False, "support": "unsupported", "error": why},
            {"name": "float16", "ok": False, "support": "native", "error": "boom"}]}
        controller._on_benchmark(PipelineSpec(model="m", dataset="synthetic"), doc)
        assert ("warning", f"tf32: unsupported ({why})") in logged
        assert ("warning", "float16: failed (boom)") in logged
    finally:
        controller.shutdown()
