"""A fix's code as the command line prints it: every line under the fix's title, the code's own
indentation kept relative, so what a person copies from the terminal is the code that parses."""

from fp16studio.core.diagnostics.rules import edits
from fp16studio.core.present.terminal import finding_lines
from tests.fix_code import parses

INDENT = " " * 13


def test_a_multi_line_fix_prints_every_line_under_its_title():
    fix = edits.autocast("float16")  # float32 weights, then a `with` block and its body
    code = fix.code_text()
    assert code.count("\n") >= 2
    finding = {"severity": "error", "code": "dtype-mismatch", "location": "l", "message": "m",
               "fixes": [fix.to_json()]}
    printed = finding_lines(finding)[4:]
    assert len(printed) == code.count("\n") + 1
    assert all(line.startswith(INDENT) for line in printed), printed
    assert parses("\n".join(line[len(INDENT):] for line in printed))


def test_code_at_the_users_indentation_prints_dedented_under_the_title():
    finding = {"severity": "error", "code": "precision-loss", "location": "f", "message": "m",
               "fixes": [{"id": "float-input", "title": "t",
                          "code": "        y = x.float().pow(2)\n        z = y"}]}
    assert finding_lines(finding)[4:] == [INDENT + "y = x.float().pow(2)", INDENT + "z = y"]


def test_fp8_rows_and_errors_stay_within_120_columns_with_names_and_messages_whole():
    from fp16studio.core import PipelineSpec
    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.present.terminal import format_diagnosis, format_fp8

    name = "model.encoder.layers.11.self_attention.attention_output_projection.dense_proj"
    layer = {"name": name, "in_features": 4096, "out_features": 4096, "flops_share": 0.1,
             "weight_amax": 1.5, "input_amax": 30.0, "underflow_share": 0.01, "sqnr_db": 31.2,
             "keep_bf16": False, "eligible": True, "reason": ""}
    doc = {"recipe": "tensorwise", "device": "cpu", "emulated": True, "preflight": [],
           "layers": [layer, dict(layer, name="lm_head")], "converted": [name, "lm_head"],
           "keep_bf16": [], "threshold_db": 20.0, "findings": []}
    printed = format_fp8(doc).splitlines()
    assert f"  {name}" in printed and max(map(len, printed)) <= 120
    message = "mat1 and mat2 must have the same dtype, but got Float and Half " * 4
    error = {"type": "RuntimeError", "message": message.strip(), "stage": "forward",
             "module": "model.encoder.layers.0.attention.self.query"}
    spec = PipelineSpec(model="m", dataset="synthetic")
    printed = format_diagnosis(Diagnosis(spec, "cpu", findings=[], error=error).to_json())
    assert max(map(len, printed.splitlines())) <= 120
    assert " ".join(message.split()) in " ".join(printed.split())   # wrapped, whole
