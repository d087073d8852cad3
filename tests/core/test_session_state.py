"""The window's session without a window (fp16studio.session_state): no QApplication, no qtbot.

Each result slot knows the spec it is of; stale, fixes enabled, the findings shown and the spec
a fix applies to follow from the slots; the consent decision asks through a plain callable."""

import dataclasses
import json

import pytest

from fp16studio.core import Finding, Fix, PipelineSpec
from fp16studio.core.diagnostics.report import Diagnosis
from fp16studio.core.diagnostics.tree import TensorNode, summary
from fp16studio.core.diagnostics.tree_index import TreeIndex
from fp16studio.core.precision.bench import BenchResult, VariantResult
from fp16studio.core.precision.drift import DriftResult
from fp16studio.core.precision.fp8_plan import Fp8Plan
from fp16studio.core.script.trace import ScriptTrace
from fp16studio.session_state import (NO_MODEL, RUN, SAVED, TRACE, SessionState,
                                      arrived)

SPEC = PipelineSpec(model="models/tiny", dataset="synthetic", model_dtype="float16")
CAST = Fix("cast-inputs", "Cast the inputs to the model's dtype", {"input_dtype": "float16"})
ISLANDS = Fix("float32-islands", "Run the overflowing modules in float32", {"run_in_float32": ("ffn",)})


def mismatch(fix=CAST):
    return Finding("dtype-mismatch", "error", "layer0", "Half input, float weights", fixes=(fix,))


def diagnosis(spec=SPEC, findings=None, tree=None):
    return Diagnosis(spec, "cpu", findings=[mismatch()] if findings is None else findings, tree=tree)


def drift(findings=None):
    overflow = Finding("overflow", "error", "model.ffn", "inf in float16", fixes=(ISLANDS,))
    return DriftResult("float16", "cpu", findings=[overflow] if findings is None else findings)


def tree():
    root = TensorNode("pipeline", "", "group")
    model = root.add(TensorNode("Net", "model", "module"))
    layer = model.add(TensorNode("layer0", "layer0", "module"))
    layer.add(TensorNode("weight", "layer0.weight", "parameter", shape=(4, 4), dtype="float32",
                         device="cpu", bytes=64))
    batch = root.add(TensorNode("batch", "batch", "group"))
    batch.add(TensorNode("pixel_values", "batch.pixel_values", "input", shape=(2, 4),
                         dtype="float16", device="cpu", bytes=16))
    return root


def state_with_run(spec=SPEC, tree=False):
    state = SessionState()
    state.start(spec)
    root = globals()["tree"]() if tree else None
    state.took_diagnosis(spec, diagnosis(spec, tree=root), TreeIndex(root) if tree else None)
    return state


def test_a_fresh_run_is_current_its_fixes_apply_to_the_spec_run():
    state = state_with_run()
    assert state.findings.of == SPEC and state.findings.origin == RUN
    assert not state.stale and state.run_current and state.fixes_enabled
    assert state.findings_notice() is None and state.tree_notice() is None
    assert [f.code for f in state.findings_shown()] == ["dtype-mismatch"]
    plan = state.plan_fix("cast-inputs")
    assert (plan.fix, plan.base, plan.rerun) == (CAST, SPEC, "diagnose")
    fixed = plan.fixed_spec()
    assert fixed.input_dtype == "float16" and fixed.applied_fixes[-1]["id"] == "cast-inputs"
    assert state.plan_fix("no-such-fix") is None
    assert state.saved_findings() == state.diagnosis_doc and state.diagnosis_doc["ok"] is False


def test_an_edit_makes_the_run_stale_said_so_and_its_fixes_wait_for_the_spec_it_was_found_for():
    state = state_with_run(tree=True)
    edited = SPEC.replace(samples=3)
    state.set_spec(edited)
    assert state.stale and not state.run_current and not state.fixes_enabled
    # Still listed (what was found), but said to be of another spec; nothing of it is fixed:
    # not the edited spec (it was not found there), not the spec run (that drops the edit).
    assert [f.code for f in state.findings_shown()] == ["dtype-mismatch"]
    assert "another version of the spec" in state.findings_notice()
    assert "another version of the spec" in state.tree_notice()
    assert state.plan_fix("cast-inputs") is None
    assert "another version of the spec" in state.why_no_fix("cast-inputs")
    # Nothing is kept beside the slots: back to an equal spec (an undo), current again.
    state.set_spec(SPEC.replace())
    assert not state.stale and state.fixes_enabled and state.findings_notice() is None
    plan = state.plan_fix("cast-inputs")
    assert plan.base == SPEC and plan.fixed_spec().samples == SPEC.samples


def test_a_trace_is_of_no_spec_and_stands_alone():
    state = state_with_run()
    state.took_drift(SPEC, drift())                 # a current drift beside it
    trace = ScriptTrace(SPEC.replace(model="seen"), "cpu", findings=[mismatch()],
                        script="/work/train.py", recovered=False)
    state.took_diagnosis(None, trace)
    assert state.trace is trace and state.findings.of is None and state.findings.origin == TRACE
    assert state.findings_shown() == trace.findings   # not the drift's
    assert not state.stale and not state.fixes_enabled and state.findings_notice() is None
    assert state.plan_fix("cast-inputs") is None and state.plan_fix("float32-islands") is None
    assert state.saved_findings() is None           # not this spec's to save
    assert state.continue_trace() is None           # nothing recovered to continue as


def test_continuing_a_trace_makes_it_a_run_of_the_recovered_spec():
    state = SessionState()
    state.start(SPEC, bench_doc={"variants": []}, path="/work/old.fp16studio")
    recovered = SPEC.replace(model="from-the-script")
    root = tree()
    index = TreeIndex(root)
    trace = ScriptTrace(recovered, "cpu", findings=[mismatch()], tree=root, script="/work/train.py",
                        recovered=True)
    state.took_diagnosis(None, trace, index, 123)
    assert state.located == {"layer0": index.resolve("layer0")} and state.located["layer0"]
    assert state.continue_trace() == recovered
    assert state.spec == recovered and state.path is None and state.bench is None
    assert state.trace is None and state.diagnosis is trace
    assert (state.findings.of, state.findings.origin) == (recovered, RUN)
    assert state.tree_index is index and state.gpu_memory == 123 and state.located
    assert state.diagnosis_doc["spec"] == recovered.to_dict()
    assert state.fixes_enabled and state.plan_fix("cast-inputs").base == recovered


def test_saved_findings_are_shown_never_fixed_from_and_go_stale():
    doc = diagnosis().to_json()
    state = SessionState()
    state.start(SPEC, diagnosis_doc=doc, bench_doc={"variants": []}, path="/work/s.fp16studio")
    assert state.findings.origin == SAVED and state.findings.of == SPEC
    assert [f.code for f in state.findings_shown()] == ["dtype-mismatch"]
    assert state.inventory == doc["inventory"] and state.tree_index is None and state.located == {}
    assert not state.stale and not state.fixes_enabled
    assert "saved with this session" in state.findings_notice()
    assert state.plan_fix("cast-inputs") is None
    assert state.bench.of == SPEC and not state.bench_stale
    assert state.bench_result == BenchResult() and state.saved_bench() == BenchResult().to_json()
    assert state.title(dirty=False) == "s.fp16studio — fp16studio"
    state.set_spec(SPEC.replace(samples=2))
    assert state.stale and state.bench_stale
    assert "another version of the spec" in state.findings_notice()
    # What is saved now: the findings (their document says which spec they are of), not the
    # figures (a bench document does not say it: they would open as the edited spec's).
    assert state.saved_findings() == doc and state.saved_bench() is None


def test_a_saved_run_of_another_spec_opens_stale():
    """A session saved after an edit holds the run of the spec before it: a bfloat16 run's
    "All clear" beside a float16 spec is not that spec's."""
    run = SPEC.replace(model_dtype="bfloat16")
    state = SessionState()
    state.start(SPEC, diagnosis_doc=diagnosis(run, findings=[]).to_json(), path="/work/s.fp16studio")
    assert state.findings.of == run and state.stale and not state.fixes_enabled
    assert "another version of the spec" in state.findings_notice()


def test_a_saved_run_is_its_spec_when_only_the_save_made_its_paths_absolute():
    """Saving to another folder makes relative local paths absolute; the run's document keeps
    them as they were run: the same pipeline, not a stale one."""
    ran = SPEC.replace(model="models/tiny", dataset="data/images", preprocess="prep.py:fn")
    saved = SPEC.replace(model="/home/me/demo/models/tiny", dataset="/home/me/demo/data/images",
                         preprocess="/home/me/demo/prep.py:fn")
    state = SessionState()
    state.start(saved, diagnosis_doc=diagnosis(ran).to_json(), path="/work/s.fp16studio")
    assert state.findings.of == saved and not state.stale
    for other in (saved.replace(model="/home/me/demo/models/other"),
                  saved.replace(preprocess="/home/me/demo/prep.py:g"),
                  saved.replace(samples=3), saved.replace(model="models/tiny/../tiny2")):
        state.start(other, diagnosis_doc=diagnosis(ran).to_json())
        assert state.stale, other


def test_a_trace_under_way_lists_nothing_of_the_pipeline_and_cancelled_gives_it_back():
    state = state_with_run(tree=True)
    state.trace_started("/work/train.py")
    assert state.tracing == "train.py"
    assert state.findings_shown() == [] and not state.fixes_enabled and state.plan_fix("cast-inputs") is None
    assert state.findings_notice().startswith("Tracing train.py")
    assert state.tree_notice().startswith("Tracing train.py")
    assert state.trace_ended() is True and state.tracing is None
    assert [f.code for f in state.findings_shown()] == ["dtype-mismatch"] and state.fixes_enabled
    assert state.trace_ended() is False
    # A trace that arrives (or fails) ends it too.
    state.trace_started("demo:map-cast")
    assert state.tracing == "demo:map-cast"
    state.took_diagnosis(None, ScriptTrace(SPEC, "cpu", findings=[mismatch()], script="/work/train.py"))
    assert state.tracing is None and state.findings_shown() == state.trace.findings
    state.trace_started("/work/train.py")
    state.diagnosis_failed()
    assert state.tracing is None and state.findings_shown() == []


def test_a_current_drift_joins_a_current_run_and_its_fix_compares_again():
    state = state_with_run()
    state.took_drift(SPEC, drift())
    assert state.drift_current and not state.drift_stale
    assert [f.code for f in state.findings_shown()] == ["dtype-mismatch", "overflow"]
    plan = state.plan_fix("float32-islands")
    assert (plan.base, plan.rerun) == (SPEC, "drift")
    assert state.plan_fix("cast-inputs").rerun == "diagnose"


def test_a_stale_run_gives_way_to_a_current_drift_and_a_stale_drift_to_nothing():
    state = state_with_run()
    edited = SPEC.replace(samples=2)
    state.set_spec(edited)
    state.took_drift(edited, drift())
    assert state.stale and state.drift_current and state.fixes_enabled
    assert [f.code for f in state.findings_shown()] == ["overflow"]
    assert state.findings_notice() is None        # what is listed is the current drift's
    assert state.plan_fix("float32-islands").base == edited
    assert state.plan_fix("cast-inputs") is None  # the stale run's: not listed, not fixed
    state.set_spec(edited.replace(samples=5))
    assert state.drift_stale and not state.drift_current and not state.fixes_enabled
    assert [f.code for f in state.findings_shown()] == ["dtype-mismatch"]
    assert state.plan_fix("float32-islands") is None
    state.drift_failed()
    assert state.drift is None and not state.drift_stale


def test_a_drift_alone_is_fixable_without_a_run():
    state = SessionState()
    state.start(SPEC)
    state.took_drift(SPEC, drift())
    assert state.fixes_enabled
    assert state.plan_fix("float32-islands").rerun == "drift"
    assert state.plan_fix("cast-inputs") is None


def test_the_benchmark_is_of_its_spec_and_goes_with_its_model():
    state = SessionState()
    state.start(SPEC)
    state.took_bench(SPEC, BenchResult(variants=[VariantResult("float32")]))
    assert state.bench_result and not state.bench_stale
    state.set_spec(SPEC.replace(batch_size=8))   # same model: the figures stay, stale
    assert state.bench_stale and state.bench_result
    state.set_spec(SPEC.replace(model="models/other"))   # another model: dropped
    assert state.bench is None and not state.bench_stale
    state.took_bench(state.spec, BenchResult())
    state.bench_started()
    assert state.bench_result is None


def test_an_engine_lost_keeps_every_result_and_brings_back_the_figures_a_benchmark_replaced():
    state = state_with_run()
    figures = BenchResult(variants=[VariantResult("float32")])
    state.took_bench(SPEC, figures)
    state.took_drift(SPEC, drift())
    state.bench_started()
    state.engine_lost()
    assert state.bench_result is figures and not state.bench_stale
    assert state.diagnosis is not None and state.drift_result is not None
    state.engine_lost()   # nothing under way: nothing more comes back
    state.bench_started()
    state.set_spec(SPEC.replace(model="models/other"))   # another model's figures are not its
    state.engine_lost()
    assert state.bench is None


FP8 = Fp8Plan("tensorwise", "cpu", None, True)


def test_undo_and_redo_bring_back_the_results_each_spec_had_and_say_what_is_shown():
    state = state_with_run()
    first = state.findings
    state.took_fp8(SPEC, FP8)
    state.took_bench(SPEC, BenchResult(device="cpu"))
    edited = SPEC.replace(samples=3)
    state.set_spec(edited)                             # an edit: nothing of its own yet
    assert state.stale and state.fp8_stale and state.bench_stale
    assert state.results_said() == ("showing no result of this spec (Run to make one), and another "
                                    "version's findings, benchmark and FP8 plan (marked stale)")
    state.took_diagnosis(edited, diagnosis(edited))
    second = state.findings
    state.set_spec(SPEC.replace())                     # Undo: SPEC's own results, current
    assert state.findings is first and not state.stale and state.fixes_enabled
    assert not state.fp8_stale and not state.bench_stale
    assert state.results_said() == "showing this spec's findings, benchmark and FP8 plan"
    state.set_spec(edited)                             # Redo: the edited spec's findings
    assert state.findings is second and not state.stale
    assert state.results_said() == ("showing this spec's findings, and another version's "
                                    "benchmark and FP8 plan (marked stale)")
    state.start(SPEC)                                  # a new start: nothing comes back
    state.set_spec(edited)
    state.set_spec(SPEC)
    assert state.findings is None and state.fp8 is None


def test_results_of_another_model_go_and_come_back_with_it_and_a_new_pipeline_starts_bare():
    state = state_with_run()
    state.took_fp8(SPEC, FP8)
    other = SPEC.replace(model="models/other")
    state.set_spec(other)
    assert state.fp8 is None and state.findings.of == SPEC   # the findings stay, marked stale
    state.set_spec(SPEC)
    assert state.fp8_plan is FP8
    trace = ScriptTrace(other, "cuda:0", findings=[], tree=None, script="/work/train.py",
                        recovered=True)
    state.took_diagnosis(None, trace)
    assert state.fp8_plan is FP8                         # the pipeline's, while the trace is shown
    state.continue_trace()
    assert state.fp8 is None and state.bench is None and state.device == "cuda:0"


def test_each_change_is_announced_once_and_where_results_ran_follows_the_latest():
    state = SessionState()
    said = []
    for name in ("spec", "findings", "stale", "fp8_plan", "fp8_stale", "device", "why_not_continue"):
        state.events.connect(name, lambda value, name=name: said.append(name))
    state.start(SPEC)                                  # a fresh start announces everything
    assert sorted(said) == sorted(["spec", "findings", "stale", "fp8_plan", "fp8_stale", "device",
                                   "why_not_continue"])
    said.clear()
    state.took_bench(SPEC, BenchResult(device="cpu"))
    assert said == ["device"] and state.device == "cpu"
    said.clear()
    state.took_fp8(SPEC, FP8)
    assert said == ["fp8_plan"]                         # still the CPU: no new device
    said.clear()
    state.set_spec(SPEC.replace(samples=2))
    assert said == ["spec", "fp8_stale"]               # no findings: nothing of them is stale


def test_why_continue_is_off_is_said_in_the_users_words():
    state = SessionState()
    state.start(SPEC)
    assert "trace your script first" in state.why_not_continue
    state.trace_started("/work/train.py")
    assert state.why_not_continue == "Continue as a Pipeline waits for the trace of train.py to end."
    trace = ScriptTrace(SPEC, "cpu", findings=[], script="/work/train.py", recovered=False,
                        notes=["no pipeline spec: the batch did not come from load_dataset"])
    state.took_diagnosis(None, trace)
    why = state.why_not_continue
    assert "could not tell from train.py which model and data" in why
    assert "(the batch did not come from load_dataset)" in why and why in state.form_notice()
    state.took_diagnosis(None, dataclasses.replace(trace, recovered=True))
    assert state.why_not_continue is None


def test_a_failed_run_leaves_nothing_of_the_last_one():
    state = SessionState()
    state.start(SPEC)
    root = tree()
    state.took_diagnosis(SPEC, diagnosis(tree=root), TreeIndex(root), 1)
    assert state.located and state.tree_index is not None
    state.diagnosis_failed()
    assert state.diagnosis is None and state.diagnosis_doc is None and state.tree_index is None
    assert state.located == {} and state.inventory is None and not state.stale
    assert not state.fixes_enabled and state.findings_shown() == []


def test_the_inventory_is_cores_summary_of_the_tree():
    root = tree()
    result = arrived(diagnosis(tree=root))
    state = SessionState()
    state.start(SPEC)
    state.took_diagnosis(SPEC, *result)
    assert state.inventory == summary(root).to_json() == result[0].inventory.to_json()
    assert state.inventory == {"parameters": 16, "tensors": 2, "bytes": 80,
                               "dtypes": {"float32": 1, "float16": 1}, "devices": {"cpu": 2}}


def test_the_document_is_made_where_the_result_arrives():
    """The --json document of a result is encoded with the rest of its arrival (the worker
    thread), not again on the GUI thread: the state keeps the one made then."""
    result = arrived(diagnosis(tree=tree()))
    state = SessionState()
    state.start(SPEC)
    state.took_diagnosis(SPEC, *result)
    assert result[3] == result[0].to_json()
    assert state.diagnosis_doc is result[3]


def test_a_blank_pipeline_says_what_is_missing_and_titles_follow_the_file():
    state = SessionState()
    assert state.missing() is None and state.title(dirty=False) == "fp16studio"
    state.start(PipelineSpec(model="", dataset="synthetic"))
    assert state.missing() == NO_MODEL
    state.start(SPEC)
    assert state.missing() is None and state.title(dirty=True) == "models/tiny • — fp16studio"


@pytest.fixture
def received(tmp_path, monkeypatch):
    """A spec file from elsewhere whose preprocess is a .py file beside it, opened as the
    session's file; the trust store is this test's own."""
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "pre.py").write_text("def fn(example):\n    return example\n")
    path = tmp_path / "shared.json"
    path.write_text(json.dumps({"model": "m", "dataset": "synthetic", "preprocess": "pre.py:fn"}))
    from fp16studio.core.spec.documents import load_spec

    state = SessionState()
    state.start(load_spec(path), path=path)
    return state


class Asker:
    def __init__(self, answer):
        self.answer, self.questions = answer, []

    def __call__(self, question):
        self.questions.append(question)
        return self.answer


def test_declined_consent_runs_nothing_and_is_asked_again(received):
    ask = Asker(False)
    consent = received.consent(received.spec, ask)
    assert not consent.granted and consent.question == ask.questions[0]
    assert "pre.py" in consent.question and "'fn'" in consent.question
    assert not received.consent(received.spec, ask).granted and len(ask.questions) == 2


def test_accepted_consent_is_remembered_for_that_content(received, tmp_path):
    ask = Asker(True)
    assert received.consent(received.spec, ask).granted
    assert received.consent(received.spec, ask).granted and len(ask.questions) == 1
    (tmp_path / "pre.py").write_text("def fn(example):\n    return dict(example)\n")
    assert not received.consent(received.spec, Asker(False)).granted   # changed: asked again


def test_a_spec_running_the_models_own_code_asks_too(received, tmp_path):
    """trust_remote_code runs the model folder's code: the window asks as for a preprocess."""
    model = tmp_path / "m"      # a model folder of its own code (a Hub one must be cached first)
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "modeling_m.M"}}))
    (model / "modeling_m.py").write_text("class M:\n    pass\n")
    path = tmp_path / "remote.json"
    path.write_text(json.dumps({"model": str(model), "dataset": "synthetic",
                                "trust_remote_code": True}))
    from fp16studio.core.spec.documents import load_spec

    received.start(load_spec(path), path=path)
    ask = Asker(False)
    consent = received.consent(received.spec, ask)
    assert not consent.granted and "trust_remote_code" in ask.questions[0]


def test_no_code_or_no_file_asks_nothing(received, tmp_path):
    ask = Asker(False)
    assert received.consent(received.spec.replace(preprocess=None), ask).granted
    received.path = None                     # built in the window: the user's own
    assert received.consent(received.spec, ask).granted and not ask.questions


def test_an_unreadable_preprocess_is_said_and_left_to_the_run(received, tmp_path):
    (tmp_path / "pre.py").unlink()
    ask = Asker(False)
    consent = received.consent(received.spec, ask)
    assert consent.granted and consent.note and "pre.py" in consent.note and not ask.questions


def test_a_session_saved_by_the_version_before_opens_whole(tmp_path, monkeypatch):
    """data/saved_by_0.fp16studio was written by the version before the engine spoke codec
    documents (main at 85ad967): through the engine's open task, as its result travels to the
    window, its spec, findings (a fix's code edit too) and figures open, nothing dropped."""
    import shutil
    from pathlib import Path

    from fp16studio.engine.tasks import open_source, types_of

    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    path = tmp_path / "old.fp16studio"
    shutil.copy(Path(__file__).parent / "data" / "saved_by_0.fp16studio", path)
    types = types_of("open")
    sent = types.encode_result(open_source(str(path), progress=lambda *said: None))
    opened = types.decode_result(json.loads(json.dumps(sent)))
    state = SessionState()
    state.start(opened.spec, opened.diagnosis, opened.bench, path)
    assert state.dropped is None and state.spec.keep_fp32 == ("*.norm",)
    [finding] = state.diagnosis.findings
    assert finding.fixes[0].code.text == "model = model.to(torch.bfloat16)"
    assert state.inventory["tensors"] == 1 and state.bench_result == BenchResult.from_json(opened.bench)
