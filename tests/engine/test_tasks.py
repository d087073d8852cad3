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


def test_every_task_returns_a_typed_result_never_a_dict_read_by_key():
    """Issue 39: what the window gets back is an object of the codec's documents (or a plain
    string, or nothing), so it reads attributes, never `.get("…")` on a dict."""
    import dataclasses
    import typing

    import fp16studio.engine.lookups  # noqa: F401  (registers its tasks)

    for name in tasks.TASKS:
        returns = tasks.types_of(name)._returns
        assert returns in (str, type(None)) or dataclasses.is_dataclass(returns), (name, returns)
        assert typing.get_origin(returns) is None, (name, returns)
