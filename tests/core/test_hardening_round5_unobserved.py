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


# Every public function and method of torch, torch.Tensor (and its operators), torch.nn.Module,
# torch.autograd and torch.nn.functional, wrapped with a counter after the script's imports;
# then a model trained for three steps, casts, float16 arithmetic the shadow follows, and the
# calls fp16studio itself makes most (isfinite, clone, detach, zeros_like, to, item). torch's
# own function-dispatch helpers are left out: under any torch-function mode (ours) torch's
# Python functions consult them once more. torch's modules that fp16studio's own start imports
# are imported before the counters.
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
    OPERATORS = {"__add__", "__mul__", "__sub__", "__truediv__", "__getitem__", "__setitem__",
                 "__len__", "__bool__", "__float__", "__format__", "__repr__", "__iter__"}
    PLAIN = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
             types.WrapperDescriptorType)


    def counting(owner, label, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            COUNTS[f"{label}.{name}"] += 1
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)


    for owner, label in ((torch.Tensor, "Tensor"), (torch, "torch"), (F, "F"),
                         (torch.nn.Module, "Module"), (torch.autograd, "autograd")):
        for name in dir(owner):
            value = getattr(owner, name)
            if (not name.startswith("_") or name in OPERATORS) and name not in DISPATCH \
                    and isinstance(value, PLAIN):
                counting(owner, label, name)
    COUNTS.clear()

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 8).clone().detach()
        loss = F.cross_entropy(net(x.to(torch.float32)) * 2 + 1, torch.tensor([0, 1, 2, 0]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
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


# What else a script can observe of the process: its module's globals, a sequence (and a generator) handed to
# torch.tensor read once per call, its random draws (Python, numpy, torch), grad mode, the
# default dtype and autocast state at each point, and the warnings it is shown: a once-per-place
# warning once, torch's own (C++ and Python) at the script's line, its registry as under python.
OBSERVED = textwrap.dedent("""
    import random
    import warnings

    import numpy
    import torch


    class Counted:
        # a sequence that counts how often it is read
        reads = 0

        def __init__(self, values):
            self.values = values

        def __len__(self):
            Counted.reads += 1
            return len(self.values)

        def __getitem__(self, i):
            Counted.reads += 1
            return self.values[i]


    def draws():
        return (random.random(), float(numpy.random.rand()), float(torch.rand(1)))


    def say(tag):
        print(tag, "grad", torch.is_grad_enabled(), "dtype", torch.get_default_dtype(),
              "autocast", torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
              "draws", [round(d, 6) for d in draws()])


    random.seed(1)
    numpy.random.seed(1)
    torch.manual_seed(1)
    say("start")
    print("main", __name__, __package__, type(__loader__).__name__, __spec__, __cached__)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    seq = Counted([1.5, 2.5, 70000.0])
    gen_reads = []


    def gen():
        for v in (1.0, 2.0, 3.0):
            gen_reads.append(v)
            yield v


    shown = []
    warnings.showwarning = lambda message, category, filename, lineno, *rest: shown.append(
        (str(message)[:40], filename.rsplit("/", 1)[-1], lineno))
    if True:
        for step in range(3):
            h = torch.tensor(seq, dtype=torch.float16)
            g = torch.tensor(list(gen()), dtype=torch.float16)
            out = net(torch.randn(2, 8))
            warnings.warn("once per place", UserWarning)
            copied = torch.tensor(h)                # torch warns (C++): copy with clone().detach()
            with torch.autocast("cuda", dtype=torch.float16):   # no CUDA here: torch warns
                copied = copied * 2
            with torch.autocast("cpu", dtype=torch.bfloat16):
                say(f"in autocast {step}")
                inner = net(torch.randn(2, 8))
            say(f"step {step}")
            (out.sum() + inner.float().sum()).backward()
            with torch.no_grad():
                say(f"no_grad {step}")
                net(torch.randn(2, 8).half().float())
    print("reads", Counted.reads, len(gen_reads), "shown", shown)
    say("end")
    print("registry", sorted(k for k in globals().get("__warningregistry__", {}) if k != "version"))
""")


def test_a_script_observes_the_same_state_reads_draws_and_warnings(tmp_path):
    script = tmp_path / "state.py"
    script.write_text(OBSERVED)
    plain, traced = _observed(script)
    said = next(line for line in plain if line.startswith("reads"))
    assert "'state.py', 60)" in said and "'state.py', 61)" in said   # torch's warnings, placed
    assert plain == traced


def test_a_traced_map_function_keeps_one_fingerprint(tmp_path):
    """datasets fingerprints a map's function with dill, which pickles a module by its name; the
    tracer's watched torch module pickles the same way, so a traced map keeps its fingerprint
    (no warning, no new cache file at each trace)."""
    script = tmp_path / "hashes.py"
    script.write_text(textwrap.dedent("""\
        import torch
        from datasets.fingerprint import Hasher

        def prepare(example):
            return {"x": torch.zeros(1).to(torch.float16)}

        print("fingerprint", Hasher.hash(prepare))
        """))
    lines = []
    for _ in range(2):
        trace_script(script, output=lambda stream, line: lines.append(line))
    printed = [line for line in lines if line.startswith("fingerprint")]
    assert len(printed) == 2 and printed[0] == printed[1], lines
