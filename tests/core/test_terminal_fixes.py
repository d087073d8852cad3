"""A fix's code as the command line prints it: every line under the fix's title, the code's own
indentation kept relative, so what a person copies from the terminal is the code that parses."""

from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.diagnostics.rules import edits
from fp16studio.core.present.terminal import finding_lines
from tests.fix_code import parses

INDENT = " " * 13


def test_a_multi_line_fix_prints_every_line_under_its_title():
    fix = edits.autocast("float16")  # float32 weights, then a `with` block and its body
    code = fix.code_text()
    assert code.count("\n") >= 2
    finding = Finding("dtype-mismatch", "error", "l", "m", fixes=(fix,))
    printed = finding_lines(finding)[4:]
    assert len(printed) == code.count("\n") + 1
    assert all(line.startswith(INDENT) for line in printed), printed
    assert parses("\n".join(line[len(INDENT):] for line in printed))


def test_code_at_the_users_indentation_prints_dedented_under_the_title(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def f(x):\n    if x:\n        y = x.pow(2)\n")
    edit = CodeEdit("y = x.float().pow(2)\nz = y", "replace", {"file": str(script), "line": 3})
    assert edit.render() == "        y = x.float().pow(2)\n        z = y"   # the user's indentation
    finding = Finding("precision-loss", "error", "f", "m", fixes=(Fix("float-input", "t", {}, code=edit),))
    assert finding_lines(finding)[4:] == [INDENT + "y = x.float().pow(2)", INDENT + "z = y"]


def test_fp8_rows_and_errors_stay_within_120_columns_with_names_and_messages_whole():
    from fp16studio.core import PipelineSpec
    from fp16studio.core.diagnostics.report import Diagnosis, RunError
    from fp16studio.core.precision.fp8_plan import Fp8Plan, LayerPlan
    from fp16studio.core.present.terminal import format_diagnosis, format_fp8

    name = "model.encoder.layers.11.self_attention.attention_output_projection.dense_proj"
    layer = LayerPlan(name, 4096, 4096, eligible=True, flops_share=0.1, weight_amax=1.5,
                      input_amax=30.0, underflow_share=0.01, sqnr_db=31.2)
    plan = Fp8Plan("tensorwise", "cpu", None, True,
                   layers=[layer, LayerPlan("lm_head", 4096, 4096, eligible=True, sqnr_db=31.2)])
    printed = format_fp8(plan).splitlines()
    assert f"  {name}" in printed and max(map(len, printed)) <= 120
    message = "mat1 and mat2 must have the same dtype, but got Float and Half " * 4
    error = RunError("RuntimeError", message.strip(), "forward",
                     "model.encoder.layers.0.attention.self.query")
    spec = PipelineSpec(model="m", dataset="synthetic")
    printed = format_diagnosis(Diagnosis(spec, "cpu", findings=[], error=error))
    assert max(map(len, printed.splitlines())) <= 120
    assert " ".join(message.split()) in " ".join(printed.split())   # wrapped, whole
