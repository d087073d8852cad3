"""The spec's `train` (CONTRACT §1): validated like every key, run after the forward pass as the
user's loop runs it, read by the training rules, edited by their fixes, and exported as a
training step that is proven by running it."""

import json
import os
import subprocess
import sys

import pytest

from fp16studio.core import InputError, PipelineSpec, apply_fix, diagnose, export_script
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics.findings import Fix
from fp16studio.core.spec.documents import (Session, load_spec, read_session, save_spec,
                                            write_session)

DEFAULTS = {"optimizer": "adamw", "lr": 1e-3, "eps": None, "steps": 2, "grad_scaler": False,
            "clip_grad_norm": None, "clip_before_unscale": False, "master_weights": False,
            "fp8": None, "fp8_keep": ()}


def spec_with(train, **keys):
    return PipelineSpec.from_dict({"model": "m", "dataset": "synthetic", "with_labels": True,
                                   "train": train, **keys})


# -- the spec -------------------------------------------------------------------------------------
def test_train_is_filled_with_defaults_normalised_frozen_and_hashable():
    spec = spec_with({"optimizer": "torch.optim.Adam", "lr": 1, "clip_grad_norm": 1})
    assert spec.to_dict()["train"] == dict(DEFAULTS, optimizer="adam", lr=1.0, clip_grad_norm=1.0,
                                           fp8_keep=[])
    assert spec_with({}).train == DEFAULTS and spec_with(None).train is None
    assert PipelineSpec(model="m", dataset="d").train is None
    with pytest.raises(TypeError):
        spec.train["lr"] = 2.0
    assert hash(spec) == hash(spec_with({"optimizer": "ADAM", "lr": 1.0, "clip_grad_norm": 1.0}))
    assert spec == spec_with(dict(DEFAULTS, optimizer="adam", lr=1.0, clip_grad_norm=1.0))
    assert PipelineSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("train, words", [
    ({"optimiser": "adam"}, "train: unknown field 'optimiser' (did you mean 'optimizer'?)"),
    ({"optimizer": "lion"}, "train.optimizer: 'lion' is not one of adamw, adam, sgd"),
    ({"lr": -1}, "train.lr: must be a positive number"),
    ({"lr": "1e-3"}, "train.lr: expected a number"),
    ({"lr": True}, "train.lr: expected a number"),
    ({"eps": 0}, "train.eps: must be a positive number or null"),
    ({"steps": 0}, "train.steps: between 1 and"),
    ({"steps": 2.5}, "train.steps: expected a whole number"),
    ({"grad_scaler": "yes"}, "train.grad_scaler: expected true or false"),
    ({"clip_grad_norm": float("nan")}, "train.clip_grad_norm: must be a positive number"),
    (["adam"], "train: expected an object"),
    ({"fp8": "mxfp8"}, "train.fp8: unknown recipe 'mxfp8' (use tensorwise or rowwise;"),
    ({"fp8": 8}, "train.fp8: expected a recipe name (tensorwise, rowwise) or null, got 8"),
    ({"fp8_keep": "lm_head"}, "train.fp8_keep: expected a list of module names"),
    ({"fp8_keep": ["lm_head", 3]}, "train.fp8_keep: expected module names (strings), got 3"),
])
def test_bad_train_values_are_one_line_input_errors(train, words):
    with pytest.raises(InputError) as caught:
        spec_with(train)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_fp8_is_a_recipe_and_fp8_keep_names_each_layer_once_in_order(tmp_path):
    spec = spec_with({"fp8": " RowWise", "fp8_keep": ["b.fc", "a.fc", "b.fc"]})
    assert (spec.train["fp8"], spec.train["fp8_keep"]) == ("rowwise", ("b.fc", "a.fc"))
    assert spec.to_dict()["train"]["fp8_keep"] == ["b.fc", "a.fc"]
    assert hash(spec) == hash(spec_with({"fp8": "rowwise", "fp8_keep": ("b.fc", "a.fc")}))
    path = tmp_path / "spec.json"
    save_spec(spec, path)
    assert load_spec(path) == spec
    assert json.loads(path.read_text())["train"]["fp8"] == "rowwise"
    toml = tmp_path / "spec.toml"
    toml.write_text('model = "m"\ndataset = "synthetic"\nwith_labels = true\n\n[train]\n'
                    'fp8 = "rowwise"\nfp8_keep = ["b.fc", "a.fc"]\n')
    assert load_spec(toml) == spec


def test_an_unknown_fp8_recipe_on_the_command_line_is_exit_2_in_one_line(tmp_path, capsys):
    from fp16studio.cli import main

    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"model": "m", "dataset": "synthetic", "with_labels": True,
                                "train": {"fp8": "nvfp4"}}))
    assert main(["diagnose", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train.fp8: unknown recipe 'nvfp4'" in err


def test_train_needs_labels():
    with pytest.raises(InputError, match="with_labels"):
        spec_with({}, with_labels=False)


def test_train_round_trips_through_json_toml_and_sessions(tmp_path):
    spec = spec_with({"optimizer": "sgd", "lr": 0.5, "grad_scaler": True, "clip_grad_norm": 1.0,
                      "clip_before_unscale": True})
    toml = tmp_path / "spec.toml"
    toml.write_text('model = "m"\ndataset = "synthetic"\nwith_labels = true\n\n[train]\n'
                    'optimizer = "sgd"\nlr = 0.5\ngrad_scaler = true\nclip_grad_norm = 1.0\n'
                    "clip_before_unscale = true\n")
    assert load_spec(toml) == spec
    session = tmp_path / "s.fp16session"
    write_session(Session(spec=spec), session)
    assert read_session(session)[0].spec == spec
    assert json.loads(session.read_text())["spec"]["train"]["clip_before_unscale"] is True


def test_an_unknown_train_field_on_the_command_line_is_exit_2_in_one_line(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"model": "m", "dataset": "synthetic", "with_labels": True,
                                "train": {"optimizer": "adam", "warmup": 10}}))
    done = subprocess.run([sys.executable, "-m", "fp16studio", "diagnose", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "'warmup'" in done.stderr


def test_a_fix_merges_its_train_fields_into_the_specs_own():
    spec = spec_with({"optimizer": "sgd", "lr": 0.5, "clip_grad_norm": 1.0,
                      "clip_before_unscale": True, "grad_scaler": True})
    fixed = apply_fix(spec, Fix("unscale-before-clip", "t", {"train": {"clip_before_unscale": False}}))
    assert fixed.train == dict(spec.train, clip_before_unscale=False)
    assert fixed.applied_fixes[-1]["edits"] == {"train": {"clip_before_unscale": False}}
    assert apply_fix(spec, Fix("no-train", "t", {"train": None})).train is None


# -- a run ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(demo_dir):
    """The demo's tiny BERT classifier on synthetic labelled texts, on the CPU."""
    return demo_spec("csv-labels").replace(dataset="synthetic", device="cpu")


def test_adam_on_half_weights_breaks_at_step_0_and_master_weights_fix_it(tiny):
    spec = tiny.replace(model_cast="float16", train={"optimizer": "adam", "lr": 1e-3})
    report = diagnose(spec)
    assert not report.ok
    finding = next(f for f in report.errors)
    assert (finding.code, finding.evidence["step"], finding.evidence["phase"]) == \
        ("optimizer-precision", 0, "optimizer")
    assert finding.evidence["eps in dtype"] == {"float16": 0.0}
    first, second = finding.fixes[:2]
    assert first.id == "master-weights-float16"
    assert first.edits["train"] == {"master_weights": True, "grad_scaler": True}
    assert (second.id, second.edits) == ("optimizer-eps", {"train": {"eps": 1e-4}})
    assert second.code_text().startswith(   # the spec's Adam, not AdamW
        "optimizer = torch.optim.Adam(model.parameters(), eps=1e-4)")
    doc = report.to_json()
    json.dumps(doc, allow_nan=False)
    assert [(s["index"], s["finite"]) for s in doc["steps"]] == [(0, True), (1, False)]
    assert doc["steps"][0]["first_nonfinite"]["phase"] == "optimizer"

    fixed = apply_fix(spec, first)
    assert fixed.train == dict(spec.train, master_weights=True, grad_scaler=True)
    assert (fixed.model_cast, fixed.model_dtype, fixed.autocast) == (None, "float32", "float16")
    after = diagnose(fixed)
    assert after.ok and after.error is None, [f.code for f in after.findings]
    assert not [f for f in after.findings if f.code in ("optimizer-precision", "grad-overflow",
                                                        "scaler-misuse", "overflow")]
    assert [s.finite for s in after.steps] == [True, True]


def test_clip_before_unscale_is_scaler_misuse_and_its_fix_reorders(tiny):
    spec = tiny.replace(autocast="float16", train={
        "optimizer": "sgd", "lr": 0.5, "grad_scaler": True, "clip_grad_norm": 1.0,
        "clip_before_unscale": True})
    report = diagnose(spec)
    misuse = [f for f in report.findings if f.code == "scaler-misuse"]
    assert [(f.severity, f.location, f.evidence["step"]) for f in misuse] == \
        [("error", "clip_grad_norm_", 0)]                     # once, at the first step
    assert misuse[0].evidence["calls"] == ["scale", "clip", "step", "update"]
    fix = misuse[0].fixes[0]
    assert (fix.id, fix.edits) == ("unscale-before-clip", {"train": {"clip_before_unscale": False}})
    after = diagnose(apply_fix(spec, fix))
    assert after.ok and not [f for f in after.findings if f.code == "scaler-misuse"]


def test_the_fix_loop_reruns_training_on_the_warm_model_as_a_fresh_run_would(tiny):
    from fp16studio.core.diagnostics.fixing import fix_until_clean

    spec = tiny.replace(autocast="float16", train={
        "optimizer": "sgd", "lr": 0.5, "grad_scaler": True, "clip_grad_norm": 1.0,
        "clip_before_unscale": True})
    report, applied = fix_until_clean(spec)   # the fix edits train only: the model stays loaded
    assert report.ok and applied == [{"round": 1, "code": "scaler-misuse",
                                      "fix": "unscale-before-clip"}]
    assert report.steps == diagnose(report.spec).steps


def test_a_healthy_training_spec_is_clean(tiny):
    spec = tiny.replace(autocast="bfloat16", train={"optimizer": "adamw", "clip_grad_norm": 1.0})
    report = diagnose(spec)
    assert report.ok and report.findings == [] and report.error is None
    assert [s.finite for s in report.steps] == [True, True]
    assert report.steps[1].loss != report.steps[0].loss   # the weights moved
    assert "train" in report.timings
    assert diagnose(tiny).steps == []                           # no train: inference only


def test_a_grad_scaler_on_half_weights_is_a_finding_not_a_crash(tiny):
    report = diagnose(tiny.replace(model_cast="float16", train={"grad_scaler": True}))
    assert report.error.stage == "train" and "unscale FP16" in report.error.message
    finding = next(f for f in report.errors if f.code == "scaler-misuse")
    assert finding.fixes[0].id == "master-weights-float16"


def test_the_training_steps_leave_the_model_as_they_found_it(tiny):
    import torch

    from fp16studio.core.run.pipeline import prepare
    from fp16studio.core.run.train_steps import run_train_steps

    spec = tiny.replace(train={"optimizer": "sgd", "lr": 10.0})
    prepared = prepare(spec)
    model = prepared.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run = run_train_steps(spec, model, prepared.batch, prepared.device, {})
    assert [s.done for s in run.steps] == [True, True] and run.exception is None
    assert run.steps[0].optimizers[0].cls == "SGD"
    assert not model.training and all(p.grad is None for p in model.parameters())
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


# -- the export -----------------------------------------------------------------------------------
def run_exported(spec, tmp_path, name):
    script = tmp_path / f"{name}.py"
    text = export_script(spec, script)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert done.returncode == 0, done.stderr[-3000:]
    return text, json.loads(done.stdout.strip().splitlines()[-1])["steps"]


def in_order(text, *parts):
    where = [text.index(part) for part in parts]
    return where == sorted(where)


def test_the_exported_training_step_runs_as_the_app_ran_it(tiny, tmp_path):
    broken = tiny.replace(model_cast="float16", train={"optimizer": "adam", "clip_grad_norm": 1.0})
    report = diagnose(broken)
    fixed = apply_fix(broken, report.errors[0].fixes[0])   # master weights, autocast, a scaler
    for name, spec in (("broken", broken), ("fixed", fixed)):
        text, steps = run_exported(spec, tmp_path, name)
        in_app = diagnose(spec).steps
        assert [s["finite"] for s in steps] == [s.finite for s in in_app], name
        for mine, app in zip(steps, in_app):
            if app.finite:
                assert mine["loss"] == pytest.approx(app.loss, rel=1e-4), name
    assert [s["finite"] for s in steps] == [True, True]
    assert "torch.optim.Adam(params, lr=0.001)" in text
    assert "torch.amp.GradScaler(" in text and "torch.autocast(device_type, dtype=torch.float16)" in text
    assert in_order(text, "scaler.scale(loss).backward()", "scaler.unscale_(optimizer)",
                    "clip_grad_norm_(params, 1.0)", "scaler.step(optimizer)", "scaler.update()")
    assert "# Fix applied: float32 master weights" in text


def test_the_export_reproduces_the_users_wrong_order_and_says_so(tiny, tmp_path):
    spec = tiny.replace(autocast="float16", train={
        "optimizer": "sgd", "lr": 0.5, "grad_scaler": True, "clip_grad_norm": 1.0,
        "clip_before_unscale": True})
    text, steps = run_exported(spec, tmp_path, "wrong-order")
    assert "scaler.unscale_(" not in text
    assert in_order(text, "scaler.scale(loss).backward()", "BEFORE scaler.unscale_. A mistake",
                    "clip_grad_norm_(params, 1.0)", "scaler.step(optimizer)")
    assert [s["loss"] for s in steps] == pytest.approx([s.loss for s in diagnose(spec).steps],
                                                       rel=1e-4)


def test_master_weights_over_half_weights_export_a_float32_copy(tiny, tmp_path):
    spec = tiny.replace(model_cast="bfloat16", train={"optimizer": "sgd", "lr": 1e-4,
                                                      "master_weights": True})
    text, steps = run_exported(spec, tmp_path, "masters")
    assert "masters = [torch.nn.Parameter(p.detach().float())" in text
    assert "torch.optim.SGD(masters, lr=0.0001)" in text and "p.copy_(master)" in text
    report = diagnose(spec)
    assert report.ok and not [f for f in report.findings if f.code == "optimizer-precision"]
    assert [s["loss"] for s in steps] == pytest.approx([s.loss for s in report.steps], rel=1e-4)


# -- a traced script's recovered spec -------------------------------------------------------------
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts")

# script, what plain python prints, the error code, the recovered train
TRACED = [
    ("train_pipeline_adam_half.py", "step 1: loss nan", "optimizer-precision",
     {"optimizer": "adam", "lr": 1e-3}),
    ("train_pipeline_clip_scaled.py", "grad norm 2", "scaler-misuse",
     {"optimizer": "sgd", "lr": 0.5, "grad_scaler": True, "clip_grad_norm": 1.0,
      "clip_before_unscale": True}),
]


@pytest.mark.parametrize("case", TRACED, ids=[c[0] for c in TRACED])
def test_a_traced_training_loop_is_recovered_with_its_train_and_reproduces(demo_dir, case):
    from fp16studio.core.script.trace import trace_script

    name, printed, code, train = case
    script = os.path.join(SCRIPTS, name)
    plain = subprocess.run([sys.executable, script, str(demo_dir)], capture_output=True,
                           text=True, timeout=300)
    assert printed in plain.stdout
    result = trace_script(script, [str(demo_dir)])
    assert code in {f.code for f in result.errors}
    spec = result.recovered_spec
    assert spec is not None and result.notes == [], result.notes
    assert spec.train == dict(DEFAULTS, **train) and spec.with_labels
    assert result.to_json()["spec"]["train"] == spec.to_dict()["train"]
    # What the trace checked: the spec, diagnosed, comes to the script's errors; its first fix
    # makes it clean.
    report = diagnose(spec)
    assert {f.code for f in report.errors} == {f.code for f in result.errors}
    fixed = apply_fix(spec, next(f for f in report.errors if f.code == code).fixes[0])
    assert diagnose(fixed).ok


def test_a_loop_whose_loss_a_spec_cannot_say_offers_no_spec(demo_dir):
    from fp16studio.core.script.trace import trace_script

    result = trace_script(os.path.join(SCRIPTS, "train_pipeline_own_loss.py"), [str(demo_dir)])
    assert "optimizer-precision" in {f.code for f in result.errors}
    assert result.recovered_spec is None and result.to_json()["spec"] is None
    assert "computes its loss outside the model" in result.notes[0]


def test_a_spec_that_does_not_come_to_the_scripts_outcome_is_refused_with_the_reason(tiny):
    from fp16studio.core.diagnostics.findings import Finding
    from fp16studio.core.diagnostics.report import RunError
    from fp16studio.core.script.recover import outcome_difference, reproduction

    spec = tiny.replace(autocast="bfloat16", train={"optimizer": "adamw"})
    ours = Finding("value-out-of-range", "error", "pool", "a -1e9 of the script's own")
    assert reproduction(spec, [ours], None) == \
        "diagnosing the recovered spec does not find value-out-of-range"
    half = Finding("half-on-cpu", "warning", "model", "")
    broke = Finding("optimizer-precision", "error", "w", "")
    assert outcome_difference([half], None, [half], None) == ""
    assert outcome_difference([], None, [broke], None) == \
        "diagnosing the recovered spec finds optimizer-precision, which the script did not show"
    assert outcome_difference([], RunError("ValueError", "boom"), [half], None) == \
        "diagnosing the recovered spec runs clean where the script failed (ValueError)"


def test_the_eps_fix_writes_the_users_own_optimizer_class():
    from fp16studio.core.diagnostics.rules.edits import optimizer_eps
    from fp16studio.core.run.training import OptimizerStep

    def code(cls, module):
        step = OptimizerStep(cls, {}, {}, 1e-8, {}, 1e-3, module=module)
        return optimizer_eps(step.code).code_text().split("(")[0]

    assert code("RMSprop", "torch.optim.rmsprop") == "optimizer = torch.optim.RMSprop"
    assert code("AdamW8bit", "bitsandbytes.optim.adamw") == "optimizer = AdamW8bit"
