"""The warm model: re-runs that do not change loading reuse the weights; anything that does, or
a run that changed the model, loads again, and the old model's memory is given back."""

import json
import weakref

import torch

from fp16studio.core import diagnose
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics import fixing
from fp16studio.core.run.warm import WarmModel, loading_key


def summary(report):
    doc = report.to_json()
    return json.dumps({k: doc[k] for k in ("ok", "findings", "error", "output")}, sort_keys=True,
                      default=str)


def test_a_data_side_edit_reuses_the_model_and_finds_the_same(demo_dir):
    cache = WarmModel()
    first = diagnose(demo_spec("healthy"), warm=cache)
    edited = demo_spec("fp16-inputs")  # same model and loading keys, float16 inputs
    again = diagnose(edited, warm=cache)
    assert cache.loads == 1 and first.ok
    assert summary(again) == summary(diagnose(edited))  # same as a cold run


def test_a_loading_edit_loads_again_and_frees_the_old_model_first(demo_dir, monkeypatch):
    from fp16studio.core.run import pipeline

    cache, refs, old_alive = WarmModel(), [], []
    prepare_model = pipeline.prepare_model

    def spy(spec, progress=None):
        old_alive.append(any(ref() is not None for ref in refs))
        loaded, processor = prepare_model(spec, progress)
        refs.append(weakref.ref(loaded.model))
        return loaded, processor

    monkeypatch.setattr(pipeline, "prepare_model", spy)
    for keys in ({}, {"model_dtype": "bfloat16"}, {"keep_fp32": ("resnet.embedder*",)}):
        diagnose(demo_spec("healthy").replace(**keys), warm=cache)
    assert cache.loads == 3 and old_alive == [False, False, False]  # never two models at once
    cache.clear()
    assert refs[-1]() is None


def test_a_model_changed_by_a_run_is_loaded_again(demo_dir):
    cache = WarmModel()
    spec = demo_spec("healthy")
    loaded, _ = cache.load(spec)
    loaded.model.half()  # what a run must never do to a cached model
    reloaded, _ = cache.load(spec)
    assert cache.loads == 2 and reloaded.model is not loaded.model
    assert {p.dtype for p in reloaded.model.parameters()} == {torch.float32}
    handle = reloaded.model.register_forward_hook(lambda *a: None)  # a hook left behind
    assert cache.load(spec)[0].model is not reloaded.model
    handle.remove()


def test_the_key_follows_the_model_folders_files(demo_dir, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(demo_dir / "models" / "tiny-resnet", folder)
    spec = demo_spec("healthy").replace(model=str(folder))
    before = loading_key(spec)
    assert loading_key(spec.replace(batch_size=2, input_dtype="float16")) == before
    (folder / "config.json").write_text((folder / "config.json").read_text() + "\n")
    assert loading_key(spec) != before


def test_the_fix_loop_loads_once_when_fixes_do_not_touch_loading(demo_dir, monkeypatch):
    loads = []
    original = WarmModel.load

    def counting(self, spec, progress=None):
        before = self.loads
        result = original(self, spec, progress)
        loads.append(self.loads - before)
        return result

    monkeypatch.setattr(WarmModel, "load", counting)
    report, applied = fixing.fix_until_clean(demo_spec("blind-half"))
    assert report.ok and applied and all(step["code"] == "integer-cast" for step in applied)
    assert len(loads) == len(applied) + 1 and sum(loads) == 1


def test_what_a_run_writes_to_the_config_does_not_reach_the_next_run(demo_dir):
    # A classifier records the problem_type its first labels implied: float labels once would
    # make every later run on the warm model multi-label (the csv-labels fix never took).
    cache = WarmModel()
    spec = demo_spec("csv-labels")
    loaded, _ = cache.load(spec)
    loaded.model.config.problem_type = "multi_label_classification"
    again, _ = cache.load(spec)
    assert again.model is loaded.model and cache.loads == 1
    assert again.model.config.problem_type is None
    assert fixing.fix_until_clean(spec)[0].ok
