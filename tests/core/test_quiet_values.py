"""Values half precision loses without an error (issue 28): the value check on the user's own
operations (core/script/value_check.py), its rules (core/diagnostics/rules/values.py), training
that quietly stopped, and autocast's per-device lists (core/common/autocast_ops.py).

The scripts (tests/scripts/quiet_*.py, train_stalled_*.py) hold each bad line next to the same
code written safely; each is traced once (module fixtures): the finding is at the bad line with
its one-line fix, and nothing is said about the safe twin. Every script is first run plain.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fp16studio.core.common.autocast_ops import float32_elsewhere, runs_in_float32
from fp16studio.core.diagnostics.rules.training import training_stalled
from fp16studio.core.diagnostics.rules.values import precision_loss
from fp16studio.core.run.training import GradStat, OptimizerStep, Step
from fp16studio.core.script.steps import ScalerRun
from fp16studio.core.script.trace import trace_script
from fp16studio.core.script.shadow import ShadowCheck
from fp16studio.core.script.value_check import QuietValue, ValueLoss

SCRIPTS = Path(__file__).parent.parent / "scripts"


def line_of(script: Path, marker: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if marker in line)


def plain(script: Path) -> str:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=script.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout


def quiet(result) -> dict:
    """line -> the precision-loss finding there."""
    return {f.source["line"]: f for f in result.findings if f.code == "precision-loss"}


def with_fixes(script: Path, findings, folder: Path) -> Path:
    """The script with each finding's lines written as its first fix says (last first: a fix
    of several lines keeps the line numbers above it)."""
    lines = script.read_text().splitlines()
    for finding in sorted(findings, key=lambda f: f.source["line"], reverse=True):
        source = finding.fixes[0].code.source
        lines[source["line"] - 1:source.get("end_line", source["line"])] = \
            finding.fixes[0].code_text().splitlines()      # at its indentation
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


def traced(name: str):
    script = SCRIPTS / name
    return script, plain(script), trace_script(script)


@pytest.fixture(scope="module")
def positions():
    return traced("quiet_positions.py")


@pytest.fixture(scope="module")
def total():
    return traced("quiet_total.py")


@pytest.fixture(scope="module")
def rmsnorm():
    return traced("quiet_rmsnorm.py")


# -- each kind at its line, with its fix; silent on the safe twin ------------------------------

def test_positions_past_the_exact_range_repeat_and_are_made_in_float32_instead(positions,
                                                                                 tmp_path):
    script, printed, result = positions
    assert "distinct 407 407 2525 safe 600 600 3000" in printed
    found = quiet(result)
    # Only the three bad lines: the int64 positions and float32 steps below them are silent.
    assert set(found) == {line_of(script, m) for m in ("MARK: positions", "MARK: cast",
                                                       "MARK: times")}
    made = found[line_of(script, "MARK: positions")]
    # What the script prints from them (the count of distinct positions) is wrong: an error.
    assert made.severity == "error" and made.location == "quiet_positions.py:7"
    assert {k: made.evidence[k] for k in ("kind", "op", "dtype", "lost", "total", "largest",
                                          "exact", "repeats")} == {
        "kind": "integer-range", "op": "arange", "dtype": "bfloat16", "lost": 194, "total": 600,
        "largest": 599.0, "exact": 256, "repeats": 193}
    assert made.evidence["landing"]["line"] == line_of(script, "print(")
    assert "193 positions now repeat" in made.message and "exactly only up to 256" in made.message
    assert made.fixes[0].code.text == "positions = torch.arange(n, dtype=torch.float32)"
    cast = found[line_of(script, "MARK: cast")]
    assert (cast.evidence["kind"], cast.evidence["op"]) == ("integer-range", "to")
    assert cast.fixes[0].code.text == "position_ids = ids.to(torch.float32)"
    times = found[line_of(script, "MARK: times")]
    assert (times.evidence["kind"], times.evidence["lost"]) == ("collapsed", 475)
    assert times.fixes[0].code.text == "times = steps.float()"
    fixed = plain(with_fixes(script, found.values(), tmp_path))
    assert "distinct 600 600 3000 safe 600 600 3000" in fixed


def test_a_bfloat16_running_total_says_how_many_additions_it_lost(total, tmp_path):
    script, printed, result = total
    assert "total 512 float32 total 995" in printed
    (finding,) = result.findings      # the float32 total below it: nothing
    assert finding.source["line"] == line_of(script, "MARK: total")
    assert {k: finding.evidence[k] for k in ("kind", "op", "dtype", "lost", "total")} == {
        "kind": "absorbed", "op": "add_", "dtype": "bfloat16", "lost": 614, "total": 1000}
    assert "614 of 1000 updates" in finding.message
    assert (finding.evidence["landing"]["value"], finding.evidence["landing"]["float32"]) == (
        512.0, pytest.approx(994.9, abs=0.1))
    assert finding.fixes[0].code.text == "total = total.float() + loss"
    assert "total 995 float32 total 995" in plain(with_fixes(script, [finding], tmp_path))


def test_an_overflow_hidden_by_rsqrt_and_a_zero_eps_are_found_at_their_lines(rmsnorm,
                                                                              tmp_path):
    script, printed, result = rmsnorm
    assert "zeros 1.0 safe zeros 0.0" in printed and "nan True safe nan False" in printed
    found = quiet(result)
    assert set(found) == {line_of(script, m) for m in ("MARK: pow", "MARK: eps",
                                                       "MARK: autocast")}
    norm = found[line_of(script, "MARK: pow")]
    assert (norm.code, norm.severity, norm.location) == (
        "precision-loss", "error", "RMSNorm.forward:16")
    assert {k: norm.evidence[k] for k in ("kind", "op", "dtype", "lost", "total")} == {
        "kind": "overflow", "op": "pow", "dtype": "float16", "lost": 64, "total": 128}
    # Proven on the script: float32 for the norm, and its output back in the input's dtype.
    assert norm.evidence["proof"] == "proven"
    assert norm.fixes[0].code.text.splitlines() == [
        "variance = x.float().pow(2).mean(-1, keepdim=True)",
        "return (self.weight * (x * torch.rsqrt(variance + self.eps))).to(x.dtype)"]
    eps = found[line_of(script, "MARK: eps")]
    assert (eps.severity, eps.evidence["kind"], eps.evidence["value"], eps.evidence["held"]) == (
        "error", "constant", 1e-8, 0.0)      # the script prints NaN where float32 does not
    assert eps.fixes[0].code.text == \
        "return v / (v.norm(dim=-1, keepdim=True) + torch.finfo(torch.float16).tiny)"
    # The CPU's autocast leaves pow in float16, CUDA's computes it in float32.
    under = found[line_of(script, "MARK: autocast")]
    assert under.evidence["autocast"] == {"device": "cpu", "float32 on": ["cuda"]}
    assert "safe on cuda and loses values on cpu" in under.message
    fixed = plain(with_fixes(script, found.values(), tmp_path))
    assert "zeros 0.0 safe zeros 0.0" in fixed and "nan False safe nan False" in fixed
    assert "autocast zeros 0.0" in fixed
    assert not result.ok     # an overflow is an error: trace exits 1


def test_a_healthy_mixed_precision_loop_of_the_users_own_code_gives_no_finding():
    result = trace_script(SCRIPTS / "quiet_healthy_amp.py")
    assert result.findings == [] and result.ok


# -- training that quietly stopped ---------------------------------------------------------------

STALLED = [
    ("train_stalled_zero_grads.py", "step 2: loss 1.02161e-09", "zero-gradients", 2,
     "MARK: backward", "grad-scaler"),
    ("train_stalled_nan.py", "step 1: loss inf", "nan-after-step", 1, "MARK: step",
     "master-weights-float16"),
    ("train_stalled_skipped.py", "scale 0.125", "every-step-skipped", 4, "MARK: step",
     "autocast-bfloat16"),
]


@pytest.mark.parametrize("name, printed, kind, step, marker, fix", STALLED,
                         ids=[c[0] for c in STALLED])
def test_training_that_stopped_quietly_is_an_error_at_its_step_and_line(
        name, printed, kind, step, marker, fix):
    script = SCRIPTS / name
    assert printed in plain(script)
    result = trace_script(script, steps=5)
    (finding,) = [f for f in result.findings if f.code == "training-stalled"]
    assert (finding.severity, finding.evidence["kind"], finding.evidence["step"]) == (
        "error", kind, step)
    assert finding.source == {"file": str(script), "line": line_of(script, marker)}
    assert finding.fixes[0].id == fix
    assert not result.ok


# -- the detection on hand-built tensors (no process) --------------------------------------------

def shadowed(func, *args, where=("script.py", 1), check=None, **kwargs):
    """The kinds one call lost, as the float32 shadow counts them (core/script/shadow.py)."""
    check = check or ShadowCheck()
    pending = check.before(func, func.__name__, args, kwargs, where)
    result = func(*args, **kwargs)
    if pending is not None:
        check.after(pending, result)
    birth = check.births.get(where)
    return {kind: counts[0] for kind, counts in birth.events.items() if counts[0]} \
        if birth else {}


def test_each_kind_is_found_on_hand_built_tensors():
    big = torch.full((2, 3), 300.0, dtype=torch.float16)
    assert shadowed(torch.Tensor.pow, big, 2) == {"overflow": 6}
    assert shadowed(torch.Tensor.__add__, big, 1e-8)["constant"] == 1
    # A fill the mask did not use this time: -inf all the same.
    assert shadowed(torch.where, torch.ones(2, 3, dtype=torch.bool), big, -1e9)["constant"] == 1
    assert shadowed(torch.Tensor.to, torch.arange(2050), torch.float16) == {"integer-range": 1}
    assert shadowed(torch.linspace, 0, 1, 3000, dtype=torch.float16) == {"collapsed": 544}
    assert shadowed(torch.tensor, 0.9999, dtype=torch.bfloat16) == {"one": 1}


def test_the_same_values_made_safely_are_silent():
    assert shadowed(torch.arange, 600) == {}                        # int64 positions
    assert shadowed(torch.arange, 256, dtype=torch.bfloat16) == {}   # within the exact range
    assert shadowed(torch.Tensor.to, torch.arange(2049), torch.float16) == {}
    small = torch.full((2, 3), 3.0, dtype=torch.float16)
    assert shadowed(torch.Tensor.pow, small, 2) == {}
    assert shadowed(torch.Tensor.__add__, small, torch.finfo(torch.float16).eps) == {}
    assert shadowed(torch.Tensor.pow, small.float(), 2) == {}       # float32: not checked
    # Activations cast to half round, as they must: values within the dtype's precision of
    # each other become equal, and unsorted values are no positions: no collapse claimed.
    noise = 1 + torch.rand(4096, generator=torch.manual_seed(0)) * 1e-3
    assert shadowed(torch.Tensor.half, noise) == {}


def test_an_update_absorbed_by_its_target_is_counted_in_any_share():
    check = ShadowCheck()
    total = torch.tensor([512.0, 8.0], dtype=torch.bfloat16)
    one = torch.tensor(1.0, dtype=torch.bfloat16)
    for _ in range(3):
        lost = shadowed(torch.Tensor.add_, total, one, check=check)
    assert lost == {"absorbed": 3} and total.tolist() == [512.0, 11.0]   # added once each


def test_the_check_changes_nothing_the_script_computes():
    generator_state = torch.get_rng_state()
    x = torch.full((4,), 300.0, dtype=torch.float16)
    before = x.clone()
    shadowed(torch.Tensor.mul_, x, 300.0)          # in place: compared before it mutates
    assert torch.equal(x, before * 300.0)          # once, not twice
    assert torch.equal(torch.get_rng_state(), generator_state)
    # A random operation is never run again: the generator moves as without the check.
    ones = torch.ones(4, dtype=torch.float16)
    torch.manual_seed(0)
    assert shadowed(torch.nn.functional.dropout, ones) == {}
    checked = torch.get_rng_state()
    torch.manual_seed(0)
    torch.nn.functional.dropout(ones)
    assert torch.equal(checked, torch.get_rng_state())


# -- the rules' words -------------------------------------------------------------------------

def record(kind="overflow", op="pow", autocast=None, made=False, **loss):
    values = dict(kind=kind, op=op, dtype="float16", lost=3, total=8) | loss
    return QuietValue(ValueLoss(**values), 1, 1, {"file": "s.py", "line": 4}, "f", "y = x",
                      (((4, "y = x.float()"),),), made, autocast)


def test_the_rule_words_the_record_and_places_it_at_its_line():
    (finding,) = precision_loss([record()])
    assert (finding.code, finding.severity, finding.location) == ("precision-loss", "error",
                                                                  "f:4")
    assert "at 3 of 8 positions" in finding.message
    assert (finding.fixes[0].id, finding.fixes[0].code.text) == ("float-input", "y = x.float()")
    assert precision_loss([record(kind="absorbed", lost=0, total=5)]) == []
    (made,) = precision_loss([record(kind="integer-range", op="arange", made=True,
                                     value=999.0, repeats=3)])
    assert made.severity == "warning" and made.fixes[0].id == "exact-dtype"


def test_autocast_lists_say_which_device_computes_an_operation_in_float32():
    assert float32_elsewhere("pow", "cpu") == ["cuda"]
    assert float32_elsewhere("quantile", "cuda") == ["cpu"]
    assert float32_elsewhere("prod", "cpu") == [] and float32_elsewhere("mm", "cpu") == []
    (finding,) = precision_loss([record(autocast="cuda", op="matmul")])
    assert "autocast" not in finding.evidence


def test_the_cpu_list_is_what_torch_does_under_a_cpu_autocast():
    x = torch.rand(4, 8, dtype=torch.bfloat16) + 0.5
    ops = {"pow": lambda: x.pow(2), "exp": x.exp, "sum": x.sum, "cumsum": lambda: x.cumsum(-1),
           "softmax": lambda: x.softmax(-1), "rsqrt": x.rsqrt,
           "layer_norm": lambda: torch.nn.functional.layer_norm(x, (8,)),
           "cdist": lambda: torch.cdist(x, x), "prod": x.prod,
           "quantile": lambda: torch.quantile(x.flatten(), 0.5)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for op, run in ops.items():
            assert (run().dtype == torch.float32) == runs_in_float32(op, "cpu"), op


# -- training stalled, on hand-built steps ---------------------------------------------------------

def step(index, loss, zero=False, broke=None, dtype="float32"):
    grads = [GradStat("layer", dtype, "cpu", 4, 0, 4 if zero else 0, 0, 0.0 if zero else 1.0)]
    opt = OptimizerStep("SGD", {dtype: 2}, {}, None, {}, 0.1, broke=broke,
                        source={"file": "s.py", "line": 9})
    return Step(index, loss, {"file": "s.py", "line": 8}, grads, [opt], done=True)


def test_training_stalled_on_hand_built_steps():
    (flat,) = training_stalled([step(0, 0.5, True), step(1, 0.5, True)], [], "float16")
    assert flat.evidence["kind"] == "zero-gradients" and flat.fixes[0].id == "grad-scaler"
    assert training_stalled([step(0, 0.5, True), step(1, 0.4, True)], [], None) == []
    assert training_stalled([step(0, 0.5), step(1, 0.5)], [], None) == []
    (nan,) = training_stalled([step(0, 0.5, dtype="bfloat16"), step(1, float("nan"))], [],
                              None)
    assert (nan.evidence["step"], nan.source["line"], nan.fixes[0].id) == (
        1, 9, "master-weights-bfloat16")
    # Weights the update itself broke: optimizer-precision says it.
    assert training_stalled([step(0, 0.5, broke="w"), step(1, float("nan"))], [], None) == []


def test_a_scaler_warming_up_is_not_a_stalled_one():
    line = {"file": "s.py", "line": 7}
    assert training_stalled([], [ScalerRun(3, True, 8192.0, line)], "float16") == []
    assert training_stalled([], [ScalerRun(40, False, 65536.0, line)], "float16") == []
    (skipped,) = training_stalled([], [ScalerRun(20, True, 0.0625, line)], "float16")
    assert skipped.evidence == {"kind": "every-step-skipped", "step": 19, "steps": 20,
                                "scale": 0.0625}
