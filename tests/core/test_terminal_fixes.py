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
