"""A trace continued as a pipeline (issue 43): its findings stay listed, as what the trace of the
script found at its lines, said so over them until a run of the pipeline replaces them."""

from fp16studio.core import Finding, Fix, PipelineSpec
from fp16studio.core.script.trace import ScriptTrace
from fp16studio.session_state import SessionState

SPEC = PipelineSpec(model="models/tiny", dataset="synthetic", model_dtype="float16")
CAST = Fix("cast-inputs", "Cast the inputs to the model's dtype", {"input_dtype": "float16"})


def mismatch():
    return Finding("dtype-mismatch", "error", "layer0", "Half input, float weights", fixes=(CAST,))


def test_a_continued_traces_findings_say_they_are_the_scripts_until_a_run():
    state = SessionState()
    state.start(SPEC)
    recovered = SPEC.replace(model="from-the-script")
    trace = ScriptTrace(recovered, "cpu", findings=[mismatch()], script="/work/train.py", recovered=True)
    state.took_diagnosis(None, trace)
    assert state.findings_notice() is None            # the trace shown as itself
    state.continue_trace()
    notice = state.findings_notice()
    assert notice and "trace of train.py" in notice and "Run" in notice
    assert state.fixes_enabled                         # their fixes are this pipeline's edits
    state.set_spec(recovered.replace(samples=3))
    assert "another version of the spec" in state.findings_notice()
    state.set_spec(recovered.replace())
    assert "trace of train.py" in state.findings_notice()
