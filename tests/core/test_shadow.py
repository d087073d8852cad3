"""The float32 shadow (issue 40, core/script/shadow.py): where a half-precision error is born,
where it lands, and the fix proven on the script.

Each script under tests/scripts/shadow/ holds one mechanism the first value check missed, its
bad line marked `# MARK: name`, beside the same code written safely; each prints what it
computed and what float32 gives. Traced, the finding is at the marked line and nowhere else,
says where the values landed, and its first fix, proven on a copy by the tracer, makes the
script print float32's answer under plain python.
"""

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fp16studio.core.diagnostics.rules.values import _said
from fp16studio.core.script import proof
from fp16studio.core.script.proof import _better, apply_edits
from fp16studio.core.script.rewrite import assigned_in_place, augmented, cast_back, \
    casts_to_float32
from fp16studio.core.script.shadow import ShadowCheck
from fp16studio.core.script.value_check import Landing, QuietValue, ValueLoss
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts" / "shadow"

# script: (marker, kind, severity, what plain python prints, what the fixed script prints)
CASES = {
    "small_total.py": ("total", "absorbed", "error", "total 0.250 float32 total 0.471",
                       "total 0.471 float32 total 0.471"),
    "pow_next_line.py": ("pow", "overflow", "error", "out False safe True", "out True safe True"),
    "decay.py": ("decay", "constant", "error", "ema 10.0 float32 ema 0.98", "float32 ema 0.98"),
    "weights_step.py": ("step", "absorbed", "error", "unchanged 0.85546875",
                        "unchanged 0.0 float32 unchanged 0.0"),
    "cancel.py": ("sigmoid", "one", "error", "surprise inf float32 416.2", "float32 416.2"),
    "draw.py": ("softmax", "zeroed", "error", "rare possible 0 float32 1000",
                "rare possible 1000 float32 1000"),
    "late_overflow.py": ("exp", "overflow", "error", "last inf float32 24384098",
                         "float32 24384098"),
    "threshold.py": ("scores", "rounding", "warning", "chosen 59048 float32 65468",
                     "chosen 65468 float32 65468"),
}
_traced: dict = {}


def line_of(script: Path, marker: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1)
                if f"# MARK: {marker}" in line)


def plain(script: Path) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=script.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout


def traced(name: str):
    if name not in _traced:
        _traced[name] = trace_script(SCRIPTS / name)
    return _traced[name]


def with_fix(script: Path, fix, folder: Path) -> Path:
    """The script with the fix's code in place of the lines it names."""
    source = fix.code.source
    lines = script.read_text().splitlines()
    first, last = source["line"], source.get("end_line", source["line"])
    lines[first - 1:last] = fix.code.render().splitlines()
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_mechanism_is_found_where_it_is_born_with_a_fix_proven_on_the_script(name,
                                                                                  tmp_path):
    marker, kind, severity, printed, fixed_prints = CASES[name]
    script = SCRIPTS / name
    assert printed in plain(script)
    result = traced(name)
    quiet = [f for f in result.findings if f.code == "precision-loss"]
    # Only the marked line: its safe twin, and the lines its error only passed through, are
    # silent.
    assert [f.source["line"] for f in quiet] == [line_of(script, marker)], \
        [f.message for f in quiet]
    (finding,) = quiet
    assert (finding.evidence["kind"], finding.severity) == (kind, severity), finding.message
    landing = finding.evidence["landing"]
    assert landing["line"] > finding.source["line"]          # where it matters: later
    assert f"line {landing['line']}" in finding.message
    assert finding.evidence["proof"] == "proven", finding.message
    fix = finding.fixes[0]
    assert "#" not in fix.code.text.split("  # MARK")[0]       # code, never a comment
    assert fixed_prints in plain(with_fix(script, fix, tmp_path))


def test_the_running_total_says_what_the_script_printed_and_what_float32_gives():
    (finding,) = traced("small_total.py").findings
    landing = finding.evidence["landing"]
    assert landing["value"] == pytest.approx(0.25) and landing["float32"] == pytest.approx(
        0.4705, abs=1e-3)
    assert "it is 0.25 where float32 gives 0.4705" in finding.message
    assert finding.fixes[0].code.text == "total = total.float() + loss"
    assert finding.evidence["lost"] > 500        # additions absorbed whole


def test_a_fix_keeps_the_dtype_the_next_line_needs():
    (finding,) = traced("pow_next_line.py").findings
    code = finding.fixes[0].code
    assert code.source["end_line"] == code.source["line"] + 1
    assert code.text.splitlines() == [
        "var = x.float().pow(2).mean(-1, keepdim=True)",
        "h = (x * torch.rsqrt(var + 1e-3)).to(x.dtype)  # MARK: next"]


def test_half_precision_used_the_right_way_is_silent():
    result = trace_script(SCRIPTS / "healthy.py")
    assert result.findings == [] and result.ok


# -- the shadow on hand-built calls (no process) ----------------------------------------------

def follow(check, func, *args, where=("s.py", 1), **kwargs):
    pending = check.before(func, func.__name__, args, kwargs, where)
    result = func(*args, **kwargs)
    if pending is not None:
        check.after(pending, result)
    return result


def test_exact_in_place_and_out_operations_carry_no_error():
    check = ShadowCheck()
    h = torch.full((64,), 3.0, dtype=torch.float16)
    g = torch.full((64,), 3.0, dtype=torch.float16)
    k = torch.full((64,), 3.0, dtype=torch.float16)
    follow(check, torch.Tensor.__iadd__, h, h)
    follow(check, torch.Tensor.mul_, g, g)
    follow(check, torch.add, k, k, out=k)
    assert (h[0].item(), g[0].item(), k[0].item()) == (6.0, 9.0, 6.0)   # each once, not twice
    assert all(not lost for b in check.births.values() for lost, _, _ in b.events.values())
    for tensor in (h, g, k):
        assert torch.equal(check.entry(tensor).value, tensor.float())


def test_a_shadow_follows_in_place_updates_and_an_unseen_write_makes_it_exact_again():
    check = ShadowCheck()
    total = torch.zeros((), dtype=torch.bfloat16)
    for _ in range(300):
        follow(check, torch.Tensor.__iadd__, total, torch.tensor(1.0, dtype=torch.bfloat16))
    assert total.item() == 256.0 and check.entry(total).value.item() == 300.0
    total.zero_()                  # a write the shadow did not see
    assert check.entry(total) is None


def test_a_line_s_consumer_is_cast_back_only_where_it_made_half_values():
    check = ShadowCheck()
    x = torch.linspace(0, 1, 64).half()
    made = follow(check, torch.mul, x, x, where=("s.py", 1))
    follow(check, torch.argmin, made, where=("s.py", 2))          # an index of it
    kept = follow(check, torch.mul, x, 3.0, where=("s.py", 3))
    follow(check, torch.add, kept, kept, where=("s.py", 4))       # half values of it
    first, third = check.births[("s.py", 1)], check.births[("s.py", 3)]
    assert (first.consumer, first.consumer_half) == (("s.py", 2), False)
    assert (third.consumer, third.consumer_half) == (("s.py", 4), True)


def test_random_operations_never_run_twice():
    check = ShadowCheck()
    probs = torch.full((8,), 0.125, dtype=torch.float16)
    torch.manual_seed(0)
    follow(check, torch.multinomial, probs, 4)
    after = torch.get_rng_state()
    torch.manual_seed(0)
    torch.multinomial(probs, 4)
    assert torch.equal(after, torch.get_rng_state())


def test_our_calls_go_around_what_the_script_wrapped_and_warnings_stay_the_scripts():
    calls = []
    original = torch.Tensor.float

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    check = ShadowCheck()     # made before the script wraps Tensor.float, as under trace
    torch.Tensor.float = counted
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            filters = list(warnings.filters)
            x = torch.full((4,), 300.0, dtype=torch.float16)
            follow(check, torch.Tensor.pow, x, 2)
            follow(check, torch.Tensor.sum, x)
            assert warnings.filters == filters
    finally:
        torch.Tensor.float = original
    assert calls == []


def test_numbers_are_read_as_values_only_where_the_operation_takes_a_value():
    check = ShadowCheck()
    x = torch.ones(4096, dtype=torch.float16)
    follow(check, torch.Tensor.narrow, x, 0, 2049, 5)          # 2049: an index, not a value
    follow(check, torch.Tensor.__mul__, x, 1.0001, where=("s.py", 2))   # 1.0001 is 1.0 there
    assert not any(lost for lost, _, _ in check.births[("s.py", 1)].events.values())
    assert check.births[("s.py", 2)].details["constant"] == {"value": 1.0001, "held": 1.0}


# -- the fix's code ---------------------------------------------------------------------------

def test_rewrites_keep_precedence_strings_and_comments():
    assert augmented("total += a if c else b") == "total = total.float() + (a if c else b)"
    assert augmented("debt -= p - q") == "debt = debt.float() - (p - q)"
    assert augmented('t += x["a#b"]  # sum') == 't = t.float() + x["a#b"]'
    assert assigned_in_place("total.add_(x, alpha=2)") == "total = total.float().add(x, alpha=2)"
    assert assigned_in_place("total.float().add_(1.0)") is None   # a temporary: no target
    assert cast_back("h = x * y  # keep", "x") == "h = (x * y).to(x.dtype)  # keep"
    assert cast_back("return h", "x") == "return h.to(x.dtype)"
    assert casts_to_float32("s = f(x.half() @ w.bfloat16().t(), 'y.half()')  # .half()") == \
        "s = f(x.float() @ w.float().t(), 'y.half()')  # .half()"
    assert casts_to_float32("y = a.to(dev, torch.float16) + b.to(dtype=torch.half)") == \
        "y = a.to(dev, torch.float32) + b.to(dtype=torch.float32)"
    assert casts_to_float32("y = a.half(1) + b") is None


def test_a_fix_is_proven_where_what_is_left_at_the_landing_is_much_smaller():
    """A fix that ends the inf/NaN, or halves the error, where the values land is proven: what
    is left there is another line's rounding (the inputs cast upstream), not this fix's."""
    before = SimpleNamespace(nonfinite=4097, error=float("nan"), flipped=0)
    assert _better(before, {"nonfinite": 0, "error": 0.011})
    assert not _better(before, {"nonfinite": 1, "error": 0.011})
    before = SimpleNamespace(nonfinite=0, error=0.4, flipped=100)
    assert _better(before, {"error": 0.1, "flipped": 20})
    assert not _better(before, {"error": 0.3, "flipped": 20})
    assert not _better(before, {"error": 0.1, "flipped": 80})


def record_at(line: int) -> QuietValue:
    return QuietValue(ValueLoss("one", "__rsub__", "float16", 8, 1000), 1, 1,
                      {"file": "s.py", "line": line}, "s", "x = 1 - x", (((line, "fixed"),),),
                      False, None, Landing({"file": "s.py", "line": 9}, "item", "s", "print(x)",
                                           1.0))


@pytest.mark.parametrize("shares, kept", [({3: 1.0, 5: 0.0}, [3]), ({3: 0.5, 5: 0.5}, [3, 5])])
def test_a_line_whose_loss_no_longer_lands_once_another_is_fixed_is_left_out(monkeypatch, shares,
                                                                             kept):
    """Lines 3 and 5 land at line 9; `shares`: the error each adds there. A line whose loss
    reaches nothing once the other is fixed only follows it: its record goes; lines that each
    add a part are both kept, each proven."""
    def run(script, args, edits, budget):
        left = [line for line in shares if line not in {at for at, _ in edits}]
        error = sum(shares[line] for line in left)
        return proof._Rerun(SimpleNamespace(error=None, findings=[SimpleNamespace(
            code="precision-loss", severity="error", source={"file": "s.py", "line": line},
            evidence={"landing": {"file": "s.py", "line": 9, "error": error}})
            for line in left if error]))

    monkeypatch.setattr(proof, "_run", run)
    out = proof.prove([record_at(5), record_at(3)], SimpleNamespace(script="s.py"), args=[])
    assert sorted(r.source["line"] for r in out) == kept
    assert all(r.proof[0] == proof.PROVEN for r in out)


def test_a_proof_reads_the_copys_places_as_the_scripts(tmp_path):
    """The copy has its own name, and a fix of several lines moves the lines below it: its
    places are read back in the script's lines; a module beside it is its own file."""
    script, copy, helper = tmp_path / "train.py", tmp_path / "copy" / "train.py", tmp_path / "h.py"
    rerun = proof._Rerun(None, str(copy), str(script), ((4, "a\nb\nc"), (9, "d")))
    at = [rerun.place({"file": str(copy), "line": line}) for line in (3, 4, 6, 7, 11, 12)]
    assert [line for _, line in at] == [3, 4, 4, 5, 9, 10]
    assert {file for file, _ in at} == {str(script)}
    assert rerun.place({"file": str(helper), "line": 3}) == (str(helper), 3)
    assert rerun.place({"line": 3}) is None


def test_a_line_outside_the_traced_script_is_not_tried_on_its_copy(monkeypatch, tmp_path):
    """Its fix would be written into the script at another file's line number."""
    monkeypatch.setattr(proof, "_run", lambda *a: pytest.fail("a run for a line elsewhere"))
    record = dataclasses.replace(record_at(5), source={"file": str(tmp_path / "h.py"), "line": 5})
    (out,) = proof.prove([record], SimpleNamespace(script=str(tmp_path / "s.py")), args=[])
    assert out.proof[0].startswith("not proven:") and "h.py" in out.proof[0]


def test_operators_are_said_as_the_script_wrote_them():
    assert [_said(op) for op in ("__rsub__", "__iadd__", "__matmul__", "__rpow__", "sum")] == [
        "subtraction (-)", "addition (+)", "matrix product (@)", "power (**)", "sum"]
    assert _said("__getitem__") == "__getitem__"       # no operator word: its own name


def test_edits_go_in_at_each_lines_indentation():
    text = "def f(x):\n    y = x\n    return y\n"
    assert apply_edits(text, [(2, "y = x.float()"), (3, "return y.to(x.dtype)")]) == \
        "def f(x):\n    y = x.float()\n    return y.to(x.dtype)\n"


# -- the one-click fix of a traced script, from the command line ---------------------------------

def test_trace_apply_writes_a_fixed_copy_and_never_the_script(tmp_path):
    script = SCRIPTS / "small_total.py"
    before = script.read_text()
    fixed = tmp_path / "fixed.py"
    done = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script), "--apply",
                           "float32-accumulator", "-o", str(fixed)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1, done.stderr           # the script as it is loses values
    assert f"wrote {fixed}" in done.stdout
    assert script.read_text() == before
    assert "total 0.471 float32 total 0.471" in plain(fixed)
    refused = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script), "--apply",
                              "float-input"], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1


def test_a_creation_s_fix_is_python_whatever_its_commas():
    from fp16studio.core.script.user_ops import _made_in_float32

    assert _made_in_float32("t = torch.arange(0, 600, 1.0,)", "arange") == \
        "t = torch.arange(0, 600, 1.0, dtype=torch.float32)"
    assert _made_in_float32("t = torch.ones()", "ones") == "t = torch.ones(dtype=torch.float32)"
    assert _made_in_float32("ids.to(dev, torch.float16, True)", "to",
                            (torch.zeros(1), "cpu", torch.float16, True)) == \
        "ids.to(dev, torch.float32, True)"
