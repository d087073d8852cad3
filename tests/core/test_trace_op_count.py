"""The traced pass adds one operation per tensor it measures: on the CPU none for the pass, on
an accelerator one read of the device's statistics.

On a fast GPU every operation is a kernel launch the interpreter pays for while the GPU waits,
so this is what keeps a diagnosis cheap there; counted here with torch.profiler on the CPU
(benchmarks/trace_op_count.py gives the figures for real models).
"""

import pytest
import torch
from op_count import top_level_ops

from fp16studio.core.run import tensor_stats
from fp16studio.core.run.tensor_stats import TensorStats
from fp16studio.core.run.trace import Tracer

# An accelerator's read of its statistics, here with the CPU standing in: the chunks joined, and
# `tolist`'s two calls that only look at flags (on an accelerator also its copy to the host).
GATHERED = {"aten::cat": 1, "aten::resolve_conj": 1, "aten::resolve_neg": 1}


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
    # More tensors than a chunk's slots: the pass takes three chunks, the second pass the same.
    monkeypatch.setattr(TensorStats, "SLOTS", 32)
    monkeypatch.setattr(tensor_stats, "_spare", {})

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
    assert len(tensor_stats._spare[torch.device("cpu"), dtype]) == 3
    # One operation per measured tensor, and on the CPU nothing more (<= 1 per tensor).
    assert added.pop("aten::aminmax") == len(measured)
    assert added == ({} if read_back == "read now" else GATHERED)
    # And the figures are right: the last GELU's output, read back from the third chunk.
    with torch.no_grad():
        expected = net(x).abs().max().item()
    assert traced.tracer.calls[-1].outputs[0].absmax == expected


def test_a_pass_of_more_chunks_than_are_kept_makes_the_rest_each_time(monkeypatch):
    net, x = model(), torch.randn(4, 16)
    monkeypatch.setattr(TensorStats, "SLOTS", 32)
    monkeypatch.setattr(TensorStats, "KEPT", 2)
    monkeypatch.setattr(tensor_stats, "_spare", {})

    def plain():
        with torch.no_grad():
            net(x)

    def traced():
        with torch.no_grad(), Tracer(net):
            net(x)

    plain(), traced()
    added = top_level_ops(traced) - top_level_ops(plain)
    assert len(tensor_stats._spare[torch.device("cpu"), torch.float32]) == 2
    assert added.pop("aten::aminmax") == 81
    assert added == {"aten::empty": 1, "aten::unbind": 3}  # the third chunk: a buffer, its views
