"""The FP8 tab: Run → Plan FP8 (and the tab's own button) runs the plan in the engine and
shows one row per Linear layer; a layer the plan keeps in bfloat16 stands out."""

from PySide6.QtCore import Qt

from fp16studio.core.precision.fp8_plan import Fp8Plan
from fp16studio.gui import MainWindow
from fp16studio.gui.fp8_view import Fp8View

RUN_TIMEOUT_MS = 120_000


def test_plan_fp8_fills_the_table(qtbot):
    from fp16studio.core.demo.pipelines import demo_spec

    window = MainWindow(demo_spec("blind-half"))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.controller.fp8Finished, timeout=RUN_TIMEOUT_MS) as done:
        window.act_fp8.trigger()
    plan = done.args[0]
    assert window.main_tabs.currentWidget() is window.fp8
    model = window.fp8.table.model()
    rows = [[model.index(r, c).data() for c in range(model.columnCount())]
            for r in range(model.rowCount())]
    assert [row[0] for row in rows] == [layer.name for layer in plan.layers]
    classifier = rows[[row[0] for row in rows].index("classifier")]
    assert classifier[2] == "no" and classifier[5].startswith("bfloat16: out_features 3")
    assert "tensorwise on cpu (emulated)" in window.fp8.summary.text()
    assert "FP8 plan (tensorwise on cpu (emulated)): " in window.log.toPlainText()   # its result
    # The tab's own button, with the recipe chosen there.
    window.fp8.recipe.setCurrentText("rowwise")
    qtbot.waitUntil(lambda: window.fp8.run_button.isEnabled(), timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.controller.fp8Finished, timeout=RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.fp8.run_button, Qt.MouseButton.LeftButton)
    assert done.args[0].recipe == "rowwise"
    assert "rowwise on cpu" in window.fp8.summary.text()


def test_a_layer_kept_in_bfloat16_stands_out(qtbot):
    view = Fp8View()
    qtbot.addWidget(view)
    layer = {"name": "a", "in_features": 64, "out_features": 64, "eligible": True,
             "reason": "FP8 SQNR 3.0 dB, under 20 dB", "flops_share": 0.5, "weight_amax": 1.0,
             "input_amax": 1.0, "weight_scale": 448.0, "input_scale": 448.0,
             "underflow_share": 0.9, "sqnr_db": 3.0, "keep_bf16": True}
    doc = {"recipe": "tensorwise", "device": "cpu", "compute_capability": None,
           "emulated": True, "preflight": [{"check": "torchao", "ok": False, "message": "absent"}],
           "layers": [layer, dict(layer, name="b", sqnr_db=30.0, keep_bf16=False)],
           "keep_bf16": ["a"], "converted": ["b"], "threshold_db": 20.0, "findings": []}
    view.set_result(Fp8Plan.from_json(doc))   # as the engine's plan arrives
    model = view.table.model()
    assert model.index(0, 5).data() == "keep bfloat16 (sensitive)"
    assert model.index(0, 0).data(Qt.ItemDataRole.FontRole).bold()
    assert model.index(1, 5).data() == "FP8" and model.index(1, 0).data(Qt.ItemDataRole.FontRole) is None
    assert "✗ torchao: absent" in view.summary.text()
    view.show_failure("boom")
    assert model.rowCount() == 0 and "boom" in view.summary.text()


def test_the_plan_colours_the_tensor_tree_by_each_layers_sqnr(qtbot, make_tree):
    """Plan FP8 also gives the tensor tree its 'Colour: fp8': the layer the plan keeps in
    bfloat16 (and the module above it) vermillion, one within 5 dB of it orange, an FP8 layer
    well above it green, an unmeasured one none."""
    from PySide6.QtGui import QColor

    from fp16studio.gui.palette import OKABE_ITO
    from fp16studio.gui.roles import COLOR_ROLE
    from tests.gui.test_tree_model import child

    window = MainWindow()
    qtbot.addWidget(window)
    panel = window.tensors
    panel.set_tree(make_tree(modules=4))
    layer = {"in_features": 64, "out_features": 64, "eligible": True, "reason": "",
             "flops_share": 0.3, "sqnr_db": 31.0, "keep_bf16": False}
    doc = {"recipe": "tensorwise", "device": "cpu", "compute_capability": None, "emulated": True,
           "preflight": [],
           "layers": [dict(layer, name="layer0"),
                      dict(layer, name="layer1", sqnr_db=12.0, keep_bf16=True),
                      dict(layer, name="layer2", eligible=False, sqnr_db=None,
                           reason="in_features 6 is not a multiple of 16"),
                      dict(layer, name="layer3", sqnr_db=22.0)],
           "keep_bf16": ["layer1"], "converted": ["layer0"], "threshold_db": 20.0,
           "findings": []}
    window.controller.state.took_fp8(window.spec, Fp8Plan.from_json(doc))   # a plan arrives
    assert window.fp8.table.model().rowCount() == 4
    panel.colour_by.setCurrentIndex(panel.colour_by.findData("fp8"))
    model = panel.model
    top = model.index(0, 0)
    layer0, layer1, layer2, layer3 = (child(model, top, f"layer{i}") for i in range(4))
    assert layer0.data(COLOR_ROLE) == QColor(OKABE_ITO["bluish_green"])
    assert layer1.data(COLOR_ROLE) == QColor(OKABE_ITO["vermillion"])
    assert layer2.data(COLOR_ROLE) is None
    assert layer3.data(COLOR_ROLE) == QColor(OKABE_ITO["orange"])
    assert top.data(COLOR_ROLE) == QColor(OKABE_ITO["vermillion"])
    assert "in FP8, SQNR against bfloat16: 12.0 dB" in layer1.data(Qt.ItemDataRole.ToolTipRole)
