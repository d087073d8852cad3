"""The tensor tree model: lazy rows, refresh by diff, filtering and sorting."""

import copy

import pytest
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt

from fp16studio.gui.roles import NODE_ROLE, PATH_ROLE
from fp16studio.gui.tree_model import (CHUNK, DTYPE, NAME, SIZE, STATUS, TensorFilterProxy,
                                       TensorTreeModel)
from fp16studio.gui.tree_panel import TensorPanel


def fetch_all(model, parent):
    while model.canFetchMore(parent):
        model.fetchMore(parent)


def child(model, parent, name):
    fetch_all(model, parent)
    for row in range(model.rowCount(parent)):
        index = model.index(row, 0, parent)
        if index.data() == name:
            return index
    raise AssertionError(f"no row {name!r}")


def test_model_passes_qt_model_tester(qtmodeltester, make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(wide=300))
    fetch_all(model, model.index(0, 0))
    qtmodeltester.check(model)


def test_proxy_passes_qt_model_tester(qtmodeltester, make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(problem_at="layer1.w0"))
    proxy = TensorFilterProxy()
    proxy.setSourceModel(model)
    fetch_all(model, model.index(0, 0))
    proxy.set_filter(only_problems=True)
    qtmodeltester.check(proxy)


def test_rows_are_fetched_lazily_in_chunks(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(wide=10_000))
    top = model.index(0, 0)                      # the model
    assert model.hasChildren(top)
    assert model.rowCount(top) == 0 and model.canFetchMore(top)
    big = child(model, top, "big")
    assert model.rowCount(big) == 0              # nothing made until expanded
    model.fetchMore(big)
    assert model.rowCount(big) == CHUNK
    fetch_all(model, big)
    assert model.rowCount(big) == 10_000
    assert not model.canFetchMore(big)


def test_modules_show_subtree_totals_and_worst_status(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(problem_at="layer1.w0"))
    top = model.index(0, 0)
    layer1 = child(model, top, "layer1")
    assert layer1.siblingAtColumn(DTYPE).data() == "mixed"
    assert layer1.siblingAtColumn(SIZE).data() == "96 B"
    assert layer1.siblingAtColumn(STATUS).data() == "error"
    assert top.siblingAtColumn(STATUS).data() == "error"
    assert child(model, top, "layer0").siblingAtColumn(STATUS).data() == "ok"


def test_rerun_with_same_structure_keeps_rows_and_updates_data(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree())
    top = model.index(0, 0)
    w0 = QPersistentModelIndex(child(model, child(model, top, "layer0"), "w0"))
    assert model.index(w0.row(), DTYPE, w0.parent()).data() == "float32"
    again = make_tree()
    again.find("layer0.w0").dtype = "bfloat16"
    model.set_tree(again)
    assert w0.isValid()                          # the same row survived the refresh
    assert model.index(w0.row(), DTYPE, w0.parent()).data() == "bfloat16"
    assert w0.data(NODE_ROLE) is again.find("layer0.w0")


def test_rerun_with_rows_added_at_the_end_keeps_the_rest(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(modules=3))
    layer0 = QPersistentModelIndex(child(model, model.index(0, 0), "layer0"))
    model.set_tree(make_tree(modules=4))
    top = model.index(0, 0)
    assert [model.index(r, 0, top).data() for r in range(model.rowCount(top))] == [
        "layer0", "layer1", "layer2", "layer3"]
    assert layer0.isValid() and layer0.data() == "layer0"


def test_rerun_with_changed_structure_replaces_only_that_level(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(modules=3))
    top = QPersistentModelIndex(model.index(0, 0))
    layer2 = QPersistentModelIndex(child(model, model.index(0, 0), "layer2"))
    model.set_tree(make_tree(modules=2))         # a module fewer: that level changed
    assert top.isValid()                         # the parent row stays (and stays expanded)
    parent = model.index(0, 0)
    assert [model.index(r, 0, parent).data() for r in range(model.rowCount(parent))] == ["layer0", "layer1"]
    assert not layer2.isValid()


def test_filter_reaches_rows_that_were_never_fetched(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree(wide=1000, problem_at="layer2.w1"))
    proxy = TensorFilterProxy()
    proxy.setSourceModel(model)
    proxy.set_filter(only_problems=True)
    top = proxy.index(0, 0)
    fetch_all(proxy, top)
    names = [proxy.index(r, 0, top).data() for r in range(proxy.rowCount(top))]
    assert names == ["layer2"]                   # the problem's ancestors only
    layer2 = proxy.index(0, 0, top)
    fetch_all(proxy, layer2)
    assert [proxy.index(r, 0, layer2).data(PATH_ROLE) for r in range(proxy.rowCount(layer2))] == ["layer2.w1"]
    proxy.set_filter(only_problems=False, dtype="int64")
    assert [proxy.index(r, 0).data() for r in range(proxy.rowCount())] == ["batch"]
    proxy.set_filter(dtype="", text="P99")       # a case-insensitive substring of the path
    big = proxy.index(0, 0, proxy.index(0, 0))
    fetch_all(proxy, big)
    expected = ["p99"] + [f"p99{i}" for i in range(10)]
    assert [proxy.index(r, 0, big).data() for r in range(proxy.rowCount(big))] == expected


def test_proxy_sorts_by_raw_size_not_by_text(make_tree):
    model = TensorTreeModel()
    tree = make_tree()
    sizes = {"w0": 1000, "w1": 200}             # as text "1000 B" would sort before "200 B"
    for name, size in sizes.items():
        tree.find(f"layer0.{name}").bytes = size
    model.set_tree(tree)
    proxy = TensorFilterProxy()
    proxy.setSourceModel(model)
    proxy.sort(SIZE, Qt.SortOrder.AscendingOrder)
    layer0 = child(proxy, child(proxy, QModelIndex(), "Net"), "layer0")
    fetch_all(proxy, layer0)
    assert [proxy.index(r, 0, layer0).data() for r in range(proxy.rowCount(layer0))] == ["w1", "w0"]


def test_panel_reveals_a_deep_node_and_keeps_expansion_across_refresh(qtbot, make_tree):
    panel = TensorPanel()
    qtbot.addWidget(panel)
    tree = make_tree(wide=2000)
    panel.set_tree(tree)
    target = tree.find("big.p1500")              # beyond the first fetched chunks
    assert panel.reveal(target)
    current = panel.tree.currentIndex()
    assert current.data(PATH_ROLE) == "big.p1500"
    big = current.parent()
    assert panel.tree.isExpanded(big)
    panel.set_tree(copy.deepcopy(tree))          # a re-run with the same structure
    assert panel.tree.isExpanded(big)
    assert panel.tree.currentIndex().data(PATH_ROLE) == "big.p1500"


def test_highlighted_rows_are_bold(make_tree):
    model = TensorTreeModel()
    model.set_tree(make_tree())
    layer1 = child(model, model.index(0, 0), "layer1")
    assert layer1.data(Qt.ItemDataRole.FontRole) is None
    model.set_highlighted(["layer1"])
    assert layer1.data(Qt.ItemDataRole.FontRole).bold()


def test_a_tree_and_its_index_survive_the_trip_from_the_engine_process(make_tree):
    import json

    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.spec.value import PipelineSpec
    from fp16studio.core.diagnostics.tree_index import TreeIndex
    from fp16studio.engine.tasks import Diagnosed, types_of
    from fp16studio.session_state import arrived as on_arrival

    tree = make_tree(problem_at="layer1.w0")
    index = TreeIndex(tree)
    spec = PipelineSpec(model="org/model", dataset="synthetic")
    sent = Diagnosed(Diagnosis(spec, "cpu", tree=tree), 1024)
    types = types_of("diagnose")   # what the engine sends, and the window reads, for a run
    came = types.decode_result(json.loads(json.dumps(types.encode_result(sent))))
    diagnosis, arrived, gpu_memory, doc = on_arrival(came.diagnosis, came.gpu_memory)
    assert arrived.root == tree and arrived.root is not tree and gpu_memory == 1024
    assert doc == diagnosis.to_json() and doc["device"] == "cpu"
    node = arrived.by_path["layer1.w0"]
    # The identity-keyed tables were built for the objects that arrived.
    assert [n.path for n in arrived.ancestors(node)] == ["model", "layer1", "layer1.w0"]
    assert arrived.aggregate(arrived.root) == index.aggregate(tree)
    assert arrived.aggregate(arrived.by_path["layer1"]).status == "error"
    assert arrived.dtypes == {"float16", "float32", "int64"}


def wrapped_tree():
    """A model whose layers sit under wrapper modules, as in transformers' encoders."""
    from fp16studio.core.diagnostics.tree import TensorNode

    root = TensorNode("pipeline", "", "group")
    model = root.add(TensorNode("Bert", "model", "module"))
    encoder = model.add(TensorNode("encoder", "encoder", "module"))
    layers = encoder.add(TensorNode("layer", "encoder.layer", "module"))
    block = layers.add(TensorNode("0", "encoder.layer.0", "module"))
    block.add(TensorNode("weight", "encoder.layer.0.weight", "parameter", shape=(2,), dtype="float16",
                         device="cpu", bytes=4))
    block.add(TensorNode("position_ids", "encoder.layer.0.position_ids", "buffer", shape=(2,),
                         dtype="int64", device="cpu", bytes=16))
    model.add(TensorNode("pooler", "pooler", "module")).add(
        TensorNode("bias", "pooler.bias", "parameter", shape=(2,), dtype="float32", device="cpu", bytes=8))
    return root


def test_single_child_chains_fold_into_one_dotted_row(qtbot, qtmodeltester):
    tree = wrapped_tree()
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.set_tree(tree)
    model = panel.model
    bert = model.index(0, 0)
    fetch_all(model, bert)
    assert [model.index(r, 0, bert).data() for r in range(model.rowCount(bert))] == ["encoder.layer.0", "pooler"]
    folded = model.index(0, 0, bert)
    assert folded.data(Qt.ItemDataRole.ToolTipRole).startswith("encoder.layer.0")
    # int64 ids beside float16 weights are not "mixed"; float16 beside float32 is.
    assert folded.siblingAtColumn(DTYPE).data() == "float16"
    assert bert.siblingAtColumn(DTYPE).data() == "mixed"
    assert panel.reveal(tree.find("encoder.layer.0.weight"))
    assert panel.tree.currentIndex().data(PATH_ROLE) == "encoder.layer.0.weight"
    panel.set_tree(copy.deepcopy(tree))          # a re-run: the folded row stays, with its rows
    assert panel.tree.currentIndex().data(PATH_ROLE) == "encoder.layer.0.weight"
    qtmodeltester.check(model)


def test_expanded_rows_keep_their_children_after_a_rerun(qtbot, make_tree):
    panel = TensorPanel()
    qtbot.addWidget(panel)
    tree = make_tree()
    panel.set_tree(tree)
    net = child(panel.proxy, QModelIndex(), "Net")
    layer1 = child(panel.proxy, net, "layer1")
    panel.tree.expand(net)
    panel.tree.expand(layer1)
    panel.set_tree(make_tree(modules=4))         # one more layer: Net's rows change
    net = child(panel.proxy, QModelIndex(), "Net")
    layer1 = child(panel.proxy, net, "layer1")
    assert panel.tree.isExpanded(net)
    assert panel.proxy.rowCount(layer1) == 2 and panel.tree.isExpanded(layer1)


def test_column_titles_fit(qtbot, make_tree):
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 400)
    panel.show()
    header = panel.tree.header()
    for column in range(1, panel.model.columnCount()):
        if not header.isSectionHidden(column):
            title = panel.model.headerData(column, Qt.Orientation.Horizontal)
            assert header.sectionSize(column) >= header.fontMetrics().horizontalAdvance(title) + 16, title
    # Name takes the room the others leave. Abs-max (empty but for activations), then Device
    # and Size fold while Name is short of room, and come back with the room; once the user
    # chose one in the header's menu it stays as chosen (the tree scrolls sideways then).
    from fp16studio.gui.tree_model import ABSMAX
    from fp16studio.gui.tree_panel import NAME_MIN_PX

    shown = sum(header.sectionSize(c) for c in range(header.count()) if not header.isSectionHidden(c))
    assert header.sectionSize(0) > NAME_MIN_PX and shown == panel.tree.viewport().width()
    assert not header.isSectionHidden(ABSMAX)
    panel.resize(420, 400)
    qtbot.waitUntil(lambda: header.isSectionHidden(ABSMAX) and panel.tree.horizontalScrollBar().maximum() == 0)
    assert header.sectionSize(0) >= NAME_MIN_PX
    panel.resize(900, 400)
    qtbot.waitUntil(lambda: header.sectionSize(0) > NAME_MIN_PX and not header.isSectionHidden(ABSMAX))
    assert header.sectionSize(ABSMAX) >= header.fontMetrics().horizontalAdvance("Abs-max") + 16
    panel._choose_column(ABSMAX, True)
    panel.resize(300, 400)
    qtbot.waitUntil(lambda: header.sectionSize(0) == NAME_MIN_PX)
    assert not header.isSectionHidden(ABSMAX) and panel.tree.horizontalScrollBar().maximum() > 0


def test_colour_by_device_headroom_and_drift_with_parents_showing_their_worst(qtbot, make_tree):
    from PySide6.QtGui import QColor

    from fp16studio.core.diagnostics.inventory import rolled_up
    from fp16studio.gui.palette import OKABE_ITO, device_color
    from fp16studio.gui.roles import COLOR_ROLE

    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.set_tree(make_tree())
    model = panel.model
    top = model.index(0, 0)
    layer0, layer1, layer2 = (child(model, top, f"layer{i}") for i in range(3))
    assert top.data(COLOR_ROLE) is None   # by dtype (the default) the names carry no chip

    panel.set_module_values("drift", rolled_up({"layer0": 45.0, "layer1": 12.0}, min))
    panel.colour_by.setCurrentIndex(panel.colour_by.findData("drift"))
    assert model.row_cells(layer0)[layer0.column()].color == QColor(OKABE_ITO["bluish_green"])  # the painter's
    assert layer0.data(COLOR_ROLE) == QColor(OKABE_ITO["bluish_green"])
    assert layer1.data(COLOR_ROLE) == QColor(OKABE_ITO["vermillion"])
    assert layer2.data(COLOR_ROLE) is None                              # not compared
    assert top.data(COLOR_ROLE) == QColor(OKABE_ITO["vermillion"])      # its worst child
    assert "12.0 dB" in layer1.data(Qt.ItemDataRole.ToolTipRole)

    panel.set_module_values("headroom", rolled_up({"layer2": 0.5}))
    panel.colour_by.setCurrentIndex(panel.colour_by.findData("headroom"))
    assert layer2.data(COLOR_ROLE) == QColor(OKABE_ITO["orange"])
    assert layer1.data(COLOR_ROLE) is None

    panel.colour_by.setCurrentIndex(panel.colour_by.findData("device"))
    assert layer0.data(COLOR_ROLE) == QColor(device_color("cpu"))
    panel.colour_by.setCurrentIndex(panel.colour_by.findData("dtype"))
    assert layer0.data(COLOR_ROLE) is None


def test_the_footer_shows_the_inventory_it_is_given_and_counts_nothing_itself(qtbot):
    """The footer is core's inventory (the run's document); a tree alone sets no footer, and
    each group's own total is on its row."""
    from fp16studio.core.diagnostics.tree import TensorNode, summary
    from fp16studio.core.diagnostics.tree_index import TreeIndex

    root = TensorNode("pipeline", "", "group")
    model = root.add(TensorNode("Net", "model", "module"))
    model.add(TensorNode("w", "w", "parameter", shape=(256, 256), dtype="float16", bytes=131072))
    acts = root.add(TensorNode("activations", "activations", "group"))
    for i in range(3):
        acts.add(TensorNode(f"out{i}", f"activations.out{i}", "activation", shape=(1, 8),
                            dtype="float32" if i else "float16", bytes=16))
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.set_tree(root, TreeIndex(root))
    assert panel.summary.text() == "" and panel.inventory is None
    panel.set_inventory(summary(root).to_json())
    assert panel.summary.text() == "65,536 parameters · 4 tensors (float16 2, float32 2) · 128.0 KiB"
    assert "activations" in panel.summary.toolTip()
    groups = {panel.model.index(r, NAME).data(): panel.model.index(r, SIZE).data()
              for r in range(panel.model.rowCount())}
    assert groups == {"Net": "128.0 KiB", "activations": "48 B"}
    panel.set_inventory(None)
    assert panel.summary.text() == ""


def test_the_painter_draws_chips_and_badges_asking_the_model_once_per_row(qtbot, make_tree, monkeypatch):
    """A paint asks the model once per row in view (`row_cells()`): no role asked one by one
    (through the proxy, two calls into Python each), no row asked once per cell, and what it
    returns is drawn: the dtype's chip, the device's badge."""
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QColor

    from fp16studio.gui.palette import device_color, dtype_color
    from fp16studio.gui.tree_model import DEVICE, TensorTreeModel

    from fp16studio.gui import tree_panel

    asked = []

    # A subclass, not the model's methods swapped: PySide keeps the Python method it found for
    # a C++ virtual (`data`), and a swapped one, once put back, left it calling a freed function
    # (a later test's theme switch crashed the process).
    class Counting(TensorTreeModel):
        def data(self, index, role=Qt.ItemDataRole.DisplayRole):
            asked.append(role)
            return super().data(index, role)

        def row_cells(self, index):
            asked.append("row")
            return super().row_cells(index)

    monkeypatch.setattr(tree_panel, "TensorTreeModel", Counting)
    panel = TensorPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 400)
    panel.show()
    qtbot.waitExposed(panel)
    panel.set_tree(make_tree())
    tree, proxy = panel.tree, panel.proxy
    tree.expandAll()
    qtbot.wait(20)
    layer0 = proxy.mapFromSource(child(panel.model, panel.model.index(0, 0), "layer0"))
    w1 = proxy.index(1, 0, layer0)                    # a float16 parameter on the CPU
    rows_in_view, index = 0, tree.indexAt(QPoint(0, 0))
    while index.isValid() and tree.visualRect(index).top() < tree.viewport().height():
        rows_in_view, index = rows_in_view + 1, tree.indexBelow(index)
    asked.clear()
    image = tree.viewport().grab().toImage()
    assert rows_in_view > 3 and asked == ["row"] * rows_in_view

    def centre_of(column, dx):
        rect = tree.visualRect(w1.siblingAtColumn(column))
        return image.pixelColor(rect.left() + dx, rect.center().y())

    assert centre_of(DTYPE, 6 + 5) == QColor(dtype_color("float16"))    # the chip, 10 px wide
    assert centre_of(DEVICE, 6 + 4) == QColor(device_color("cpu"))      # inside the badge


@pytest.mark.parametrize("point_size", [8.5, 10, 13])
def test_a_laid_out_text_is_drawn_where_drawtext_draws_it(qapp, point_size):
    """The tree's painter draws each text laid out once (delegates.Text); it lands on the very
    pixels QPainter.drawText would give it, left, right and centred, plain and bold, and cut at
    the rect's edges where it is wider."""
    from PySide6.QtCore import QRect, QRectF
    from PySide6.QtGui import QFont, QImage, QPainter

    from fp16studio.gui.delegates import Text

    def drawn(paint, font):
        image = QImage(160, 24, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.white)
        painter = QPainter(image)
        painter.setFont(font)
        paint(painter)
        painter.end()
        return image

    rect, pill, narrow = QRect(3, 1, 150, 21), QRectF(20.0, 3.5, 90.0, 17.0), QRect(3, 1, 30, 21)
    left = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
    for bold in (False, True):
        font = QFont()
        font.setPointSizeF(point_size)
        font.setBold(bold)
        text = Text("float16 <b>", font)
        assert drawn(lambda p: text.draw(p, rect), font) == drawn(lambda p: p.drawText(rect, left, "float16 <b>"), font)
        assert drawn(lambda p: text.draw(p, rect, right=True), font) == \
            drawn(lambda p: p.drawText(rect, right, "float16 <b>"), font)
        assert drawn(lambda p: text.draw(p, pill, centred=True), font) == \
            drawn(lambda p: p.drawText(pill, Qt.AlignmentFlag.AlignCenter, "float16 <b>"), font)
        assert drawn(lambda p: text.draw(p, narrow), font) == \
            drawn(lambda p: p.drawText(narrow, left, "float16 <b>"), font)
