"""A fix applied to a traced script (`trace --apply`, the window's fixed copy) is code that runs
where it goes: an "insert" goes in right before its line, which stays; a "replace" takes the
place of the line the fix is about. Each demo script's fixes with a line, applied one at a time,
make the failing script run to its end."""

import subprocess
import sys

import pytest

from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.script.proof import fixed_script
from fp16studio.core.script.trace import trace_script

FAILING_SCRIPTS = ("map_cast.py", "blind_half.py", "pil_preprocess.py")


@pytest.mark.parametrize("name", FAILING_SCRIPTS)
def test_each_fix_with_a_line_applied_alone_makes_the_script_run(demo_dir, tmp_path, name):
    for source in (demo_dir / "scripts").glob("*.py"):   # beside it: the module it imports
        (tmp_path / source.name).write_text(source.read_text().replace(
            "Path(__file__).resolve().parent.parent", f"Path({str(demo_dir)!r})"))
    script = tmp_path / name
    before = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=600)
    assert before.returncode != 0
    result = trace_script(script)
    asks = sorted({f"{fix.id}:{finding.source['line']}" for finding in result.findings
                   for fix in finding.fixes if finding.source and fix.code is not None
                   and fix.code.kind in ("replace", "insert")})
    assert asks, [f.code for f in result.findings]
    for ask in asks:
        text, applied = fixed_script(script, result.findings, [ask])
        assert len(applied) == 1, applied   # one fix, once, however many findings offer it
        copy = tmp_path / f"applied_{name}"
        copy.write_text(text)
        after = subprocess.run([sys.executable, str(copy)], capture_output=True, text=True,
                               cwd=tmp_path, timeout=600)
        assert after.returncode == 0, (ask, after.stderr[-2000:])


def test_an_insert_keeps_its_line_and_a_replace_takes_its_place(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = load()\n    out = model(x)\nprint(out)\n")

    def finding(fix_id, kind, line, text):
        edit = CodeEdit(text, kind, {"file": str(script), "line": line})
        return Finding("dtype-mismatch", "error", "model", "m", {},
                       (Fix(fix_id, fix_id, {}, "", edit),), source={"file": str(script), "line": line})

    findings = [finding("cast", "insert", 2, "x = x.half()"), finding("load", "replace", 1, "x = load().half()"),
                finding("elsewhere", "add", 3, "import torch")]
    text, applied = fixed_script(script, findings, ["cast", "load"])
    assert text == "x = load().half()\n    x = x.half()\n    out = model(x)\nprint(out)\n"
    assert [a["id"] for a in applied] == ["cast", "load"]
    with pytest.raises(Exception, match="offered: cast:2, load:1\\)"):
        fixed_script(script, findings, ["elsewhere"])   # no line to put it at: not offered
