"""Float32 islands: `run_in_float32` as loaded, the search that finds them as the first fix of
`overflow` and `precision-drift`, and the exported script that runs them."""

import json
import subprocess
import sys

import pytest
import torch
from numerics_zoo import shrunken_tiny_bert, text_spec

from fp16studio.core import PipelineSpec, apply_fix, diagnose, export_script
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics.islands import bisect, candidates, max_passes
from fp16studio.core.precision.drift import drift
from fp16studio.core.run.trace import Tracer


# -- run_in_float32 as loaded -------------------------------------------------------------------

def test_islands_keep_float32_weights_and_cast_at_their_boundaries(demo_dir):
    from fp16studio.core.run.pipeline import forward, prepare

    island = "bert.encoder.layer.0"
    spec = demo_spec("overflow").replace(run_in_float32=[island, island + ".output*"])
    prepared = prepare(spec)
    model = prepared.model
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    assert all(d == torch.float32 for n, d in dtypes.items() if n.startswith(island + "."))
    assert all(d == torch.float16 for n, d in dtypes.items() if not n.startswith(island + "."))
    # The checkpoint's own float32 weights, not a float16 round trip (which makes some inf).
    reference = prepare(spec.replace(model_dtype="float32", run_in_float32=[])).model
    weight = "bert.encoder.layer.0.intermediate.dense.weight"
    assert torch.equal(model.get_parameter(weight), reference.get_parameter(weight))
    with Tracer(model) as tracer:
        output = forward(prepared)
    layer = next(c for c in tracer.calls if c.name == island)
    inner = next(c for c in tracer.calls if c.name == island + ".output")
    assert {t.dtype for t in layer.inputs if t.floating} == {"float32"}   # cast up on the way in
    assert layer.outputs[0].dtype == "float16"                            # and back on the way out
    assert inner.outputs[0].dtype == "float32"   # a pattern inside an island: no second boundary
    assert torch.isfinite(output.logits).all() and output.logits.dtype == torch.float16


def test_islands_have_no_effect_on_a_float32_model(demo_dir):
    report = diagnose(demo_spec("healthy").replace(run_in_float32=["resnet.encoder*"]))
    assert report.ok and not report.findings and report.output.dtype == "float32"


# -- the search ---------------------------------------------------------------------------------

def test_candidates_widen_to_a_boundary_float16_can_hold():
    def row(name, out, inp=1.0):
        return {"name": name, "call": 0, "in_absmax": inp, "out_absmax": out}

    calls = [row("", 1.0), row("layer", 3.0), row("layer.up", 4e5), row("layer.act", 4e5, 4e5),
             row("layer.down", 2.0, 4e5), row("other", 5e4), row("other.lin", 5e4)]
    # layer.up's output and layer.down's input are out of range: the layer holds both. "other"
    # outputs 5e4, inside float16 but past the boundary limit: only the whole model holds it.
    assert candidates(calls, "float16") == ["layer"]
    assert candidates(calls, "bfloat16") == []
    assert candidates(calls, "bfloat16", diverged=["layer.down", "layer"]) == ["layer.down",
                                                                               "layer"]


@pytest.mark.parametrize("needed", [{3}, {0}, {7}, {3, 6}, {0, 7}])
def test_bisection_finds_the_needed_span_within_the_pass_budget(needed):
    names = [f"m{i}" for i in range(8)]
    calls = []

    def works(subset):
        calls.append(subset)
        return {f"m{i}" for i in needed} <= set(subset)

    found = bisect(names, works)
    # The shortest span of candidates that holds every needed one.
    assert found == names[min(needed):max(needed) + 1]
    assert len(calls) <= 1 + 2 * 3 <= max_passes(len(names)) - 2  # reference and verify too
    assert bisect(names, lambda subset: False) is None


def test_overflow_first_fix_keeps_most_of_the_model_half(demo_dir, numerics_models):
    spec = text_spec(demo_dir, numerics_models["overflow-bert4"], model_dtype="float16")
    report = diagnose(spec)
    finding = next(f for f in report.findings if f.code == "overflow")
    fix = finding.fixes[0]
    assert fix.id == "float32-islands" and fix.edits == {"run_in_float32":
                                                         ["bert.encoder.layer.1"]}
    # Printed as code that runs where it is pasted (test_a_printed_islands_fix_runs_pasted).
    assert fix.code_text().endswith("run_in_float32(model, torch.float16, ['bert.encoder.layer.1'])")
    evidence = finding.evidence
    assert evidence["parameters kept half"] >= 0.75
    assert evidence["search forward passes"] <= max_passes(evidence["island candidates"])
    assert "forward passes" in finding.message and "float16" in finding.message
    fixed = diagnose(apply_fix(spec, fix))
    assert fixed.ok and fixed.output.finite and fixed.output.dtype == "float16"
    # Drift against float32 no worse than the bfloat16 fix's.
    islands = drift(apply_fix(spec, fix), "float16", islands=False)
    bf16 = drift(spec, "bfloat16", islands=False)
    assert islands.ok and islands.output.sqnr_db >= bf16.output.sqnr_db


def test_two_overflowing_layers_need_two_islands(demo_dir, numerics_models):
    result = drift(text_spec(demo_dir, numerics_models["overflow-bert4-twice"]), "float16")
    fix = result.findings[0].fixes[0]
    assert fix.edits["run_in_float32"] == ["bert.encoder.layer.1", "bert.encoder.layer.3"]
    evidence = result.findings[0].evidence
    assert evidence["search forward passes"] <= max_passes(evidence["island candidates"])


def test_precision_drift_first_fix_is_the_island_where_it_starts(demo_dir, numerics_models):
    spec = text_spec(demo_dir, numerics_models["drift-bert4"])
    result = drift(spec, "float16")
    finding = result.findings[0]
    assert finding.code == "precision-drift"
    fix = finding.fixes[0]
    # Not the LayerNorm where the signal shows up lost, but the module that adds the offset.
    assert fix.edits == {"run_in_float32": ["bert.encoder.layer.1.attention.output"]}
    assert finding.evidence["search forward passes"] <= max_passes(
        finding.evidence["island candidates"])
    assert drift(apply_fix(spec, fix), "float16", islands=False).ok


def test_no_islands_fix_when_they_would_hold_most_of_the_model(demo_dir, tmp_path):
    # The embeddings' output sinks under float16's smallest values: only the whole encoder
    # holds both sides of it, so the model-wide fix comes first.
    result = drift(text_spec(demo_dir, shrunken_tiny_bert(demo_dir, tmp_path, 1e-8)), "float16")
    finding = result.findings[0]
    assert finding.code == "precision-drift"
    assert [f.id for f in finding.fixes] == ["model-float32"]


# -- the export ---------------------------------------------------------------------------------

def test_exported_islands_reproduce_the_in_app_output(demo_dir, numerics_models, tmp_path):
    from fp16studio.core.run.pipeline import forward, prepare, primary_output

    spec = text_spec(demo_dir, numerics_models["overflow-bert4"], model_dtype="float16",
                     device="cpu", run_in_float32=["bert.encoder.layer.1"])
    script, saved = tmp_path / "islands.py", tmp_path / "out.pt"
    text = export_script(spec, script)
    assert "run_in_float32(model, torch.float16, RUN_IN_FLOAT32)" in text
    assert 'RUN_IN_FLOAT32 = ["bert.encoder.layer.1"]' in text
    proc = subprocess.run([sys.executable, str(script), "--save-output", str(saved)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    name, expected = primary_output(forward(prepare(spec)))
    assert summary == {"output": name, "dtype": "float16", "shape": list(expected.shape),
                       "finite": True}
    torch.testing.assert_close(torch.load(saved), expected)


def test_islands_in_a_model_cast_to_half(demo_dir, numerics_models, tmp_path):
    # model.half() after a float32 load: the islands keep the float32 weights all the same.
    from fp16studio.core.run.pipeline import forward, prepare

    spec = text_spec(demo_dir, numerics_models["overflow-bert4"], model_cast="float16", device="cpu",
                     run_in_float32=["bert.encoder.layer.1"])
    prepared = prepare(spec)
    dtypes = {p.dtype for n, p in prepared.model.named_parameters()
              if not n.startswith("bert.encoder.layer.1.")}
    assert dtypes == {torch.float16}
    output = forward(prepared).logits
    assert torch.isfinite(output).all()
    script, saved = tmp_path / "cast.py", tmp_path / "out.pt"
    assert "RUN_IN_FLOAT32, library_float32=False)" in export_script(spec, script)
    proc = subprocess.run([sys.executable, str(script), "--save-output", str(saved)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    torch.testing.assert_close(torch.load(saved), output)


def test_a_printed_islands_fix_runs_pasted_after_the_model_is_loaded():
    from fp16studio.core.diagnostics.islands import IslandSearch, islands_fix
    from fp16studio.core import Finding
    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.present.terminal import format_diagnosis

    torch.manual_seed(0)
    # block 0 makes values float16 cannot hold on the way (4e5) and brings them back down.
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    with torch.no_grad():
        block[0].weight.fill_(1e3)
        block[1].weight.fill_(1e-3)
    model = torch.nn.Sequential(block, torch.nn.Linear(4, 2)).half()
    x = torch.full((1, 4), 100.0, dtype=torch.float16)
    assert not torch.isfinite(model(x)).all()
    spec = PipelineSpec(model="m", dataset="synthetic", model_dtype="float16")
    fix = islands_fix(spec, IslandSearch(["0"], 0.4, 3, 1, {}, "float16"))
    pasted = {"model": model}
    exec(fix.code_text(), pasted)                      # as the user pastes it
    assert block[0].weight.dtype == torch.float32 and model[1].weight.dtype == torch.float16
    out = model(x)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    # The command line prints that code, within 120 columns.
    finding = Finding("overflow", "error", "0", "inf in float16", {}, (fix,))
    printed = format_diagnosis(Diagnosis(spec, "cpu", findings=[finding]))
    assert "def run_in_float32(model, dtype, patterns" in printed
    assert max(map(len, printed.splitlines())) <= 120


def test_island_names_become_patterns_that_match_exactly_themselves():
    import fnmatch

    from fp16studio.core.diagnostics.islands import with_islands

    names = ["blocks.x[1].mlp", "heads.a*b", "encoder.layer.0"]
    patterns = with_islands(PipelineSpec(model="m", dataset="synthetic"), names)
    for name in names:
        assert [p for p in patterns if fnmatch.fnmatchcase(name, p)] != []
    assert not fnmatch.fnmatchcase("heads.aXb", next(p for p in patterns if "heads" in p))
