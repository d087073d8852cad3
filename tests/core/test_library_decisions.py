"""Precision decisions libraries make for a script (issue 28, item 3): the library call that
decided a dtype is named (core/script/library_calls.py, its provenance said by words.py), what
a library keeps in float32 on purpose is no finding, and a failure in backward is placed at the
backward line, a gradient checkpoint's recomputation named as such.

The scripts (tests/scripts/library_*.py, recompute_without_autocast.py, amp_scaler_healthy.py)
are each run plain first; the bad line's fix is written into a copy, which then runs clean and
traces silent. The PEFT scripts need the `test` extra's peft.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from fix_code import parses

from fp16studio.core.diagnostics.rules import Evidence, run_rules
from fp16studio.core.diagnostics.rules.dtypes import recomputed_mismatch
from fp16studio.core.diagnostics.rules.words import origin_phrase
from fp16studio.core.script.recover import Autocast
from fp16studio.core.script.steps import BackwardFailure
from fp16studio.core.script.trace import trace_script
from fp16studio.core.spec.value import PipelineSpec

SCRIPTS = Path(__file__).parent.parent / "scripts"


def at(script: Path, marker: str) -> dict:
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if marker in text)
    return {"file": str(script), "line": line}


def plain(script: Path, *args, ok: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=300, cwd=script.parent)
    assert (done.returncode == 0) == ok, done.stderr
    return done


def with_fix(script: Path, fix, folder: Path) -> Path:
    """The script with the fix's line written in place of the user's."""
    lines = script.read_text().splitlines()
    lines[fix.code.source["line"] - 1] = fix.code_text()
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


# -- PEFT ------------------------------------------------------------------------------------------

def test_a_healthy_lora_on_a_bfloat16_base_gives_no_warning():
    pytest.importorskip("peft")
    script = SCRIPTS / "library_lora_bf16.py"
    assert "adapters torch.float32" in plain(script).stdout   # PEFT's float32 adapters
    result = trace_script(script)
    assert result.error is None and result.findings == [] and result.ok
    # The model the script trains is PEFT's wrapper: a spec cannot say it, and the note says who.
    line = at(script, "get_peft_model(model")["line"]
    assert f"no pipeline spec: peft's get_peft_model at line {line} wrapped the model" in \
        " ".join(result.notes)


def test_prepare_model_for_kbit_training_of_a_bfloat16_model_is_named_at_its_line(tmp_path):
    pytest.importorskip("peft")
    script = SCRIPTS / "library_kbit_bf16.py"
    assert "base torch.float32" in plain(script).stdout
    result = trace_script(script)
    (finding,) = result.findings
    prepare = at(script, "MARK: prepare")
    assert (finding.code, finding.severity, finding.source) == ("silent-upcast", "warning", prepare)
    assert finding.evidence["provenance"] == {
        "dtype": "float32", "from": "library", "source": prepare, "training": True,
        "call": "peft's prepare_model_for_kbit_training", "before": "bfloat16",
        "advice": finding.evidence["provenance"]["advice"]}
    assert (f"peft's prepare_model_for_kbit_training at line {prepare['line']} turned the "
            "bfloat16 model into float32") in finding.message
    assert "2x the memory" in finding.message and "4- and 8-bit" in finding.message
    first = finding.fixes[0]
    assert first.id == "drop-library-upcast" and first.code.source == prepare
    assert first.code.text == ("# model = prepare_model_for_kbit_training(model)  # left out: "
                               "it made the bfloat16 model float32")
    fixed = with_fix(script, first, tmp_path)
    assert "base torch.bfloat16" in plain(fixed).stdout
    assert trace_script(fixed).findings == []


# -- a failure in backward, and a recomputation -----------------------------------------------------

def test_a_recomputation_without_the_forwards_autocast_is_named_at_the_backward_line(tmp_path):
    script = SCRIPTS / "recompute_without_autocast.py"
    assert "must have the same dtype" in plain(script, ok=False).stderr
    result = trace_script(script)
    backward, recompute = at(script, "MARK: backward"), at(script, "MARK: recompute")
    # Placed at loss.backward(), not at the line the backward pass ran again.
    assert result.error.source == backward and result.error.stage == "backward"
    assert result.error.module == "block.0"
    (finding,) = result.findings
    assert (finding.code, finding.severity, finding.location, finding.source) == (
        "dtype-mismatch", "error", "block.0", backward)
    assert finding.evidence["recomputed at"] == recompute
    assert finding.evidence["provenance"] == {
        "dtype": "bfloat16", "from": "autocast", "source": at(script, "MARK: autocast"),
        "training": True}
    assert (f"recomputed its forward in the backward pass at line {recompute['line']} without "
            "the autocast(bfloat16) its forward pass ran under") in finding.message
    assert "set_default_dtype" not in finding.message
    first = finding.fixes[0]
    assert first.id == "recompute-under-autocast" and first.code.source == recompute
    assert parses(first.code_text())
    fixed = with_fix(script, first, tmp_path)
    plain(fixed)
    assert trace_script(fixed).findings == []


def test_torch_checkpoint_recomputes_under_the_forwards_autocast_and_is_silent():
    script = SCRIPTS / "recompute_without_autocast.py"
    plain(script, "torch")
    result = trace_script(script, ["torch"])
    assert result.error is None and result.findings == [] and result.ok


def test_a_healthy_amp_loop_with_a_grad_scaler_gives_no_warning():
    script = SCRIPTS / "amp_scaler_healthy.py"
    plain(script)
    result = trace_script(script, steps=3)
    assert result.error is None and result.findings == [] and result.ok
    assert len(result.steps) == 3


# -- the words and rules on hand-built evidence ------------------------------------------------------

def test_a_library_decision_is_told_as_that_call_and_an_unset_default_as_no_call():
    library = {"dtype": "float32", "from": "library", "source": {"file": "t.py", "line": 12},
               "call": "peft's prepare_model_for_kbit_training", "before": "bfloat16"}
    assert origin_phrase(library) == ("peft's prepare_model_for_kbit_training at line 12 turned "
                                      "the bfloat16 model into float32")
    # torch's own default, with no set_default_dtype call seen, is not told as one.
    default = {"dtype": "float32", "from": "default-dtype", "source": None}
    assert origin_phrase(default) == "torch's default dtype is float32"
    assert "set_default_dtype" in origin_phrase(dict(default, source={"file": "t.py", "line": 3}))


def test_adapters_a_library_keeps_in_float32_are_no_mixed_precision_finding():
    modules = {"model.layers.0.q_proj": "bfloat16", "model.layers.0.q_proj.lora_A.default": "float32",
               "model.layers.0.q_proj.lora_B.default": "float32", "lm_head": "bfloat16"}
    ev = Evidence(spec=PipelineSpec(model="m", dataset="synthetic", model_dtype="bfloat16"),
                  device_type="cpu", param_dtypes={"bfloat16": 100, "float32": 8},
                  module_param_dtypes=modules)
    (odd,) = [f for f in run_rules(ev) if f.code == "mixed-precision-params"]
    assert odd.location == "model.layers.0.q_proj.lora_A.default"
    kept = Evidence(**{**ev.__dict__, "adapters": ("model.layers.0.q_proj.lora_A",
                                                   "model.layers.0.q_proj.lora_B")})
    assert [f for f in run_rules(kept) if f.code == "mixed-precision-params"] == []


def test_a_recomputation_is_said_only_for_a_dtype_failure_of_a_recomputed_module():
    autocast = Autocast("cuda", "float16", {"file": "t.py", "line": 5})
    failure = BackwardFailure("RuntimeError", "expected scalar type Half but found Float",
                              {"file": "t.py", "line": 9}, 1, module="layers.3.mlp",
                              cls="MLP", input_dtype="float16", param_dtype="float32",
                              recomputed_at={"file": "t.py", "line": 9}, autocast=autocast)
    finding = recomputed_mismatch(failure)
    assert finding.location == "layers.3.mlp" and finding.source == {"file": "t.py", "line": 9}
    assert "without the autocast(float16) its forward pass ran under at line 5" in finding.message
    # The recomputation inside a library's helper: no line of the user's to rewrite.
    assert [f.id for f in finding.fixes] == ["torch-checkpoint"]
    assert parses(finding.fixes[0].code_text())
    assert recomputed_mismatch(BackwardFailure("RuntimeError", "CUDA error: misaligned address",
                                               None, 0, module="mlp")) is None
    assert recomputed_mismatch(BackwardFailure("RuntimeError", failure.message, None, 0)) is None


# -- Lightning ------------------------------------------------------------------------------------

def test_lightnings_swap_of_float16_for_bfloat16_on_a_cpu_is_named_at_the_trainer(tmp_path):
    pytest.importorskip("lightning")
    import torch

    if torch.cuda.is_available():
        pytest.skip("Lightning swaps the precision on a CPU only")
    script = SCRIPTS / "library_lightning_fp16_cpu.py"
    assert "precision bf16-mixed" in plain(script).stdout
    result = trace_script(script)
    # Lightning's own autocast around the forward pass is the trace's autocast: its bfloat16
    # inputs into float32 weights are no dtype-mismatch.
    (finding,) = result.findings
    trainer = at(script, "MARK: trainer")
    assert (finding.code, finding.severity, finding.location, finding.source) == (
        "precision-flag", "warning", "Trainer.precision", trainer)
    assert finding.evidence == {"setting": "precision='16-mixed'", "chose": "bf16-mixed",
                                "device": "cpu", "library": "lightning"}
    assert (f"lightning's Trainer(precision='16-mixed') at line {trainer['line']} trains in "
            "'bf16-mixed' on cpu") in finding.message
    first = finding.fixes[0]
    assert first.code.text == ('trainer = L.Trainer(precision="16-mixed" if '
                               'torch.cuda.is_available() else "bf16-mixed", max_steps=2, '
                               'logger=False, enable_checkpointing=False)')
    fixed = with_fix(script, first, tmp_path)
    assert "precision bf16-mixed" in plain(fixed).stdout
    assert trace_script(fixed).findings == []


def test_a_library_is_watched_when_imported_and_our_failure_never_breaks_its_import(
        tmp_path, monkeypatch):
    from fp16studio.core.script import library_calls
    from fp16studio.core.script.library_calls import after_import, unwatch

    # Taken for an installed library (a package of the script's own is not watched at all).
    monkeypatch.setattr(library_calls, "installed_library", lambda module, name: True)
    (tmp_path / "fp16studio_watched_pkg").mkdir()
    (tmp_path / "fp16studio_watched_pkg" / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen, errors = [], []

    def then(module):
        seen.append(module.VALUE)
        raise RuntimeError("a bug of ours")

    finder = after_import("fp16studio_watched_pkg", then, errors)
    try:
        import importlib.util

        assert importlib.util.find_spec("fp16studio_watched_pkg") is not None   # no import
        assert seen == []
        import fp16studio_watched_pkg

        assert fp16studio_watched_pkg.VALUE == 1 and seen == [1]
        assert errors == ["watching fp16studio_watched_pkg: RuntimeError: a bug of ours"]
    finally:
        unwatch(finder)
        sys.modules.pop("fp16studio_watched_pkg", None)
