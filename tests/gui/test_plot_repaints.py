"""What a plot's repaint redraws: a curve's new samples within the range repaint the curve, not
the axes beside it (an axis with a grid spans its plot, and drawing its ticks, labels and grid
again was most of the live plot's repaint during a benchmark)."""

from fp16studio.gui.compare import CompareView


class _CountedPicture:
    """An axis's drawing (its QPicture), counting how often it is played onto the screen."""

    def __init__(self, picture, played):
        self._picture, self._played = picture, played

    def play(self, painter):
        self._played.append(self)
        return self._picture.play(painter)


def test_new_samples_in_range_repaint_no_axis(qtbot):
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1000, 800)
    view.show()
    qtbot.waitExposed(view)
    for i in range(1, 20):
        view.add_sample({"variant": "float32", "iteration": i, "samples_per_s": 400.0 + i})
    qtbot.waitUntil(lambda: not view._timer.isActive(), timeout=2000)
    plot = view.live
    plot.disableAutoRange()
    plot.setRange(xRange=(0, 100), yRange=(0, 1000), padding=0)
    view.plot.grab()   # the axes drawn once, at this range
    played = []
    axes = [plot.getAxis(side) for side in ("left", "bottom")]
    for axis in axes:
        axis.picture = _CountedPicture(axis.picture, played)
    for i in range(20, 40):
        view.add_sample({"variant": "float32", "iteration": i, "samples_per_s": 400.0 + i})
    qtbot.waitUntil(lambda: not view._timer.isActive(), timeout=2000)   # drawn, then idle
    view.plot.grab()
    assert played == []
    axes[0].picture = None   # as a change of the axis does: drawn anew
    axes[0].update()
    view.plot.grab()
    assert axes[0].picture is not None and not isinstance(axes[0].picture, _CountedPicture)


def test_a_charts_grid_is_drawn_opaque_beneath_its_curves_in_the_colour_it_had(qtbot):
    """Translucent grid lines across a plot were 4-8 ms of the GUI thread each time its axis was
    drawn anew (issue 43): a chart's grid lines are opaque, in the colour the translucent ones
    took over the chart's ground, and beneath its view box, so the curves stay over them."""
    import pyqtgraph as pg
    from PySide6.QtGui import QPainter, QPalette, QPicture

    view = CompareView()
    qtbot.addWidget(view)
    plot = view.live
    ground = view.plot.palette().color(QPalette.ColorRole.Window)

    def grid(specs):
        picture = QPicture()
        painter = QPainter(picture)
        _, ticks, _ = specs(painter)
        painter.end()
        return [pen.color() for pen, _, _ in ticks]

    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        assert axis.zValue() < plot.vb.zValue()
        drawn = grid(axis.generateDrawSpecs)
        translucent = grid(lambda painter: pg.AxisItem.generateDrawSpecs(axis, painter))
        assert len(drawn) == len(translucent) > 3
        assert all(color.alpha() == 255 for color in drawn)
        assert any(color.alpha() < 255 for color in translucent)
        for got, wanted in zip(drawn, translucent):   # over the ground: the same, to rounding
            a = wanted.alphaF()
            for part in ("red", "green", "blue"):
                blend = a * getattr(wanted, part)() + (1 - a) * getattr(ground, part)()
                assert abs(getattr(got, part)() - blend) <= 1


def _wider_names(doc: dict) -> dict:
    """`doc` with its variants under longer names than its first result's, one of them noisy."""
    names = ("float32", "autocast-bfloat16", "bfloat16")
    variants = [{**v, "name": name} for v, name in zip(doc["variants"], names)]
    variants[1].update(ok=True, samples_per_s=300.0, peak_memory_bytes=2**29, spread=0.9, stable=False)
    return {**doc, "variants": variants}


def test_a_results_arrival_draws_each_charts_axes_once(qtbot):
    """Each drawing of a result chart's axis is 2-3 ms of the GUI thread (pyqtgraph's tick
    computation), and a result's arrival drew each of the four three and four times: when its
    page was shown empty, after the verdict above relaid the page out, when the bars were set,
    and after the first drawing learned how wide the variants' names are (issue 43). Now the
    bars are set while their page is hidden, the words set with its showing, the charts painted
    an event after the page, and an axis given its names is as wide as them before it is drawn:
    once each, for a first result and for one whose names are wider."""
    from fp16studio.core.precision.bench import BenchResult

    from tests.gui.test_compare import DOC

    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1100, 900)
    view.show()
    qtbot.waitExposed(view)
    axes = {(plot.title.text, side): plot.getAxis(side)
            for plot in (view._speed_plot, view._memory_plot) for side in ("left", "bottom")}
    drawn = dict.fromkeys(axes, 0)
    texts = {}   # what each axis's last drawing wrote

    def counted(key, specs):
        def generate(painter):
            drawn[key] += 1
            made = specs(painter)
            texts[key] = [text for *_, text in made[2]]
            return made
        return generate

    for key, axis in axes.items():
        axis.generateDrawSpecs = counted(key, axis.generateDrawSpecs)
    for doc in (DOC, _wider_names(DOC)):
        view.clear()
        for i in range(1, 20):
            view.add_sample({"variant": "float32", "iteration": i, "samples_per_s": 400.0 + i})
        qtbot.waitUntil(lambda: not view._timer.isActive(), timeout=2000)
        drawn.update(dict.fromkeys(drawn, 0))
        view.set_result(BenchResult.from_json(doc))
        qtbot.waitUntil(lambda: not view._turns.pending and all(drawn.values()), timeout=3000)
        qtbot.wait(100)   # any drawing the first one asked for
        assert drawn == dict.fromkeys(axes, 1), drawn
        names = [text for _, text in view._speed_plot.getAxis("left")._tickLevels[0]]
        assert texts[("Throughput", "left")] == names   # every name, in the one drawing
    assert "autocast-bfloat16 (noisy)" in names
    # The page is painted an event before its charts: a new benchmark between the two leaves
    # them painted still.
    view.set_result(BenchResult.from_json(DOC))
    qtbot.waitUntil(lambda: view.charts.currentWidget() is view.results and not view.bars.updatesEnabled())
    view.clear()
    assert view.bars.updatesEnabled()
