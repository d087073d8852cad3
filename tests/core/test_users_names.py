"""Fix code in the user's own names (issue 31 item 8): the model, its output and its batch as
the model's call writes them, the loss and the optimizer as the step's `backward()` and
`step()` lines do (rules/edits.py `names_at`), at the user's indentation.

Each script (tests/scripts/names_*.py) is run plain first; the fix is written into a copy as a
person would write it, which then runs and traces clean.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from fix_code import parses

from fp16studio.core.diagnostics.rules.edits import (Batch, Names, grad_scaler, master_weights,
                                                     names_at)
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts"


def line_of(script: Path, marker: str) -> int:
    return next(i for i, text in enumerate(script.read_text().splitlines(), 1) if marker in text)


def plain(script: Path, ok: bool = True) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=script.parent)
    assert (done.returncode == 0) == ok, done.stderr
    return done.stdout


def written(script: Path, folder: Path, first: int, last: int, code: str) -> Path:
    """A copy of the script with its lines first..last (1-based) replaced by `code`."""
    lines = script.read_text().splitlines()
    lines[first - 1:last] = code.splitlines()
    folder.mkdir(exist_ok=True)
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


def indented(code: str, like: str) -> str:
    """`code` (flush left) at the indentation of the user's line `like`."""
    indent = like[:len(like) - len(like.lstrip())]
    return "\n".join(indent + line for line in code.splitlines())


@pytest.mark.parametrize("lines, names", [
    (("out = net(**enc)",), Names(model="net", batch=Batch("enc"), call="net(**enc)",
                                  output="out")),
    (("logits = self.model(x).logits",),
     Names(model="self.model", batch=Batch("x", False), call="self.model(x)")),
    (("loss = model(input_ids=ids, labels=y).loss",),
     Names(batch=Batch("ids", False), call="model(input_ids=ids, labels=y)")),
    (("a, b = net(x)",), Names(model="net", batch=Batch("x", False), call="net(x)")),
    (("out = net.generate(ids, max_new_tokens=3)",),
     Names(model="net", batch=Batch("ids", False), call="net.generate(ids, max_new_tokens=3)",
           output="out")),
    (("out = net(x)", "l.backward()", "opt.step()"),
     Names(model="net", batch=Batch("x", False), call="net(x)", output="out", loss="l",
           optimizer="opt")),
    (("out = net(x)", "amp.scale(l).backward()", "amp.step(opt)"),
     Names(model="net", batch=Batch("x", False), call="net(x)", output="out", loss="l",
           optimizer="opt", scaler="amp")),
    (("out = net(x)", "l.backward()", "opt.step(closure)"),
     Names(model="net", batch=Batch("x", False), call="net(x)", output="out", loss="l",
           optimizer="opt")),
    (("with torch.autocast('cpu'):", None, None), Names()),
])
def test_the_users_names_are_read_from_their_lines(lines, names):
    assert names_at(*lines) == names


@pytest.mark.parametrize("line, bound, names", [
    # The call of the name the frame has for the model, wherever it is on the line.
    ("loss = crit(y, net(x))", ("net",), Names(model="net", batch=Batch("x", False),
                                              call="net(x)")),
    ("out = net(normalize(x))", ("net", "model"),
     Names(model="net", batch=Batch("x", False), call="net(normalize(x))", output="out")),
    # A model run inside a library's object (a pipeline): its call, not its name.
    ("out = pipe(text)", (), Names(batch=Batch("text", False), call="pipe(text)", output="out")),
])
def test_the_model_is_the_callee_the_trace_saw_the_frame_name_it(line, bound, names):
    assert names_at(line, bound=bound) == names


def test_a_forward_fix_writes_the_scripts_model_batch_and_output(tmp_path):
    script = SCRIPTS / "names_forward.py"
    assert "weight type (CPUBFloat16Type)" in subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300).stderr
    result = trace_script(script)
    (finding,) = result.findings
    forward = line_of(script, "MARK: forward")
    assert (finding.code, finding.source) == ("dtype-mismatch", {"file": str(script),
                                                                 "line": forward})
    cast, under_autocast = finding.fixes[:2]
    assert cast.code_text() == ("    enc = {k: v.to(torch.bfloat16) if v.is_floating_point() "
                                "else v for k, v in enc.items()}  # right before net(...)")
    assert under_autocast.code_text() == (
        "net = net.to(torch.float32)  # float32 weights: no .half() of the model or its inputs\n"
        "with torch.autocast(device_type=next(net.parameters()).device.type, "
        "dtype=torch.bfloat16):\n"
        "    out = net(**enc)")
    line = script.read_text().splitlines()[forward - 1]
    # The cast inserted before the call; the autocast block in place of the call.
    for fixed in (written(script, tmp_path / "cast", forward, forward - 1, cast.code_text()),
                  written(script, tmp_path / "autocast", forward, forward,
                          indented(under_autocast.code_text(), line))):
        assert "classes" in plain(fixed)
        assert trace_script(fixed).findings == []


def test_a_fix_inside_a_method_writes_self_model_at_the_methods_indentation(tmp_path):
    script = SCRIPTS / "names_in_method.py"
    plain(script, ok=False)
    (finding,) = trace_script(script).findings
    forward = line_of(script, "MARK: forward")
    assert finding.source["line"] == forward
    cast, under_autocast = finding.fixes[:2]
    assert cast.code_text() == ("            pixels = pixels.to(torch.bfloat16)  "
                                "# right before self.model(...)")
    assert under_autocast.code_text().startswith(
        "self.model = self.model.to(torch.float32)")
    assert "device_type=next(self.model.parameters()).device.type" in under_autocast.code_text()
    assert parses(under_autocast.code_text())
    fixed = written(script, tmp_path, forward, forward - 1, cast.code_text())
    assert "classes" in plain(fixed)
    assert trace_script(fixed).findings == []


def test_a_training_fix_writes_the_scripts_model_output_loss_and_optimizer(tmp_path):
    script = SCRIPTS / "names_training.py"
    assert "moved in 3 steps: 7.81%" in plain(script)
    result = trace_script(script)
    (finding,) = result.findings
    assert (finding.code, finding.source["line"]) == ("optimizer-precision",
                                                      line_of(script, "MARK: step"))
    first = finding.fixes[0]
    assert first.code_text() == (
        "net = net.float()  # float32 master weights: the optimizer updates these\n"
        "with torch.autocast(device_type=next(net.parameters()).device.type, "
        "dtype=torch.bfloat16):\n"
        "    out = net(input_ids=ids)\n"
        "    # your line that computes cost from out, here under autocast too\n"
        "cost.backward()\n"
        "opt.step()")
    # Written as a person would: in place of the forward pass to the step, their own loss line
    # where the code says.
    lines = script.read_text().splitlines()
    forward, loss = line_of(script, "MARK: forward"), line_of(script, "MARK: loss")
    code = first.code_text().replace(
        "    # your line that computes cost from out, here under autocast too",
        "    " + lines[loss - 1].strip())
    fixed = written(script, tmp_path, forward, line_of(script, "MARK: step"),
                    indented(code, lines[forward - 1]))
    assert "moved in 3 steps: 100.00%" in plain(fixed)
    assert trace_script(fixed).findings == []


def test_a_spec_run_keeps_todays_words():
    code = master_weights("float16").code_text()
    assert "model = model.float()" in code and "loss = model(**inputs).loss" in code
    assert "scaler.scale(loss).backward()\nscaler.step(optimizer)" in code


def test_fix_code_finds_the_device_of_a_plain_module_too():
    # A plain nn.Module has no `.device` (transformers' models do): the scaler's and
    # autocast's device type is read from the module's parameters.
    import torch

    names = Names(model="net", loss="cost", optimizer="opt")
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    before = net.weight.detach().clone()
    space = {"torch": torch, "net": net, "opt": opt, "cost": net(torch.randn(3, 4)).sum()}
    exec(grad_scaler(names=names).code_text(), space)
    assert not torch.equal(before, net.weight) and space["scaler"].is_enabled()
    autocast_line = master_weights("bfloat16", names=names).code_text().splitlines()[1]
    assert autocast_line.startswith("with torch.autocast(device_type=next(net.parameters())")
