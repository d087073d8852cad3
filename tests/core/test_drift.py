"""Drift, module by module (`fp16studio drift`), precision-drift and overflow-risk: each code
triggered and not triggered on real runs of tiny models."""

import json

import pytest
import torch
from numerics_zoo import shrunken_tiny_bert, text_spec

from fp16studio.cli import main
from fp16studio.core import InputError, PipelineSpec, diagnose
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.precision.drift import (DRIFT_SQNR_DB, diverged_modules, drift,
                                             module_drifts, parse_variant)
from fp16studio.core.run.compare import OutputRecorder
from fp16studio.core.run.distance import SQNR_CEILING_DB
from fp16studio.core.spec.documents import save_spec


def codes(findings):
    return [f.code for f in findings]


# -- drift --------------------------------------------------------------------------------------

def test_float16_overflow_parts_at_the_first_module_that_overflows(demo_dir):
    result = drift(demo_spec("overflow"))
    doc = result.to_json()
    assert doc["reference"] == "float32" and doc["variant"] == "float16" and not doc["ok"]
    assert doc["first_divergent"] == "bert.encoder.layer.0.intermediate.dense"
    assert doc["output"]["nonfinite"] > 0 and doc["output"]["max_abs_diff"] is None
    finding = result.findings[0]
    assert (finding.code, finding.severity) == ("overflow", "error")
    assert finding.location == doc["first_divergent"]
    # Modules in call order, with the CONTRACT keys; the embeddings before layer 0 agree.
    names = [m["name"] for m in doc["modules"]]
    assert names[0] == "" and names.index("bert.embeddings") < names.index("bert.encoder")
    row = doc["modules"][names.index("bert.embeddings")]
    assert {"name", "class", "max_abs_diff", "cosine", "sqnr_db", "abs_max_float32",
            "abs_max_variant", "nonfinite"} <= set(row)
    assert row["nonfinite"] == 0 and row["sqnr_db"] > 40 and row["cosine"] > 0.999
    dense = doc["modules"][names.index("bert.encoder.layer.0.intermediate.dense")]
    assert dense["abs_max_float32"] > 65504 and dense["nonfinite"] > 0
    # the window and the CLI get the same JSON text, and read it back as the result it was
    assert type(result).from_json(json.loads(json.dumps(doc))).to_json() == doc


def test_bfloat16_of_the_same_model_is_within_tolerance(demo_dir):
    result = drift(demo_spec("overflow"), "bfloat16")
    assert result.ok and not result.findings and result.error is None
    assert result.output.finite and result.output.sqnr_db >= DRIFT_SQNR_DB
    assert result.output.top1_agreement == 1.0


def test_finite_but_drifting_float16_is_precision_drift(demo_dir, numerics_models):
    result = drift(text_spec(demo_dir, numerics_models["drift-bert4"]), "float16")
    assert not result.ok and result.output.finite
    assert result.output.sqnr_db < DRIFT_SQNR_DB
    finding = result.findings[0]
    assert (finding.code, finding.severity) == ("precision-drift", "warning")
    # The offset sits in layer 1's attention output; its LayerNorm is where the signal is lost.
    assert finding.location == "bert.encoder.layer.1.attention.output.LayerNorm"
    assert result.first_divergent == finding.location


def test_a_healthy_model_does_not_drift(demo_dir, numerics_models):
    result = drift(text_spec(demo_dir, numerics_models["plain-bert4"]))
    assert result.ok and not result.findings
    assert result.output.sqnr_db >= DRIFT_SQNR_DB


def test_autocast_variant_and_default_from_the_spec(demo_dir):
    result = drift(demo_spec("healthy").replace(autocast="bfloat16"))
    assert result.variant == "autocast-bfloat16" and result.ok
    with pytest.raises(InputError, match="unknown variant"):
        drift(demo_spec("healthy"), "float64")
    assert [parse_variant(v) for v in ("fp16", "BF16", "autocast-half")] == [
        "float16", "bfloat16", "autocast-float16"]
    with pytest.raises(InputError, match="unknown variant 'float32'"):
        parse_variant("float32")  # the reference is no variant


def test_calls_align_by_path_and_index_when_counts_differ():
    class Twice(torch.nn.Module):
        """Calls its inner layer once in float32, twice in float16."""

        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)
            self.last = torch.nn.Linear(4, 2)

        def forward(self, x):
            x = self.inner(x)
            if x.dtype == torch.float16:
                x = self.inner(x)
            return self.last(x)

    torch.manual_seed(0)
    model, x = Twice(), torch.randn(3, 4)
    with torch.inference_mode(), OutputRecorder(model, keep=True) as reference:
        model(x)
    half = Twice().half()
    half.load_state_dict(model.state_dict())
    with torch.inference_mode(), OutputRecorder(half, against=reference.kept) as variant:
        half(x.half())
    rows = {(m.name, m.call): m for m in module_drifts(reference, variant)}
    # The first call of `inner` meets the first; its second call has no float32 partner.
    assert rows[("inner", 0)].sqnr_db > 40
    assert ("inner", 1) not in rows
    assert rows[("last", 0)].sqnr_db < DRIFT_SQNR_DB  # fed twice-transformed values: it parts


# -- in-place operations: a module's output is compared as the module returned it -------------

def linear_then_relu(dtype):
    """Linear -> ReLU(inplace=True) whose weights and bias bfloat16 holds exactly, as it does
    their products and sums with the inputs below: a bfloat16 copy computes the same values."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[-1.0, -0.5, 0.0, 0.5], [1.0, 0.5, -0.5, 0.0],
                                            [0.5, -1.0, 1.0, -0.5], [-1.0, -1.0, 1.0, -1.0]]))
        model[0].bias.copy_(torch.tensor([0.5, 0.0, -0.5, 0.0]))
    return model.to(dtype)


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode])
def test_an_exact_bfloat16_copy_with_an_in_place_relu_does_not_diverge(grad_mode, read_back):
    x = torch.tensor([[2.0, 1.0, -1.0, 1.0], [1.0, -2.0, 0.0, 2.0]])
    model, half = linear_then_relu(torch.float32), linear_then_relu(torch.bfloat16)
    linear = model[0](x).detach()
    assert torch.equal(half[0](x.bfloat16()).float(), linear)  # bfloat16 is exact here
    with grad_mode(), OutputRecorder(model, keep=True) as reference:
        model(x)
    with grad_mode(), OutputRecorder(half, against=reference.kept) as variant:
        half(x.bfloat16())
    modules = module_drifts(reference, variant)
    assert diverged_modules(modules, variant) == []  # drift's first_divergent: None
    assert [(m.name, m.max_abs_diff, m.cosine, m.sqnr_db) for m in modules] == [
        (name, 0.0, 1.0, SQNR_CEILING_DB) for name in ("", "0", "1")]
    absmax = {m.name: (m.abs_max_float32, m.abs_max_variant) for m in modules}
    assert absmax["0"] == (5.0, 5.0) == (float(linear.abs().max()),) * 2  # as it returned
    # The ReLU's output is the Linear's, changed in place: measured again.
    assert absmax["1"] == absmax[""] == (3.0, 3.0) == (float(linear.clamp(min=0).max()),) * 2


def test_inf_and_nan_are_counted_as_the_module_returned_them(read_back):
    """float16's Linear returns inf and -inf; the in-place ReLU after it makes the -inf 0."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 3, bias=False), torch.nn.ReLU(inplace=True))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[300.0, 0.0], [-300.0, 0.0], [1.0, 0.0]]))
    x = torch.tensor([[300.0, 0.0]])  # 9e4, -9e4, 300: past float16's 65504 twice
    with torch.no_grad(), OutputRecorder(model, keep=True) as reference:
        model(x)
    half = model.half()
    with torch.no_grad(), OutputRecorder(half, against=reference.kept) as variant:
        half(x.half())
    rows = {m.name: m for m in module_drifts(reference, variant)}
    assert (rows["0"].nonfinite, rows["0"].abs_max_variant, rows["0"].abs_max_float32) == (
        2, 300.0, 9e4)
    assert (rows["1"].nonfinite, rows["1"].abs_max_variant) == (1, 300.0)
    assert rows["0"].sqnr_db is None and diverged_modules(list(rows.values()), variant)[0] == "0"


@pytest.mark.parametrize("inference", [False, True])
def test_resnet_in_place_residual_adds_make_no_false_divergence(demo_dir, inference):
    """HF ResNet adds the shortcut into its last convolution's output in place (`hidden_state
    += residual`): the float32 model against an exact copy of itself parts nowhere, and the
    abs-maxima are the trace's (checked against every tensor's abs().max() in test_trace)."""
    import copy

    from fp16studio.core.run.pipeline import prepare, run_forward
    from fp16studio.core.run.trace import Tracer

    spec = demo_spec("healthy")
    prepared = prepare(spec)
    model, twin = prepared.model, copy.deepcopy(prepared.model)
    with OutputRecorder(model, keep=True, inputs=True) as reference:
        run_forward(spec, model, prepared.batch, prepared.device, inference=inference)
    with OutputRecorder(twin, against=reference.kept) as exact:
        run_forward(spec, twin, prepared.batch, prepared.device, inference=inference)
    modules = module_drifts(reference, exact)
    assert len(modules) > 40 and diverged_modules(modules, exact) == []
    assert {(m.max_abs_diff, m.cosine, m.sqnr_db) for m in modules} == {
        (0.0, 1.0, SQNR_CEILING_DB)}
    with Tracer(model) as tracer:
        run_forward(spec, model, prepared.batch, prepared.device, inference=inference)

    def largest(infos):
        return max((t.absmax for t in infos if t.absmax is not None), default=None)

    traced = [(c.name, largest(c.inputs), next(t.absmax for t in c.outputs if t.floating))
              for c in tracer.calls]
    assert [(r["name"], r.get("in_absmax"), r["out_absmax"]) for r in reference.calls] == traced


def test_resnet_in_bfloat16_drifts_nowhere_and_reports_the_output_as_its_own_row(demo_dir):
    result = drift(demo_spec("healthy"), "bfloat16", islands=False)
    assert result.ok and result.first_divergent is None and not result.findings
    # Healthy modules: bfloat16's rounding, 40 dB and more, no figure from a changed reference.
    assert min(m.sqnr_db for m in result.modules) > 35
    # One definition of each distance: the output's figures are those of the model's own row.
    model_row, output = result.modules[0], result.output
    assert (model_row.name, output.name) == ("", "logits")
    assert (model_row.max_abs_diff, model_row.cosine, model_row.sqnr_db) == pytest.approx(
        (output.max_abs_diff, output.cosine, output.sqnr_db))


def test_cli_drift_exit_codes_and_json(demo_dir, capsys):
    assert main(["drift", "demo:overflow", "--variant", "bfloat16"]) == 0
    assert "within tolerance" in capsys.readouterr().out
    assert main(["drift", "demo:overflow", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_divergent"] == "bert.encoder.layer.0.intermediate.dense"
    assert doc["findings"][0]["fixes"][0]["id"] == "float32-islands"
    assert main(["drift", "demo:overflow", "--variant", "float8"]) == 2
    assert "unknown variant" in capsys.readouterr().err


def test_a_model_whose_float32_run_is_nan_is_said_so_in_strict_json(demo_dir, tmp_path, capsys):
    """A NaN in the checkpoint: the float32 reference is NaN too. --json stays strict JSON (no
    bare NaN), and the finding blames no precision and offers float32 as no fix."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(demo_dir / "models/tiny-bert",
                                                               dtype=torch.float32)
    with torch.no_grad():
        model.classifier.bias[0] = float("nan")
    model.save_pretrained(tmp_path / "model")
    AutoTokenizer.from_pretrained(demo_dir / "models/tiny-bert").save_pretrained(tmp_path / "model")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "model", "dataset": "synthetic"}))

    def refuse(constant):
        raise ValueError(f"bare {constant} is not JSON")

    assert main(["drift", str(spec), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert doc["modules"] and any(m["abs_max_float32"] is None for m in doc["modules"])
    [finding] = doc["findings"]
    assert (finding["code"], finding["location"], finding["fixes"]) == ("overflow", "classifier", [])
    assert "float32 run is itself not finite" in finding["message"]


# -- overflow-risk --------------------------------------------------------------------------------

def test_float32_run_near_float16_limits_warns_before_casting(demo_dir):
    report = diagnose(demo_spec("overflow").replace(model_dtype="float32"))
    risk = next(f for f in report.findings if f.code == "overflow-risk")
    assert risk.severity == "warning" and report.ok
    assert risk.location == "bert.encoder.layer.0.intermediate.dense"
    assert risk.evidence["largest abs"] > 65504


def test_values_that_would_flush_to_zero_are_an_overflow_risk(demo_dir, tmp_path):
    report = diagnose(text_spec(demo_dir, shrunken_tiny_bert(demo_dir, tmp_path, 1e-7)))
    risk = next(f for f in report.findings if f.code == "overflow-risk")
    assert risk.location == "bert.embeddings.LayerNorm" and "flush to zero" in risk.message


def test_no_overflow_risk_in_range_or_in_a_float16_run(demo_dir):
    assert "overflow-risk" not in codes(diagnose(demo_spec("blind-half").replace(
        input_dtype=None)).findings)
    # A float16 run with its float32 island: the island's large float32 values are no risk.
    islands = demo_spec("overflow").replace(run_in_float32=["bert.encoder.layer.0"])
    report = diagnose(islands)
    assert report.output.finite and "overflow-risk" not in codes(report.findings)


# -- what the tree's "colour by headroom / drift" reads -----------------------------------------

def test_headroom_and_drift_per_module_roll_up_to_the_parents(demo_dir):
    from fp16studio.core.diagnostics.inventory import drift_by_module, headroom_by_module, rolled_up
    from fp16studio.core.diagnostics.tree_index import TreeIndex

    report = diagnose(demo_spec("overflow").replace(model_dtype="float32"))
    used = rolled_up(headroom_by_module(report.tree, against="float16"))
    assert used["bert.encoder.layer.0.intermediate.dense"] > 1          # past float16's range
    assert used["bert.encoder.layer.0"] == used["model"] > 1            # the parents show it
    assert used["bert.embeddings"] < 1e-3 and used["bert.encoder.layer.1"] < 1e-3
    own = headroom_by_module(report.tree)                               # against float32
    assert own["bert.encoder.layer.0.intermediate.dense"] < 1e-30
    assert TreeIndex(report.tree).headroom == rolled_up(own)  # built with the index, off the GUI
    sqnr = rolled_up(drift_by_module(drift(demo_spec("overflow"), islands=False).modules), min)
    assert sqnr["bert.encoder.layer.0.intermediate.dense"] == float("-inf") == sqnr["model"]
    assert sqnr["bert.embeddings"] > 40


def test_a_variant_that_cannot_run_is_reported_not_raised(demo_dir, zoo, capsys, tmp_path):
    # FNet's FFT has no float16 kernel on this CPU: the variant fails, float32 ran.
    spec = PipelineSpec.from_dict({"model": str(zoo["fnet"]), "dataset": "data/texts.jsonl",
                                   "device": "cpu"}, base_dir=demo_dir)
    result = drift(spec, "float16")
    assert not result.ok and result.error.stage == "float16 forward"
    assert not result.modules and not result.findings
    save_spec(spec, tmp_path / "fnet.json")
    assert main(["drift", str(tmp_path / "fnet.json")]) == 1
    assert "the float16 run failed" in capsys.readouterr().out
