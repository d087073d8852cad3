"""Hardening, round 5, class 2 (issue 44): a traced script sees what it sees under `python`.
Each script prints what it can observe (its own counters on torch's functions, the warnings
shown to it, its random draws, torch's global settings) and the traced run must print the
same lines."""

import subprocess
import sys
import textwrap

from fp16studio.core.script.trace import trace_script


def _observed(script) -> tuple[list, list]:
    """(what `python SCRIPT` prints on stdout, what the traced script prints)."""
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=300, cwd=script.parent)
    assert plain.returncode == 0, plain.stderr
    lines = []
    trace_script(script, output=lambda stream, line: lines.append(line) if stream == "stdout" else None)
    return plain.stdout.splitlines(), [line.rstrip("\n") for line in lines]


# Every public function and method of torch, torch.Tensor and torch.nn.functional, wrapped with
# a counter after the script's imports, then a model trained for three steps, casts, float16
# arithmetic the shadow follows, and the calls fp16studio itself makes most (isfinite, clone,
# detach, zeros_like, to, item). torch's own function-dispatch helpers are left out: under any
# torch-function mode (ours) torch's Python functions consult them once more. torch's modules
# that fp16studio's own start imports are imported before the counters.
COUNTED = textwrap.dedent("""
    import collections
    import types

    import torch
    import torch.distributed._shard  # what torch imports late (its own calls then) comes early
    import torch.nn.functional as F
    import torch.optim

    COUNTS = collections.Counter()
    DISPATCH = {"has_torch_function", "has_torch_function_unary", "has_torch_function_variadic",
                "handle_torch_function"}
    PLAIN = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
             types.WrapperDescriptorType)


    def counting(owner, label, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            COUNTS[f"{label}.{name}"] += 1
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)


    for owner, label in ((torch.Tensor, "Tensor"), (torch, "torch"), (F, "F")):
        for name in dir(owner):
            value = getattr(owner, name)
            if not name.startswith("_") and name not in DISPATCH and isinstance(value, PLAIN):
                counting(owner, label, name)
    COUNTS.clear()

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 8).clone().detach()
        loss = F.cross_entropy(net(x.to(torch.float32)), torch.tensor([0, 1, 2, 0]))
        loss.backward()
        opt.step()
        opt.zero_grad()
    h = torch.randn(16).half()
    total = (h * h).sum() + h.float().mean().to(torch.float16) + torch.zeros_like(h).sum()
    print("value", round(total.item(), 2), bool(torch.isfinite(total)))
    print("counts", sorted(COUNTS.items()))
""")


def test_a_scripts_counters_on_torch_see_only_its_own_calls(tmp_path):
    script = tmp_path / "counted.py"
    script.write_text(COUNTED)
    plain, traced = _observed(script)
    counts = next(line for line in plain if line.startswith("counts"))
    assert "Tensor.item" in counts and "torch.isfinite" in counts   # the counters count
    assert plain == traced
