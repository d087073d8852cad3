"""Issue 27's seven cases: what a finding says and fixes comes from its evidence.

Each is a traced script of the kind users write (on the CPU, "meta" standing in for a second
device), or, where the failure needs a GPU, the rule given that evidence by hand (its GPU form
is in tests/gpu).
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fix_code import parses

from fp16studio.core.data.columns import ColumnFacts
from fp16studio.core.diagnostics.report import RunError
from fp16studio.core.diagnostics.rules import Evidence, run_rules
from fp16studio.core.diagnostics.rules.edits import Batch, Names
from fp16studio.core.diagnostics.rules.training import training_findings
from fp16studio.core.run.training import Step
from fp16studio.core.script.trace import trace_script
from fp16studio.core.spec.value import PipelineSpec

SCRIPTS = Path(__file__).parent.parent / "scripts"


def at(script: Path, marker: str) -> dict:
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if marker in text)
    return {"file": str(script), "line": line}


@pytest.fixture(scope="module")
def float32_checkpoint(tmp_path_factory):
    from transformers import AutoModelForImageClassification, ResNetConfig

    folder = tmp_path_factory.mktemp("resnet-float32")
    torch.manual_seed(0)
    config = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                          num_labels=3)
    AutoModelForImageClassification.from_config(config, dtype=torch.float32).save_pretrained(folder)
    return folder


def test_the_seed_articles_half_cast_is_told_as_the_cast_not_the_checkpoint(float32_checkpoint):
    script = SCRIPTS / "seed_cast_half.py"
    result = trace_script(script, [str(float32_checkpoint)])
    finding = next(f for f in result.findings if f.code == "dtype-mismatch")
    assert finding.evidence["provenance"]["from"] == "cast"
    assert finding.evidence["provenance"]["source"] == at(script, "# the cast")
    assert "checkpoint" not in finding.message
    assert f"cast to float16 at line {at(script, '# the cast')['line']}" in finding.message
    # Its first fix casts the tensor the script passed, right before the model's call.
    first = finding.fixes[0]
    assert first.id == "cast-inputs-float16"
    assert first.code_text().strip().startswith("pixel_values = pixel_values.to(torch.float16)")
    assert first.code.source == at(script, "# the forward") and parses(first.code_text())


def test_autocast_on_the_wrong_device_type_is_fixed_with_code_that_runs():
    ev = Evidence(spec=PipelineSpec(model="m", dataset="synthetic", autocast="float16",
                                    autocast_device="cuda"),
                  device_type="cpu", param_dtypes={"float32": 10}, module_param_dtypes={},
                  sources={"autocast": {"file": "train.py", "line": 12}}, names=Names(batch=Batch("batch")))
    (finding,) = [f for f in run_rules(ev) if f.code == "autocast-inactive"]
    code = finding.fixes[0].code_text()
    assert code.strip() == 'with torch.autocast(device_type="cpu", dtype=torch.float16):'
    assert parses(code)


def test_a_tensor_made_on_another_device_in_the_users_forward_is_fixed_where_it_was_made():
    script = SCRIPTS / "made_on_other_device.py"
    result = trace_script(script)
    (finding,) = [f for f in result.findings if f.code == "device-mismatch"]
    assert finding.source == at(script, "# made")
    assert finding.evidence["failed at"] == at(script, "# meets")
    assert "batch was not moved" not in finding.message
    assert [f.id for f in finding.fixes] == ["device-at-creation"]
    code = finding.fixes[0].code_text()
    assert "device=hidden.device" in code and 'device="meta"' not in code
    # The fixed line makes the script run.
    lines = script.read_text().splitlines()
    lines[finding.source["line"] - 1] = code
    fixed = Path(result.script).with_name("made_fixed.py")
    try:
        fixed.write_text("\n".join(lines) + "\n")
        run = subprocess.run([sys.executable, str(fixed)], capture_output=True, text=True,
                             timeout=120)
    finally:
        fixed.unlink(missing_ok=True)
    assert run.returncode == 0, run.stderr


def test_the_gradscaler_refusing_fp16_gradients_is_answered_with_master_weights():
    script = SCRIPTS / "train_scaler_fp16_weights.py"
    result = trace_script(script)
    assert "Attempting to unscale FP16 gradients" in result.error.message
    (finding,) = [f for f in result.findings if f.code == "scaler-misuse"]
    assert finding.severity == "error"
    assert finding.source == at(script, "# unscales")
    assert finding.fixes[0].id == "master-weights-float16"
    code = finding.fixes[0].code_text()
    assert "model = model.float()" in code and "GradScaler" in code and parses(code)


def bf16_step() -> Step:
    return Step(index=0, loss=0.7, scaled=True, scale=65536.0,
                scaler=[("scale", {"file": "train.py", "line": 20})])


def test_a_gradscaler_crashing_on_bfloat16_weights_is_an_error_that_says_so():
    error = RunError("NotImplementedError",
                     "\"_amp_foreach_non_finite_check_and_unscale_cuda\" not implemented for "
                     "'BFloat16'", source={"file": "train.py", "line": 22})
    findings = training_findings([bf16_step()], "bfloat16", error=error)
    (finding,) = [f for f in findings if f.code == "scaler-misuse"]
    assert finding.severity == "error" and "only adds work" not in finding.message
    assert "needs no loss scaling" in finding.message and finding.source == error.source
    assert finding.fixes[0].id == "drop-grad-scaler"
    # Without the crash, the same scaler is the warning it was.
    (quiet,) = training_findings([bf16_step()], "bfloat16")
    assert quiet.severity == "warning" and "only adds work" in quiet.message


def test_half_on_cpu_from_an_autocast_is_placed_on_the_autocast_line():
    script = SCRIPTS / "autocast_fp16_cpu.py"
    result = trace_script(script)
    (finding,) = [f for f in result.findings if f.code == "half-on-cpu"]
    assert finding.source == at(script, "# the autocast")
    assert finding.evidence["provenance"]["from"] == "autocast"
    assert "autocast(float16)" in finding.message
    code = finding.fixes[0].code_text()
    assert code.strip() == 'with torch.autocast(device_type="cpu", dtype=torch.bfloat16):'


def test_a_cast_lost_in_map_is_said_even_when_autocast_saved_the_run():
    spec = PipelineSpec(model="m", dataset="synthetic", map_dtype="float16", model_cast="float16",
                        autocast="float16")
    facts = {"pixel_values": ColumnFacts("pixel_values", stored="float32", intended="float16",
                                         loaded="float32", final="float32", device="cuda:0")}
    ev = Evidence(spec=spec, device_type="cuda", param_dtypes={"float16": 10},
                  module_param_dtypes={}, facts=facts)
    (finding,) = [f for f in run_rules(ev) if f.code == "map-cast-lost"]
    assert finding.severity == "warning"
    assert "autocast(float16)" in finding.message and "did nothing" in finding.message
    assert [f.id for f in finding.fixes] == ["drop-map-cast"]


def test_a_dtypes_provenance_in_the_evidence_reads_as_a_sentence():
    from fp16studio.core.present.vocabulary import evidence_value

    said = evidence_value({"dtype": "float16", "from": "dtype-argument",
                           "source": {"file": "s.py", "line": 13}, "training": False})
    assert said == "float16, because it was loaded with dtype=torch.float16 at line 13"
    assert evidence_value({"dtype": "bfloat16", "from": "checkpoint", "source": None}) == (
        "bfloat16, because from_pretrained got no dtype=, and transformers 5 loads the "
        "checkpoint's own dtype, bfloat16")
