"""The Pipeline form: the keys issue 10 added, and what model_dtype auto turns out to be."""

import json

from fp16studio.core import PipelineSpec
from fp16studio.gui.spec_form import SpecForm


def _checkpoint(folder, dtype):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "resnet", "dtype": dtype}))
    return folder


def test_every_new_key_has_a_field_and_edits_the_spec(qtbot):
    form = SpecForm()
    qtbot.addWidget(form)
    form.set_spec(PipelineSpec(model="m", dataset="d"))
    for key in ("model_cast", "label_dtype", "autocast_device", "sampling_rate",
                "run_in_float32"):
        assert key in form.fields, key
    assert "audio" in form.role_combos
    edits = []
    form.specEdited.connect(lambda spec, key: edits.append((key, spec)))
    combo = form.fields["model_cast"].widget
    combo.setCurrentIndex(combo.findData("float16"))
    rate = form.fields["sampling_rate"].widget
    rate.setText("16000")
    rate.editingFinished.emit()
    assert [(key, getattr(spec, key)) for key, spec in edits] == [
        ("model_cast", "float16"), ("sampling_rate", 16000)]
    rate.setText("fast")
    rate.editingFinished.emit()
    assert "sampling_rate" in form.invalid_keys()


def test_load_dtype_auto_explains_itself_and_shows_the_resolved_dtype(qtbot, tmp_path):
    form = SpecForm()
    qtbot.addWidget(form)
    model = _checkpoint(tmp_path / "bf16", "bfloat16")
    form.set_spec(PipelineSpec(model=str(model), dataset="d"))
    assert form.auto_dtype.isHidden()
    form.set_spec(PipelineSpec(model=str(model), dataset="d", model_dtype="auto"))
    assert not form.auto_dtype.isHidden()
    text = form.auto_dtype.text()
    assert "checkpoint's own dtype" in text and "bfloat16, from config.json dtype" in text


def test_a_new_spec_sets_the_fields_it_changes_and_clears_a_rejected_entry(qtbot):
    """An edit (a fix) sets only what it changed; a field showing a rejected entry shows the
    spec's value again even where that value did not change."""
    form = SpecForm()
    qtbot.addWidget(form)
    spec = PipelineSpec(model="m", dataset="d", samples=8)
    form.set_spec(spec)
    rate = form.fields["sampling_rate"].widget
    rate.setText("fast")
    rate.editingFinished.emit()
    assert "sampling_rate" in form.invalid_keys()
    samples = form.fields["samples"].widget
    form.set_spec(spec.replace(model_cast="float16"))
    combo = form.fields["model_cast"].widget
    assert combo.currentData() == "float16"
    assert rate.text() == "" and form.invalid_keys() == {}
    form.set_spec(spec.replace(model_cast="float16", samples=3))
    assert samples.value() == 3 and form.fields["samples"].get() == 3
