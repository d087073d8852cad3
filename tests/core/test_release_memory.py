"""A diagnosis gives the model's memory back: when it does, nothing of the run holds the weights."""

import gc
import weakref

from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics import diagnosis


def test_nothing_holds_the_model_when_memory_is_released(demo_dir, monkeypatch):
    refs, alive = [], []
    prepare = diagnosis.prepare_model

    def watched(spec, progress):
        loaded, processor = prepare(spec, progress)
        refs.append(weakref.ref(loaded.model))
        return loaded, processor

    def release(device):
        gc.collect()
        alive.append(refs[0]() is not None)

    monkeypatch.setattr(diagnosis, "prepare_model", watched)
    monkeypatch.setattr(diagnosis, "_release_memory", release)
    # The forward pass fails: its exception's traceback reaches the model through its frames.
    result = diagnosis.diagnose(demo_spec("fp16-model"))
    assert result.error is not None and alive == [False]
