"""The user's own tensor operations under `fp16studio trace` (core/script/user_ops.py).

Each script fails, or loses values, the same way under plain python first; traced, it comes out
as one finding at the line that did it, whose first fix changes that one tensor: the script with
that line written as the fix says runs clean under plain python.
"""

import subprocess
import sys
from pathlib import Path

import pytest

import fp16studio
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts"
OURS = str(Path(fp16studio.__file__).parent)


def line_of(script: Path, marker: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if marker in line)


def plain(script: Path):
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=script.parent)


def traced(script: Path):
    lines = []
    result = trace_script(script, output=lambda stream, line: lines.append((stream, line)))
    out = [line for stream, line in lines if stream == "stdout"]
    err = [line for stream, line in lines if stream == "stderr"]
    return result, out, err


def with_line(script: Path, number: int, code: str, folder: Path) -> Path:
    """The script with line `number` written as `code` (its indentation kept)."""
    lines = script.read_text().splitlines()
    old = lines[number - 1]
    lines[number - 1] = old[:len(old) - len(old.lstrip())] + code
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


FAILING = [
    # script, what plain python ends with, code, the marker of the finding's line, first fix
    ("user_ops_numpy_bf16.py", "TypeError: Got unsupported ScalarType BFloat16",
     "half-unsupported", "MARK: to numpy", "float-before-numpy",
     "preds = logits.float().numpy()"),
    ("user_ops_quantile_fp16.py",
     "RuntimeError: quantile() input tensor must be either float or double dtype",
     "half-unsupported", "MARK: quantile", "float-input",
     "cutoff = torch.quantile(norms.float(), 0.9)"),
    ("user_ops_masked_fill_fp16.py",
     "RuntimeError: value cannot be converted to type c10::Half without overflow",
     "value-out-of-range", "MARK: masked_fill", "finfo-value",
     "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)"),
    ("user_ops_float64_targets.py", "RuntimeError: Found dtype Double but expected Float",
     "label-dtype", "MARK: loss", "targets-float32", "loss = criterion(preds, targets.float())"),
    # Inside the user's own forward: the rules' half-unsupported (autocast, the whole model) for
    # the same failure at the same line gives way to this one.
    ("user_ops_cdist_fp16.py", "NotImplementedError: \"cdist\" not implemented for 'Half'",
     "half-unsupported", "MARK: cdist", "float-input",
     "distances = torch.cdist(z.float(), self.prototypes.float())"),
    # A cast the user called: named as their method (`to`), not the tracer's wrapper (`cast`).
    ("user_ops_cast_refused.py", "RuntimeError: \"copy_\" not implemented for 'Half'",
     "half-unsupported", "MARK: cast", "float-input", "y = x.float().to(torch.float32)"),
]


@pytest.mark.parametrize("name, raised, code, marker, fix_id, fix_code", FAILING,
                         ids=[case[0] for case in FAILING])
def test_a_failing_operation_of_the_users_is_one_finding_at_its_line(
        tmp_path, name, raised, code, marker, fix_id, fix_code):
    script = SCRIPTS / name
    before = plain(script)
    assert before.returncode == 1 and before.stderr.strip().splitlines()[-1] == raised

    result, out, err = traced(script)
    # The script ran as it does under python: its output, and the same exception.
    assert out == before.stdout.splitlines()
    assert err[-1] == raised and not any(OURS in line for line in err)
    assert not result.ok and result.error.message == raised.split(": ", 1)[1]
    # One error finding for the one failure: the precise one, at the line, fixing one tensor.
    (finding,) = [f for f in result.findings if f.severity == "error"]
    assert finding.code == code
    assert finding.source == {"file": str(script), "line": line_of(script, marker)}
    doc = next(f for f in result.to_json()["findings"] if f["code"] == code)
    first = doc["fixes"][0]
    # The code replaces the line at its own indentation.
    line = script.read_text().splitlines()[finding.source["line"] - 1]
    indent = line[:len(line) - len(line.lstrip())]
    assert (first["id"], first["code"], first["edits"]) == (fix_id, indent + fix_code, {})
    assert "cast()" not in finding.message + first["title"]
    fixed = plain(with_line(script, finding.source["line"], fix_code, tmp_path))
    assert fixed.returncode == 0, fixed.stderr


def test_the_failure_inside_the_users_forward_names_the_value_dtype_and_function():
    script = SCRIPTS / "user_ops_masked_fill_fp16.py"
    result, _, _ = traced(script)
    finding = next(f for f in result.findings if f.code == "value-out-of-range")
    assert finding.location == "AttentionPooling.forward"
    assert finding.evidence == {"value": -1e9, "dtype": "float16", "max": 65504.0,
                                "operation": "masked_fill"}
    # The model's own findings stay (float16 on a CPU); none says the same failure again.
    assert {f.code for f in result.findings} == {"value-out-of-range", "half-on-cpu"}


def test_a_value_that_silently_becomes_inf_is_a_warning_at_its_line(tmp_path):
    script = SCRIPTS / "user_ops_where_fp16.py"
    before = plain(script)
    assert before.returncode == 0 and "inf in masked: True nan in weights: True" in before.stdout

    result, out, _ = traced(script)
    assert out == before.stdout.splitlines()
    (finding,) = result.findings
    assert (finding.code, finding.severity) == ("value-out-of-range", "warning")
    assert finding.source == {"file": str(script), "line": line_of(script, "MARK: where")}
    assert finding.evidence["value"] == -1e9 and finding.evidence["dtype"] == "float16"
    code = result.to_json()["findings"][0]["fixes"][0]["code"].strip()
    assert code == "masked = torch.where(keep, scores, torch.finfo(scores.dtype).min)"
    fixed = plain(with_line(script, finding.source["line"], code, tmp_path))
    assert "inf in masked: False nan in weights: False" in fixed.stdout


def test_the_same_operations_in_float32_find_nothing():
    script = SCRIPTS / "user_ops_healthy.py"
    before = plain(script)
    assert before.returncode == 0, before.stderr
    result, out, _ = traced(script)
    assert out == before.stdout.splitlines()
    assert result.ok and result.error is None
    assert not [f for f in result.findings
                if f.code in ("half-unsupported", "value-out-of-range", "label-dtype")]


def test_compile_modes_of_the_scripts_own_and_a_caught_failure():
    script = SCRIPTS / "user_ops_modes.py"
    before = plain(script)
    assert before.returncode == 0, before.stderr
    result, out, _ = traced(script)
    # torch.compile, the script's own mode (it counts the same calls), the default device.
    assert out == before.stdout.splitlines()
    assert result.ok and result.error is None
    (finding,) = result.findings
    assert (finding.code, finding.severity) == ("half-unsupported", "warning")
    assert "caught" in finding.message
    assert finding.source["line"] == line_of(script, "MARK: caught")


def test_in_process_the_exception_is_the_same_object_and_the_mode_stack_is_left_as_found():
    import torch
    from torch.overrides import BaseTorchFunctionMode, _get_current_function_mode_stack

    from fp16studio.core.script.tracer import UserCode
    from fp16studio.core.script.user_ops import UserOps

    boom = RuntimeError("quantile() input tensor must be either float or double dtype")

    class Refuses(torch.Tensor):   # a tensor whose quantile raises this very object
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "quantile":
                raise boom
            return super().__torch_function__(func, types, args, kwargs or {})

    before = _get_current_function_mode_stack()
    ops = UserOps(UserCode(Path(__file__).resolve()))   # this file is the "script"
    ops.install()
    theirs = BaseTorchFunctionMode()
    theirs.__enter__()           # entered by the script and never left
    try:
        half = torch.ones(4, dtype=torch.float16).as_subclass(Refuses)
        with pytest.raises(RuntimeError) as raised:
            torch.quantile(half, 0.5)  # MARK: in process
    finally:
        ops.uninstall()
    assert raised.value is boom
    assert not any(str(entry.path).startswith(OURS) for entry in raised.traceback)
    assert _get_current_function_mode_stack() == [*before, theirs]
    theirs.__exit__(None, None, None)
    (finding,) = ops.findings()
    assert (finding.code, finding.severity) == ("half-unsupported", "warning")  # caught here
    assert finding.source["line"] == line_of(Path(__file__), "MARK: in process")
    # The fix rewrites that line, at its indentation (the trace document's fix "code").
    line = Path(__file__).read_text().splitlines()[finding.source["line"] - 1]
    indent = line[:len(line) - len(line.lstrip())]
    assert finding.fixes[0].code_text() == indent + "torch.quantile(half.float(), 0.5)"
