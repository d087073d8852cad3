"""The traced pass adds one operation per tensor it measures, and a few for the whole pass.

On a fast GPU every operation is a kernel launch the interpreter pays for while the GPU waits,
so this is what keeps a diagnosis cheap there; counted here with torch.profiler on the CPU
(benchmarks/trace_op_count.py gives the figures for real models).
"""

from collections import Counter

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from fp16studio.core.run.tensor_stats import TensorStats
from fp16studio.core.run.trace import Tracer

# Each buffer's allocation and views (per TensorStats.SLOTS measurements), and the read-back's
# own: one reduction over the buffers, one read per device.
PER_BUFFER, PER_PASS = 4, 8


def top_level_ops(fn) -> Counter:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(e.name for e in prof.events() if e.name.startswith("aten::")
                   and not _inside_aten(e))


def _inside_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(40):
        layers += [torch.nn.Linear(16, 16), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_operation_per_measured_tensor_and_one_read_back(monkeypatch, dtype, read_back):
    net, x = model().to(dtype), torch.randn(4, 16, dtype=dtype)
    measured = []
    measure = TensorStats.measure
    monkeypatch.setattr(TensorStats, "measure",
                        lambda self, *args: measured.append(1) or measure(self, *args))
    # Below one buffer's slots and above them: the buffers grow a chunk at a time.
    monkeypatch.setattr(TensorStats, "SLOTS", 32)

    def plain():
        with torch.no_grad():
            net(x)

    def traced():
        with torch.no_grad(), Tracer(net) as tracer:
            net(x)
        traced.tracer = tracer

    plain(), traced()
    measured.clear()
    added = top_level_ops(traced) - top_level_ops(plain)
    assert len(measured) == 81  # the input, then each layer's output
    assert added["aten::aminmax"] == len(measured)
    assert not added["aten::item"] and not added["aten::_local_scalar_dense"]
    buffers = -(-len(measured) // 32)
    assert sum(added.values()) <= len(measured) + PER_BUFFER * buffers + PER_PASS
    # And the figures are right: the last GELU's output, read back from the second buffer.
    with torch.no_grad():
        expected = net(x).abs().max().item()
    assert traced.tracer.calls[-1].outputs[0].absmax == expected
