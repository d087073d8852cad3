"""The FP8 tab: the FP8 plan of the spec (`fp16studio fp8`, core.precision.fp8, run in the
engine): one row per Linear layer with whether the recipe takes it, its share of the GEMM FLOPs,
its SQNR in FP8 against bfloat16, and what the plan does with it, under the pre-flight checks.

It takes the plan (core.precision.fp8_plan.Fp8Plan, as the engine sends it); the window never
imports torch.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QComboBox, QHBoxLayout, QLabel, QPushButton,
                               QTableView, QVBoxLayout, QWidget)

from fp16studio.core.common.float8 import RECIPES
from fp16studio.core.precision.fp8_plan import Fp8Plan, LayerPlan
from fp16studio.core.present import vocabulary
from .document_rows import DocumentRows
from .fit import share_the_width, stale_note
from .roles import RAW_ROLE

HINT = ("Plan FP8 loads this spec in bfloat16, runs one forward pass on its batch and says, for "
        "each Linear layer, whether FP8 takes it and how much its output loses (SQNR).")


def preflight_line(check: str, ok: bool, message: str) -> str:
    """A pre-flight check (fp8_plan.PreflightCheck, its keys as arguments) in a line."""
    return f"{'✓' if ok else '✗'} {check}: {message}"


STALE = ("This plan is of another version of the spec (an edit, Undo or Redo changed it since): "
         "Plan FP8 again to see the current one's.")


def plan_said(plan: Fp8Plan) -> str:
    """The plan's result in a sentence (the tab's first line, and the Log's)."""
    where = plan.device + (" (emulated)" if plan.emulated else "")
    return (f"FP8 plan ({plan.recipe} on {where}): {len(plan.converted)} of "
            f"{vocabulary.count(len(plan.layers), 'Linear layer')} to FP8, "
            f"{len(plan.keep_bf16)} kept in bfloat16 (SQNR under {plan.threshold_db:g} dB).")


def _plan(row: LayerPlan) -> str:
    if row.keep_bf16:
        return "keep bfloat16 (sensitive)"
    return "FP8" if row.eligible else f"bfloat16: {row.reason}"


COLUMNS = (  # header, the text of a layer's row, its raw value (sorting)
    ("Layer", lambda r: r.name, lambda r: r.name),
    ("Shape", lambda r: f"{r.in_features} x {r.out_features}",
     lambda r: r.in_features * r.out_features),
    ("Eligible", lambda r: "yes" if r.eligible else "no", lambda r: r.eligible),
    ("Share", lambda r: vocabulary.number(r.flops_share, "{:.1%}"), lambda r: r.flops_share),
    ("SQNR dB", lambda r: vocabulary.number(r.sqnr_db, "{:.1f}", "-"), lambda r: r.sqnr_db),
    ("Plan", _plan, lambda r: (r.keep_bf16, r.eligible)),
)


class Fp8Model(DocumentRows):
    """One row per Linear layer of an FP8 plan, in the model's order."""

    def __init__(self, parent=None):
        super().__init__(COLUMNS, "layers", parent)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        row = self.row_at(index)
        if row is None:
            return None
        _, text, raw = COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return text(row)
        if role == RAW_ROLE:
            return raw(row)
        if role == Qt.ItemDataRole.FontRole and row.keep_bf16:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.reason
        return None


class Fp8View(QWidget):
    """The recipe, the Plan FP8 button (`runRequested(recipe)`), the verdict and pre-flight, and
    the table of layers."""

    runRequested = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.recipe = QComboBox()
        self.recipe.addItems(RECIPES)
        self.recipe.setToolTip("torchao's float8 recipe: tensorwise (Ada, Hopper) or rowwise "
                               "(Hopper)")
        self.run_button = QPushButton("Plan FP8")
        self.run_button.clicked.connect(lambda: self.runRequested.emit(self.recipe.currentText()))
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Recipe"))
        bar.addWidget(self.recipe)
        bar.addWidget(self.run_button)
        bar.addStretch(1)
        self.summary = QLabel(HINT)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stale = stale_note(STALE)
        self.model = Fp8Model(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        share_the_width(self.table, {0: 0.35})   # the layer's path elided, its figures in view
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.stale)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)

    def set_result(self, plan: Fp8Plan | None):
        """The FP8 plan, or None (nothing planned)."""
        self.model.set_result(plan)
        if plan is None:
            self.stale.hide()
            self.summary.setText(HINT)
            return
        lines = [plan_said(plan)]
        lines += [preflight_line(**check) for check in plan.preflight]
        self.summary.setText("\n".join(lines))

    def set_stale(self, stale: bool):
        """Mark the plan as another spec's (the spec changed since it was made)."""
        self.stale.setVisible(stale and self.model.rowCount() > 0)

    def show_failure(self, message: str):
        self.model.set_result(None)
        self.stale.hide()
        self.summary.setText(f"The FP8 plan failed: {message}")
