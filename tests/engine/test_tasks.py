"""The engine's tasks: a re-run that does not change loading reuses the warm model."""

from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.engine import tasks


def test_a_rerun_in_the_engine_reuses_the_loaded_model(demo_dir, monkeypatch):
    monkeypatch.setattr(tasks, "_warm", None)
    first = tasks.diagnose(demo_spec("healthy"), None, None).diagnosis
    again = tasks.diagnose(demo_spec("fp16-inputs"), None, None).diagnosis  # inputs only differ
    assert first.ok and again.findings
    assert tasks.warm_model().loads == 1
    tasks.warm_model().clear()
