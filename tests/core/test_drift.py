"""Drift, module by module (`fp16studio drift`), precision-drift and overflow-risk: each code
triggered and not triggered on real runs of tiny models."""

import json
import pickle

import pytest
import torch

from fp16studio.cli import main
from fp16studio.core import InputError, PipelineSpec, diagnose
from fp16studio.core.demo import demo_spec
from fp16studio.core.drift import (DRIFT_SQNR_DB, Recorder, drift, module_drifts,
                                   parse_variant)
from numerics_zoo import shrunken_tiny_bert, text_spec


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
    json.dumps(doc)  # plain numbers and strings: the window gets it pickled, the CLI as JSON
    assert pickle.loads(pickle.dumps(result)).to_json() == doc


def test_bfloat16_of_the_same_model_is_within_tolerance(demo_dir):
    result = drift(demo_spec("overflow"), "bfloat16")
    assert result.ok and not result.findings and result.error is None
    assert result.output["finite"] and result.output["sqnr_db"] >= DRIFT_SQNR_DB
    assert result.output["top1_agreement"] == 1.0


def test_finite_but_drifting_float16_is_precision_drift(demo_dir, numerics_models):
    result = drift(text_spec(demo_dir, numerics_models["drift-bert4"]), "float16")
    assert not result.ok and result.output["finite"]
    assert result.output["sqnr_db"] < DRIFT_SQNR_DB
    finding = result.findings[0]
    assert (finding.code, finding.severity) == ("precision-drift", "warning")
    # The offset sits in layer 1's attention output; its LayerNorm is where the signal is lost.
    assert finding.location == "bert.encoder.layer.1.attention.output.LayerNorm"
    assert result.first_divergent == finding.location


def test_a_healthy_model_does_not_drift(demo_dir, numerics_models):
    result = drift(text_spec(demo_dir, numerics_models["plain-bert4"]))
    assert result.ok and not result.findings
    assert result.output["sqnr_db"] >= DRIFT_SQNR_DB


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
    with torch.inference_mode(), Recorder(model, keep=True) as reference:
        model(x)
    half = Twice().half()
    half.load_state_dict(model.state_dict())
    with torch.inference_mode(), Recorder(half, against=reference.kept) as variant:
        half(x.half())
    rows = {(m.name, m.call): m for m in module_drifts(reference, variant)}
    # The first call of `inner` meets the first; its second call has no float32 partner.
    assert rows[("inner", 0)].sqnr_db > 40
    assert ("inner", 1) not in rows
    assert rows[("last", 0)].sqnr_db < DRIFT_SQNR_DB  # fed twice-transformed values: it parts


def test_cli_drift_exit_codes_and_json(demo_dir, capsys):
    assert main(["drift", "demo:overflow", "--variant", "bfloat16"]) == 0
    assert "within tolerance" in capsys.readouterr().out
    assert main(["drift", "demo:overflow", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_divergent"] == "bert.encoder.layer.0.intermediate.dense"
    assert doc["findings"][0]["fixes"][0]["id"] == "float32-islands"
    assert main(["drift", "demo:overflow", "--variant", "float8"]) == 2
    assert "unknown variant" in capsys.readouterr().err


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
    assert report.output["finite"] and "overflow-risk" not in codes(report.findings)


# -- what the tree's "colour by headroom / drift" reads -----------------------------------------

def test_headroom_and_drift_per_module_roll_up_to_the_parents(demo_dir):
    from fp16studio.core.inventory import drift_by_module, headroom_by_module, rolled_up
    from fp16studio.core.tree_index import TreeIndex

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
    assert not result.ok and result.error["stage"] == "float16 forward"
    assert not result.modules and not result.findings
    spec.save(tmp_path / "fnet.json")
    assert main(["drift", str(tmp_path / "fnet.json")]) == 1
    assert "the float16 run failed" in capsys.readouterr().out
