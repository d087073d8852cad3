"""The chart pages on a small screen (issue 43): each axis's title keeps to its axis, so the
Drift tab's two rotated titles and the Compare bars' titles never run into each other; the
whole title on hover."""

from PySide6.QtWidgets import QApplication

from fp16studio.core.precision.drift import DriftResult, ModuleDrift
from fp16studio.core.run.compare import OutputDrift
from fp16studio.gui.drift_view import DriftView


def a_result(modules=40):
    rows = [ModuleDrift(f"encoder.layer.{i}", "Linear", 0, 1e-3, 0.9999, 60.0 - i / 4, 3.0, 3.0, 0)
            for i in range(modules)]
    return DriftResult("float16", "cpu", ok=True, output=OutputDrift(sqnr_db=60.0), modules=rows)


def titles(view):
    """(the axis, its title's rectangle in the scene) of each shown titled axis."""
    found = []
    for plot in (view.sqnr_plot, view.headroom_plot):
        for side in ("left", "bottom"):
            axis = plot.getAxis(side)
            if axis.isVisible() and axis.label.isVisible() and axis.labelText:
                found.append((axis, axis.label.mapRectToScene(axis.label.boundingRect())))
    return found


def test_rotated_titles_keep_to_their_axes_and_never_overlap(qtbot):
    view = DriftView()
    qtbot.addWidget(view)
    view.set_result(a_result())
    view.resize(380, 420)   # the Drift tab at 1024x700: plots some 60 px high
    view.show()
    for _ in range(3):
        QApplication.processEvents()
    shown = titles(view)
    assert shown
    for axis, rect in shown:
        along = axis.sceneBoundingRect()
        if axis.orientation == "left":
            assert along.top() - 1 <= rect.top() and rect.bottom() <= along.bottom() + 1, axis.labelText
    for i, (_, one) in enumerate(shown):
        for _, other in shown[i + 1:]:
            assert not one.intersects(other)
    for plot in (view.sqnr_plot, view.headroom_plot):   # its short form whole ("dB"), not "S…"
        left = plot.getAxis("left")
        shown = left.labelText
        assert shown in (left.whole_title, left.short_title) or left.short_title.startswith(shown[:-1])
        assert left.labelText == left.whole_title or left.toolTip() == left.whole_title


def test_with_room_the_titles_are_whole(qtbot):
    view = DriftView()
    qtbot.addWidget(view)
    view.set_result(a_result())
    view.resize(700, 900)
    view.show()
    for _ in range(3):
        QApplication.processEvents()
    for plot in (view.sqnr_plot, view.headroom_plot):
        axis = plot.getAxis("left")
        assert axis.labelText == axis.whole_title and axis.toolTip() == ""


def test_the_compare_bars_titles_keep_to_their_axes_with_the_unit_where_the_batch_does_not_fit(qtbot):
    """The throughput chart's title names the unit and the batch; where that does not fit (the
    tab at 1024 wide), the unit alone, the whole on hover, never a title cut mid-word nor one
    running into its neighbour's."""
    from fp16studio.core.precision.bench import BenchResult
    from fp16studio.gui.compare import CompareView

    figures = {"ok": True, "samples_per_s": 900.0, "peak_memory_bytes": 2**20, "weights_bytes": 2**19}
    doc = {"device": "cpu", "batch": {"size": 4},
           "variants": [dict(figures, name="float32"), dict(figures, name="autocast-bfloat16")]}
    view = CompareView()
    qtbot.addWidget(view)
    view.set_result(BenchResult.from_json(doc))
    view.finish_drawing()
    view.show()
    for width, whole in ((330, False), (1100, True)):
        view.resize(width, 700)
        for _ in range(3):
            QApplication.processEvents()
        axis = view._speed_plot.getAxis("bottom")
        assert axis.whole_title == "samples/s, batch of 4"
        assert axis.labelText == (axis.whole_title if whole else "samples/s"), width
        assert axis.toolTip() == ("" if whole else axis.whole_title)
        titles = [plot.getAxis("bottom").label.sceneBoundingRect() for plot in view._result_plots[:2]]
        assert not titles[0].intersects(titles[1])
