"""`fp16studio trace` follows a script's training steps: the loss each step, the backward pass,
the optimizer and the GradScaler. Each script fails the same way under plain python first."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fp16studio.core.script.trace import trace_script
from json_schemas import parsed

SCRIPTS = Path(__file__).parent.parent / "scripts"


def line_of(script: Path, text: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def plain_python(script: Path) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    return done.stdout + done.stderr


# script, what plain python prints, code, severity, location, step, phase, the line, first fix
CASES = [
    ("train_adam_half.py", "step 1: loss nan", "optimizer-precision", "error",
     "bert.embeddings.word_embeddings.weight", 0, "optimizer", "optimizer.step()  # optimizer step",
     "master-weights-float16"),
    ("train_backward_overflow.py", "gradients finite: False", "grad-overflow", "error",
     "classifier", 0, "backward", "(loss * LOSS_SCALE).backward()", "master-weights-float16"),
    ("train_loss_overflow.py", "step 0: loss inf", "overflow", "error", "loss", 0, "forward",
     "loss.backward()  # backward", "master-weights-float16"),
    ("train_clip_scaled.py", "grad norm 37759.5", "scaler-misuse", "error", "clip_grad_norm_",
     0, None, "clip_grad_norm_(model", "unscale-before-clip"),
    ("train_bf16_no_master.py", "moved in 3 steps: 7.81%", "optimizer-precision", "warning",
     "SGD param_groups[0]", 0, None, "optimizer.step()  # optimizer step",
     "master-weights-bfloat16"),
    ("train_scaler_bf16.py", "", "scaler-misuse", "warning", "GradScaler", 0, None,
     "scaler.scale(loss).backward()  # scaled", "drop-grad-scaler"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_training_step_traces_to_its_code_step_phase_line_and_first_fix(case):
    name, printed, code, severity, location, step, phase, line, first_fix = case
    script = SCRIPTS / name
    assert printed in plain_python(script)
    result = trace_script(script)
    finding = next(f for f in result.findings if f.code == code)
    assert (finding.severity, finding.location) == (severity, location)
    assert finding.source == {"file": str(script), "line": line_of(script, line)}
    assert finding.evidence["step"] == step
    assert finding.fixes[0].id == first_fix
    doc = result.to_json()
    assert [s["index"] for s in doc["steps"]] == [0, 1]
    if phase is not None:
        first = next(s for s in doc["steps"] if s["first_nonfinite"])
        assert (first["index"], first["first_nonfinite"]["phase"]) == (step, phase)
        assert finding.evidence["phase"] == phase
    if phase == "backward":   # the tree shows the step's gradients as it shows activations
        node = result.tree.find(f"gradients.{location}")
        assert node.kind == "gradient" and node.nonfinite and node.status == "error"
    assert result.ok is (severity != "error")


def test_the_adam_step_says_eps_is_zero_in_float16_and_losses_are_recorded():
    result = trace_script(SCRIPTS / "train_adam_half.py")
    finding = next(f for f in result.findings if f.code == "optimizer-precision")
    assert finding.evidence["eps"] == 1e-8 and finding.evidence["eps in dtype"] == {"float16": 0.0}
    assert "1e-08 is 0 in float16" in finding.message
    steps = result.to_json()["steps"]
    assert steps[0]["finite"] and abs(steps[0]["loss"] - 0.694) < 0.01
    assert not steps[1]["finite"] and steps[1]["loss"] is None   # strict JSON: no NaN
    json.dumps(result.to_json(), allow_nan=False)


@pytest.mark.parametrize("name", ["train_healthy.py", "train_shape_error.py"])
def test_healthy_training_and_a_shape_error_have_no_precision_finding(name):
    result = trace_script(SCRIPTS / name)
    assert not [f for f in result.findings if f.code != "device-unavailable"], result.findings
    if name == "train_healthy.py":
        assert result.ok and [s["finite"] for s in result.to_json()["steps"]] == [True, True]
    else:
        assert result.error.type == "ValueError" and result.steps == []


def test_steps_zero_follows_nothing_after_the_first_forward():
    result = trace_script(SCRIPTS / "train_adam_half.py", steps=0)
    assert result.steps == []
    assert not [f for f in result.findings if f.code == "optimizer-precision"]


def test_steps_on_the_command_line_and_exit_1_for_a_nan_the_script_only_prints():
    script = SCRIPTS / "train_adam_half.py"
    done = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script), "--json",
                           "--steps", "3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert len(parsed("trace", done.stdout)["steps"]) == 3
    bad = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script), "--steps",
                          "many"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "steps" in bad.stderr and "Traceback" not in bad.stderr


def test_the_steps_in_one_line_say_the_losses_and_where_inf_nan_came_first():
    from fp16studio.core.diagnostics.report import NonFinite, StepRecord
    from fp16studio.core.present.vocabulary import steps_summary

    steps = [StepRecord(0, 0.6943, True, 0),
             StepRecord(1, None, False, 0, NonFinite("forward", "loss"))]
    assert steps_summary(steps) == ("Training steps (loss): 0: 0.6943, 1: inf/NaN; inf/NaN "
                                    "first at step 1, forward, loss")
    assert steps_summary(steps[:1]).endswith("all finite")
    assert steps_summary([]) == ""

