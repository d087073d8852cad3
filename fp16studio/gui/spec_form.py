"""The Pipeline panel: one form control per spec key, bound to the current spec.

The form never holds pipeline state of its own. An edit builds `spec.replace(key=value)`; the
spec validates it, so a bad value is marked on its field with the spec's own reason and never
reaches the window, while a good one goes out as `specEdited(new_spec, key)` to the undo stack.

The form scrolls vertically only and is never narrower than its widest row: every control is
whole at any window size, and Tab never scrolls it sideways.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFormLayout, QGroupBox, QLabel, QLineEdit,
                               QSizePolicy, QSpinBox, QVBoxLayout, QWidget)

from fp16studio.core import InputError
from fp16studio.core.spec.value import COLUMN_ROLES, DEVICE_TYPES, LABEL_DTYPES, TASKS
from .fit import ElidedLineEdit, ShrinkingComboBox, VerticalScrollArea
from .pickers import SourcePicker
from .remote_browser import Browse
from .theme import set_icon

DTYPES = ("float32", "float16", "bfloat16")
# The key each label stands for is in its tooltip, with what it means (CONTRACT §1).
HELP = {
    "model": "model: a local folder (save_pretrained layout) or a Hub id org/name",
    "revision": "revision: Hub revision (branch, tag or commit); empty for the default",
    "task": "task: 'auto' reads config.architectures; else the Auto class family to load",
    "trust_remote_code": "trust_remote_code: run the model repository's own Python code",
    "model_dtype": "model_dtype: the dtype the model is loaded in (from_pretrained's dtype=); "
                   "auto = the checkpoint's own dtype, what transformers 5 does without dtype=",
    "model_cast": "model_cast: model.half() / model.to(dtype) after loading: casts everything, "
                  "the library's own float32 modules included",
    "keep_fp32": "keep_fp32: module-name patterns (fnmatch, comma-separated) kept in float32",
    "run_in_float32": "run_in_float32: module-name patterns (comma-separated) that run in float32 "
                      "inside a half model, outputs cast back",
    "device": "device: auto = first CUDA device, else CPU",
    "device_map": "device_map: passed to from_pretrained, e.g. 'auto' to spread over GPUs",
    "dataset": "dataset: a folder, a data file, a Hub id, or 'synthetic' (made from the config)",
    "dataset_config": "dataset_config: the dataset configuration name",
    "split": "split: the split to read",
    "samples": "samples: rows read from the split",
    "batch_size": "batch_size: rows per batch",
    "preprocess": "preprocess: 'path/to/file.py:function' applied with Dataset.map",
    "map_dtype": "map_dtype: the cast your pipeline applies inside Dataset.map",
    "format": "format: the dataset's output format (with_format)",
    "format_dtype": "format_dtype: the dtype= passed to with_format('torch', ...)",
    "with_labels": "with_labels: pass the label column as labels (loss computed)",
    "label_dtype": "label_dtype: labels.long() / .float() before the loss; none keeps the stored dtype",
    "sampling_rate": "sampling_rate: audio is resampled to this rate (Hz) before the feature "
                     "extractor; empty = the extractor's own rate",
    "input_dtype": "input_dtype: cast applied to the batch right before the forward pass",
    "input_cast": "input_cast: 'all' also casts integer tensors (a blind .half())",
    "input_device": "input_device: 'model' = the model's first device, or a device name",
    "autocast": "autocast: run the forward pass under torch.autocast with this dtype",
    "autocast_device": "autocast_device: the device type your torch.autocast(...) names "
                       "(torch.cuda.amp.autocast is cuda); none = the model's own",
    "columns": "columns: which dataset column plays each role (auto-detected when empty)",
    "applied_fixes": "applied_fixes: the fixes applied so far, oldest first",
}


@dataclass
class Field:
    key: str
    widget: QWidget            # the control (or picker)
    get: Callable[[], Any]     # the spec value the control shows
    set: Callable[[Any], None]
    error: QLabel


class SpecForm(VerticalScrollArea):
    specEdited = Signal(object, str)       # the new spec, the key that changed
    modelChanged = Signal(object)          # a spec whose model source is worth looking up
    datasetChanged = Signal(object)

    def __init__(self, parent=None):
        super().__init__(fit_content=True, parent=parent)
        self.spec = None
        self.fields: dict[str, Field] = {}
        self.browse = Browse()   # where Browse looks: this computer, or the engine's box
        body = QWidget(objectName="formBody")
        layout = QVBoxLayout(body)
        layout.setContentsMargins(8, 4, 8, 8)
        layout.setSpacing(6)

        self.model_picker = SourcePicker("Hub id (org/name) or a local folder")
        self.dataset_picker = SourcePicker("folder, data file, Hub id or 'synthetic'",
                                           browse_files=True, fixed=["synthetic"])
        model = self._section(layout, "Model")
        self._picker(model, "model", "Model", self.model_picker, self.modelChanged)
        self._text(model, "revision", "Revision", "default branch")
        self._combo(model, "task", "Task", TASKS)
        self._combo(model, "model_dtype", "Load dtype", ("auto",) + DTYPES)
        # What auto does, and what it turned out to be for this checkpoint (shown for auto only).
        self.auto_dtype = QLabel(objectName="muted", wordWrap=True)
        self.auto_dtype.hide()
        model.addRow("", self.auto_dtype)
        self._combo(model, "model_cast", "Cast after loading", (None,) + DTYPES)
        self._text(model, "keep_fp32", "Keep in float32", "e.g. *.layer_norm, classifier",
                   parse=_patterns, show=", ".join)
        self._text(model, "run_in_float32", "Run in float32", "e.g. *.wo, *norm*",
                   parse=_patterns, show=", ".join)
        self._combo(model, "device", "Device", ("auto", "cpu", "cuda", "cuda:0", "mps"), editable=True)
        self._combo(model, "device_map", "Device map", (None, "auto", "balanced", "sequential"),
                    editable=True)
        self._check(model, "trust_remote_code", "Trust remote code")

        data = self._section(layout, "Dataset")
        self._picker(data, "dataset", "Dataset", self.dataset_picker, self.datasetChanged)
        self._combo(data, "dataset_config", "Config", (None,), editable=True)
        self._combo(data, "split", "Split", ("train",), editable=True)
        self._columns(data)
        self._spin(data, "samples", "Samples", 1, 100_000)
        self._spin(data, "batch_size", "Batch size", 1, 4096)
        self._text(data, "preprocess", "Preprocess", "file.py:function")
        self.preprocess_browse = self._browse_button(self.fields["preprocess"].widget)
        self._combo(data, "map_dtype", "Cast in map", (None,) + DTYPES)
        self._combo(data, "format", "Format", ("torch", "python"))
        self._combo(data, "format_dtype", "Format dtype", (None,) + DTYPES)
        self._check(data, "with_labels", "Pass labels (loss)")
        self._combo(data, "label_dtype", "Label dtype", (None,) + LABEL_DTYPES)
        self._text(data, "sampling_rate", "Sampling rate", "the extractor's own",
                   parse=_rate, show=lambda v: "" if v is None else str(v))

        inputs = self._section(layout, "Forward pass")
        self._combo(inputs, "input_dtype", "Cast inputs to", (None,) + DTYPES)
        self._combo(inputs, "input_cast", "Cast which inputs", ("floating", "all"))
        self._combo(inputs, "input_device", "Inputs on", ("model", "cpu", "cuda"), editable=True)
        self._combo(inputs, "autocast", "Autocast", (None, "float16", "bfloat16"))
        self._combo(inputs, "autocast_device", "Autocast device", (None,) + DEVICE_TYPES)

        self.applied = QLabel(objectName="muted", wordWrap=True)
        self.applied.setToolTip(HELP["applied_fixes"])
        fixes = self._section(layout, "Applied fixes")
        fixes.addRow(self.applied)
        layout.addStretch(1)
        self.setWidget(body)

    # -- browsing -------------------------------------------------------------------------------
    def browse_with(self, browse: Browse):
        """Every Browse of the form through `browse` (the window's: the box's folders while its
        engine runs on one, where the spec's paths are)."""
        self.browse = self.model_picker.browse = self.dataset_picker.browse = browse

    def _browse_button(self, edit) -> QAction:
        """A Browse in the preprocess field: the .py file, its function kept (`file.py:fn`)."""
        action = edit.addAction(QIcon(), QLineEdit.ActionPosition.TrailingPosition)
        set_icon(action, "file")
        action.setToolTip("Choose the preprocess .py file…")
        action.triggered.connect(lambda: self.browse.choose(
            self, "Choose the preprocess file", edit.text().rpartition(":")[0] or edit.text(),
            lambda path: self._preprocess_chosen(edit, path), suffixes=(".py",),
            name_filter="Python files (*.py);;All files (*)"))
        return action

    def _preprocess_chosen(self, edit, path: str):
        """Without a function named yet, the field waits for one (typed after the colon)."""
        text = edit.text()
        function = text.rpartition(":")[2].strip() if ":" in text else ""
        edit.setText(f"{path}:{function}")
        if function:
            self._commit("preprocess")
        else:
            edit.setFocus()
            edit.setCursorPosition(len(edit.text()))
            self._check_live("preprocess")

    # -- binding --------------------------------------------------------------------------------
    def set_spec(self, spec):
        """Show `spec` in every control (without echoing edits back). A control whose value is
        the one it showed already, and valid, is left as it is: an edit (a fix) changes a field
        or two, and setting all 27 took the fix's click 5 ms more (issue 31)."""
        before, self.spec = self.spec, spec
        for field in self.fields.values():
            if (before is not None and getattr(before, field.key) == getattr(spec, field.key)
                    and not field.error.text()):
                continue
            field.widget.blockSignals(True)
            try:
                field.set(getattr(spec, field.key) if field.key != "columns" else spec.columns)
            finally:
                field.widget.blockSignals(False)
            self._mark(field, "")
        if not spec.model:  # a blank pipeline (File → New): say what it needs first
            self._mark(self.fields["model"], "required: a Hub id, a local folder, or one from your cache")
        self._show_auto_dtype(spec)
        names = [fix.get("title", fix.get("id")) for fix in spec.applied_fixes]
        self.applied.setText("\n".join(f"{i}. {name}" for i, name in enumerate(names, 1))
                             or "None yet. Fixes you apply from the Findings panel are listed here.")

    def _show_auto_dtype(self, spec):
        from fp16studio.core.hf.loading import auto_dtype_note

        auto = spec.model_dtype == "auto" and bool(spec.model)
        self.auto_dtype.setVisible(auto)
        if auto:  # two small local files at most (config.json, a safetensors header)
            self.auto_dtype.setText(auto_dtype_note(spec))

    def invalid_keys(self) -> dict[str, str]:
        """key -> the reason its field is marked invalid."""
        return {key: field.error.text() for key, field in self.fields.items() if field.error.text()}

    def _commit(self, key: str):
        if self.spec is None:
            return
        field = self.fields[key]
        try:
            value = field.get()
            if value == getattr(self.spec, key):
                self._mark(field, "")
                return
            new = self.spec.replace(**{key: value})
        except InputError as exc:
            self._mark(field, str(exc))
            return
        self._mark(field, "")
        self.specEdited.emit(new, key)

    def _check_live(self, key: str):
        """Mark a text field while typing; the edit itself is committed when typing ends."""
        if self.spec is None:
            return
        field = self.fields[key]
        try:
            self.spec.replace(**{key: field.get()})
        except InputError as exc:
            self._mark(field, str(exc))
        else:
            self._mark(field, "")

    def _mark(self, field: Field, reason: str):
        widgets = [field.widget] if not isinstance(field.widget, SourcePicker) else [field.widget.edit]
        for widget in widgets:
            if bool(widget.property("invalid")) != bool(reason):
                widget.setProperty("invalid", bool(reason))
                widget.style().unpolish(widget)
                widget.style().polish(widget)
        field.error.setText(reason)
        field.error.setVisible(bool(reason))

    # -- building -------------------------------------------------------------------------------
    def _section(self, layout, title) -> QFormLayout:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        form.setHorizontalSpacing(10)
        form.setVerticalSpacing(6)
        layout.addWidget(box)
        return form

    def _add(self, form, key, label, widget, get, set_) -> Field:
        error = QLabel(objectName="fieldError", wordWrap=True)
        error.hide()
        holder = QWidget()
        column = QVBoxLayout(holder)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(widget)
        column.addWidget(error)
        text = QLabel(label)
        text.setToolTip(HELP[key])
        widget.setToolTip(HELP[key])
        widget.setObjectName(f"field_{key}")
        form.addRow(text, holder)
        field = Field(key, widget, get, set_, error)
        self.fields[key] = field
        return field

    def _picker(self, form, key, label, picker: SourcePicker, changed: Signal):
        self._add(form, key, label, picker, picker.text, picker.set_text)

        def commit(_text):
            self._commit(key)
            if self.spec is not None and not self.fields[key].error.text():
                changed.emit(self.spec)
        picker.committed.connect(commit)

    def _text(self, form, key, label, placeholder, parse=None, show=None):
        edit = ElidedLineEdit(placeholderText=placeholder)
        parse = parse or (lambda text: text.strip() or None)
        show = show or (lambda value: value or "")
        self._add(form, key, label, edit, lambda: parse(edit.text()), lambda v: edit.setText(show(v)))
        edit.editingFinished.connect(lambda: self._commit(key))
        edit.textEdited.connect(lambda _t: self._check_live(key))

    def _combo(self, form, key, label, choices, editable=False):
        combo = ShrinkingComboBox(editable=editable)
        _narrow(combo)
        # None is stored as "" (a null item data cannot be looked up again with findData).
        for choice in choices:
            combo.addItem("none" if choice is None else choice, choice or "")

        def get():
            if editable:
                text = combo.currentText().strip()
                return None if text in ("", "none") else text
            return combo.currentData() or None

        def set_(value):
            index = combo.findData(value or "")
            if index < 0 and editable:
                combo.setEditText("" if value is None else str(value))
            else:
                combo.setCurrentIndex(max(index, 0))
        self._add(form, key, label, combo, get, set_)
        if editable:
            combo.lineEdit().editingFinished.connect(lambda: self._commit(key))
            combo.lineEdit().textEdited.connect(lambda _t: self._check_live(key))
            combo.activated.connect(lambda _i: self._commit(key))
        else:
            combo.currentIndexChanged.connect(lambda _i: self._commit(key))

    def _spin(self, form, key, label, low, high):
        spin = QSpinBox(minimum=low, maximum=high)
        spin.setKeyboardTracking(False)  # commit the number, not every digit typed
        self._add(form, key, label, spin, spin.value, spin.setValue)
        spin.valueChanged.connect(lambda _v: self._commit(key))

    def _check(self, form, key, label):
        box = QCheckBox(label)
        error = QLabel(objectName="fieldError", wordWrap=True)
        error.hide()
        box.setToolTip(HELP[key])
        box.setObjectName(f"field_{key}")
        form.addRow("", box)
        form.addRow("", error)
        self.fields[key] = Field(key, box, box.isChecked, box.setChecked, error)
        box.toggled.connect(lambda _c: self._commit(key))

    def _columns(self, form):
        """Four role choosers that together edit the `columns` key; empty = auto-detect."""
        holder = QWidget()
        grid = QFormLayout(holder)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setVerticalSpacing(4)
        grid.setHorizontalSpacing(6)
        self.role_combos: dict[str, QComboBox] = {}
        for role in COLUMN_ROLES:
            combo = ShrinkingComboBox(editable=True)
            _narrow(combo)
            combo.lineEdit().setPlaceholderText("auto")
            combo.activated.connect(lambda _i: self._commit("columns"))
            combo.lineEdit().editingFinished.connect(lambda: self._commit("columns"))
            grid.addRow("pair" if role == "text_pair" else role, combo)
            self.role_combos[role] = combo

        def get():
            return {role: combo.currentText().strip() for role, combo in self.role_combos.items()
                    if combo.currentText().strip() and combo.currentText().strip() != "auto"}

        def set_(columns):
            for role, combo in self.role_combos.items():
                combo.blockSignals(True)
                combo.setEditText(columns.get(role, ""))
                combo.blockSignals(False)
        self._add(form, "columns", "Columns", holder, get, set_)

    def set_dataset_choices(self, columns, splits, detected: dict, configs=()):
        """Offer the dataset's real columns, configs and splits; show auto-detected roles as
        hints. The current texts stay as they are."""
        for role, combo in self.role_combos.items():
            _offer(combo, [""] + list(columns))
            combo.lineEdit().setPlaceholderText(f"auto: {detected[role]}" if role in detected else "auto")
        config = self.fields["dataset_config"].widget
        _offer(config, ["none", *configs])
        config.lineEdit().setPlaceholderText(f"none (one of {len(configs)})" if configs else "none")
        split = self.fields["split"].widget
        _offer(split, list(splits or [split.currentText()]))


def _offer(combo: QComboBox, names: list):
    """Replace an editable combo's items, keeping what it shows (and emitting nothing)."""
    text = combo.currentText()
    combo.blockSignals(True)
    combo.clear()
    for name in names:
        combo.addItem(name, name)
    combo.setEditText(text)
    combo.blockSignals(False)


def _patterns(text: str) -> list[str]:
    """'a, b ,c' -> ['a', 'b', 'c'] for keep_fp32."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _rate(text: str):
    """'16000' -> 16000 for sampling_rate; empty -> None; anything else goes to the spec to
    refuse with its own reason."""
    text = text.strip()
    return int(text) if text.isdigit() else (text or None)


def _narrow(combo: QComboBox):
    """Let a combo shrink with the panel instead of sizing to its longest choice."""
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(6)
    combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
