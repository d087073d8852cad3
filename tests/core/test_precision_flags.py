"""Precision settings watched where the script makes them (`precision-flag`, CONTRACT §2).

Each script is first run with plain python: it fails, or runs in float32, the way the trace then
says. What these versions do on a CPU (transformers 5, accelerate 1.x): bf16=True refuses at
TrainingArguments(...); fp16=True trains in float32 without a word (accelerate's native AMP is
off on a CPU); Accelerator(mixed_precision="fp16") the same.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fp16studio.core.common.precision import cpu_has_native_bf16 as _cpu_has_bf16
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="these are a CPU's settings: this machine has CUDA")


def at(script: Path, marker: str) -> dict:
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if marker in text)
    return {"file": str(script), "line": line}


def plain(script: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def flags(result):
    return [f for f in result.findings if f.code == "precision-flag"]


def with_line(script: Path, line: int, code: str, folder: Path) -> Path:
    lines = script.read_text().splitlines()
    lines[line - 1] = code
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


def test_bf16_training_arguments_on_a_cpu_is_the_scripts_error_explained(tmp_path):
    script = SCRIPTS / "flags_bf16_cpu.py"
    run = plain(script, tmp_path / "out")
    assert run.returncode == 1
    assert "ValueError: Your setup doesn't support bf16/gpu" in run.stderr   # trl #3616
    result = trace_script(script, [tmp_path / "out"])
    made = at(script, "# the flag")
    # The script's own error stays what it was, with its line.
    assert result.error.type == "ValueError" and result.error.source == made
    (flag,) = flags(result)
    assert (flag.severity, flag.location, flag.source) == ("error", "TrainingArguments.bf16", made)
    assert "doesn't support bf16/gpu" in flag.message
    ids = [fix.id for fix in flag.fixes]
    # Keep bf16 on this CPU where it computes bfloat16 natively; else bf16 only on a GPU.
    first = "flag-bf16-use-cpu" if _cpu_has_bf16() else "flag-bf16-if-supported"
    assert ids[0] == first and set(ids) == {"flag-bf16-use-cpu", "flag-bf16-if-supported"}
    use_cpu = next(fix for fix in flag.fixes if fix.id == "flag-bf16-use-cpu")
    code = use_cpu.code_text()
    assert code.startswith("args = TrainingArguments(output_dir=sys.argv[1], bf16=True, "
                           "max_steps=2, report_to=[], use_cpu=not torch.cuda.is_available())")
    # The fix's line, written in: the Trainer trains in bf16 on this CPU.
    fixed = plain(with_line(script, made["line"], code, tmp_path), tmp_path / "out")
    assert fixed.returncode == 0, fixed.stderr


def test_fp16_training_arguments_on_a_cpu_train_silently_in_float32(tmp_path):
    script = SCRIPTS / "flags_fp16_cpu.py"
    run = plain(script, tmp_path / "out")
    assert run.returncode == 0 and "computed in ['torch.float32']" in run.stdout
    result = trace_script(script, [tmp_path / "out"])
    assert result.error is None
    (flag,) = flags(result)
    assert (flag.severity, flag.location) == ("warning", "TrainingArguments.fp16")
    assert flag.source == at(script, "# the flag")
    # What ran: accelerate made no autocast and no GradScaler; the forward computed float32.
    assert flag.evidence["compute dtypes"] == {"float32": 8}
    assert not flag.evidence["autocast"] and not flag.evidence["grad scaler"]
    ids = [fix.id for fix in flag.fixes]
    assert ids == (["flag-fp16-bf16-on-cpu", "flag-fp16-gpu-only"] if _cpu_has_bf16()
                   else ["flag-fp16-gpu-only", "flag-fp16-bf16-on-cpu"])
    bf16 = next(fix for fix in flag.fixes if fix.id == "flag-fp16-bf16-on-cpu").code_text()
    assert ("fp16=torch.cuda.is_available(), bf16=not torch.cuda.is_available(), "
            "use_cpu=not torch.cuda.is_available()") in bf16


def test_fp16_false_is_no_precision_flag(tmp_path):
    script = SCRIPTS / "flags_fp32.py"
    assert plain(script, tmp_path / "out").returncode == 0
    result = trace_script(script, [tmp_path / "out"])
    assert result.error is None and flags(result) == []


def test_accelerator_fp16_on_a_cpu_runs_float32():
    script = SCRIPTS / "flags_accelerate_fp16.py"
    run = plain(script)
    assert run.returncode == 0
    assert "native amp: False scaler: None logits: torch.float32" in run.stdout
    result = trace_script(script)
    (flag,) = flags(result)
    assert (flag.severity, flag.location) == ("warning", "Accelerator.mixed_precision")
    assert flag.source == at(script, "# the flag")
    assert flag.evidence["compute dtypes"] == {"float32": 2}
    first = flag.fixes[0].code_text()
    assert first.startswith('accelerator = Accelerator(mixed_precision="fp16" if '
                            'torch.cuda.is_available() else '
                            + ('"bf16"' if _cpu_has_bf16() else '"no"'))


def test_a_disabled_autocast_with_nothing_else_half_is_said():
    script = SCRIPTS / "flags_autocast_off.py"
    run = plain(script)
    assert run.returncode == 0 and run.stdout.strip() == "torch.float32"
    result = trace_script(script)
    (flag,) = flags(result)
    assert (flag.severity, flag.location) == ("info", "autocast.enabled")
    assert flag.source == at(script, "# the autocast")
    assert flag.fixes[0].code_text() == 'with torch.autocast(device_type="cpu", dtype=torch.bfloat16):'
    # Not autocast-inactive's story (an autocast naming another device): said once, here.
    assert "autocast-inactive" not in {f.code for f in result.findings}
