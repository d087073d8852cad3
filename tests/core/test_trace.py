"""The tracer's statistics: one aminmax per tensor, inf/NaN counted when asked, a tensor seen
again unchanged measured once; and what diagnose does with them (exact counts, memory back)."""

import weakref

import pytest
import torch

from fp16studio.core import diagnose
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics import diagnosis
from fp16studio.core.run.named_tensors import named_tensors
from fp16studio.core.run.trace import Tracer


class Blowup(torch.nn.Module):
    """Multiplies by a huge factor: float16 overflows to inf in some elements."""

    def forward(self, x):
        return x * 1e5


def outputs(tracer, name):
    return next(c for c in tracer.calls if c.name == name).outputs[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_abs_max_is_the_largest_magnitude_of_either_sign(dtype, read_back):
    model = torch.nn.Sequential(torch.nn.Identity())
    x = torch.tensor([[0.5, -7.0, 3.0]], dtype=dtype)
    with torch.inference_mode(), Tracer(model) as tracer:
        model(x)
    assert outputs(tracer, "0").absmax == 7.0 and tracer.counted


def test_float8_tensors_are_measured_where_torch_has_no_aminmax_for_them(read_back):
    # An FP8 checkpoint's weights, a Float8 layer's casts: beside float32 in one pass.
    model = torch.nn.Sequential(torch.nn.Identity())
    x = torch.tensor([0.5, -448.0, 3.0]).to(torch.float8_e4m3fn)
    with torch.no_grad(), Tracer(model) as tracer:
        model((x, torch.ones(2), x.to(torch.float8_e5m2)))
    assert [t.absmax for t in tracer.calls[0].outputs] == [448.0, 1.0, 448.0]
    assert [t.dtype for t in tracer.calls[0].outputs] == ["float8_e4m3fn", "float32", "float8_e5m2"]


def test_zeros_large_float64_and_nested_inputs_read_the_same_both_ways(read_back):
    model = torch.nn.Sequential(torch.nn.Identity())
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.zeros(2, 3))
    zero = outputs(tracer, "0").absmax
    assert zero == 0.0 and str(zero) == "0.0"  # not -0.0
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.tensor([1e300, -0.1], dtype=torch.float64))
    big = outputs(tracer, "0")
    assert (big.absmax, big.nonfinite, tracer.counted) == (1e300, 0, True)
    # Beside float32 and bfloat16 tensors on the same device: read in float64 still.
    with torch.no_grad(), Tracer(model) as tracer:
        model((torch.ones(2), torch.tensor([1e300], dtype=torch.float64),
               torch.full((2,), 3.0, dtype=torch.bfloat16)))
    assert [t.absmax for t in tracer.calls[1].outputs] == [1.0, 1e300, 3.0]
    # Nested in the positional arguments: as deep as in outputs, and no deeper.
    for nested, names in (([[[torch.ones(1)]]], ["input[0][0][0][0]"]),
                          ([[[[torch.ones(1)]]]], [])):
        with torch.no_grad(), Tracer(model) as tracer:
            model[0](nested)
        assert [t.name for t in tracer.calls[0].inputs] == names


def test_nonfinite_is_at_least_one_without_counting_and_exact_with_it(read_back):
    model = torch.nn.Sequential(Blowup(), torch.nn.Identity())
    x = torch.tensor([[1.0, 0.1, 2.0, 0.0]], dtype=torch.float16)  # 1e5 and 2e5 overflow
    with torch.inference_mode(), Tracer(model) as fast:
        model(x)
    assert outputs(fast, "0").absmax == float("inf") and outputs(fast, "0").nonfinite == 1
    assert not fast.counted
    with torch.inference_mode(), Tracer(model, count_nonfinite=True) as exact:
        model(x)
    assert outputs(exact, "0").nonfinite == 2 and exact.counted
    nan = torch.tensor([[float("nan"), 1.0]])
    with torch.inference_mode(), Tracer(model) as tracer:
        model(nan)
    assert outputs(tracer, "0").absmax != outputs(tracer, "0").absmax  # NaN


def test_a_tensor_seen_again_unchanged_is_measured_once(monkeypatch, read_back):
    measured = []
    aminmax = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda t, **out: measured.append(t.shape) or aminmax(t, **out))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Identity())
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.randn(2, 4))
    # input, Linear's output = Identity's input = Identity's output = the model's output.
    assert len(measured) == 2
    assert outputs(tracer, "").absmax == outputs(tracer, "0").absmax
    # Under the same name in a row (the Identity's output is the model's): one description.
    assert outputs(tracer, "") is outputs(tracer, "1")
    with torch.inference_mode(), Tracer(model):  # no version counter: measured every time
        model(torch.randn(2, 4))
    assert len(measured) == 2 + 6


def test_a_tensor_changed_in_place_is_measured_again(read_back):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True))
    torch.nn.init.constant_(model[0].weight, -1.0)
    torch.nn.init.constant_(model[0].bias, 0.0)
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.ones(1, 4))
    relu = next(c for c in tracer.calls if c.name == "1")
    assert relu.inputs[0].absmax == 4.0 and relu.outputs[0].absmax == 0.0


class ChangedBetweenModules(torch.nn.Module):
    """A module's output changed in place by functional code before the next module gets it."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.after = torch.nn.Identity()

    def forward(self, x):
        h = self.linear(x)
        h.masked_fill_(h < 0, 0.0).add_(1.0)
        return self.after(h)


def test_functional_in_place_operations_between_modules_are_seen(read_back):
    model = ChangedBetweenModules()
    with torch.no_grad():
        model.linear.weight.copy_(torch.diag(torch.tensor([-8.0, 1.0, 2.0, 3.0])))
        model.linear.bias.zero_()
    with torch.no_grad(), Tracer(model, count_nonfinite=True) as tracer:
        model(torch.ones(1, 4))
    assert outputs(tracer, "linear").absmax == 8.0       # as it returned: -8, 1, 2, 3
    after = next(c for c in tracer.calls if c.name == "after")
    assert after.inputs[0].absmax == 4.0                 # then 1, 2, 3, 4
    assert outputs(tracer, "after").absmax == outputs(tracer, "").absmax == 4.0


class TracesInside(torch.nn.Module):
    """Traces another model inside its own forward: a pass within a pass."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with Tracer(self.inner) as self.tracer:
            self.inner(x * 3)
        return x


def test_passes_that_overlap_write_to_chunks_of_their_own(read_back):
    outer = torch.nn.Sequential(TracesInside(torch.nn.Sequential(torch.nn.Identity())))
    x = torch.tensor([[1.0, -2.0]])
    for _ in range(2):  # the second time with the chunks the first gave back
        with torch.no_grad(), Tracer(outer) as tracer:
            outer(x)
        assert outputs(tracer, "0").absmax == 2.0
        assert outputs(outer[0].tracer, "0").absmax == 6.0


def test_diagnose_counts_every_nonfinite_value_of_an_overflow(demo_dir):
    report = diagnose(demo_spec("overflow"))
    f = next(f for f in report.findings if f.code == "overflow")
    assert f.evidence["non-finite values"] > 1
    assert max(n.nonfinite for n in report.tree.walk()) > 1  # the activations' nodes


@pytest.mark.parametrize("name", ["healthy", "fp16-model"])  # fp16-model: the forward raises
def test_nothing_holds_the_model_when_diagnose_gives_memory_back(demo_dir, monkeypatch, name):
    refs, alive_at_release = [], []
    prepare_model = diagnosis.prepare_model

    def spy_prepare(spec, progress=None):
        loaded, processor = prepare_model(spec, progress)
        refs.append(weakref.ref(loaded.model))
        return loaded, processor

    def spy_release(device):  # no gc.collect(): freed by reference counting alone
        alive_at_release.append(refs[0]() is not None)

    monkeypatch.setattr(diagnosis, "prepare_model", spy_prepare)
    monkeypatch.setattr(diagnosis, "_release_memory", spy_release)
    report = diagnose(demo_spec(name))
    assert report.ok == (name == "healthy")
    assert alive_at_release == [False]


def exhaustive_trace(model, batch):
    """Every floating tensor's statistics the slow, obvious way: abs().max() and an inf/NaN
    count of each, in its hook, for each module call in start order."""
    records, handles = {}, []

    def stats(value, prefix):
        found = []
        named_tensors(value, prefix, found)
        return [(n or "input", str(float(t.abs().max())), int((~torch.isfinite(t)).sum()))
                for n, t in found if t.is_floating_point() and t.numel()]

    for _, module in model.named_modules():
        def pre(m, args, kwargs):
            m._index = len(records)
            records[m._index] = [stats(args, "input") + stats(kwargs, ""), None]

        def post(m, args, kwargs, output):
            records[m._index][1] = stats(output, "output")

        handles += [module.register_forward_pre_hook(pre, with_kwargs=True),
                    module.register_forward_hook(post, with_kwargs=True)]
    with torch.no_grad():
        model(**batch)
    for handle in handles:
        handle.remove()
    return records


@pytest.mark.parametrize("name", ["overflow", "healthy"])  # inf/NaN; in-place residual adds
def test_statistics_equal_the_exhaustive_ones(demo_dir, name, read_back):
    from fp16studio.core.run.pipeline import prepare

    prepared = prepare(demo_spec(name))
    model, batch = prepared.model, prepared.batch
    expected = exhaustive_trace(model, batch)
    with Tracer(model, count_nonfinite=True) as tracer, torch.no_grad():
        model(**batch)

    def floating(infos):
        return [(t.name, str(float(t.absmax)), t.nonfinite) for t in infos if t.absmax is not None]

    got = {c.index: [floating(c.inputs), floating(c.outputs)] for c in tracer.calls}
    assert got == expected


class Fails(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("mat1 and mat2 must have the same dtype")


def test_hooks_come_out_and_collection_resumes_even_when_the_pass_raises(automatic_collection):
    import gc

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Fails())
    own = model[0].register_forward_hook(lambda module, args, output: None)
    with pytest.raises(RuntimeError), Tracer(model) as tracer:
        assert not gc.isenabled()
        model(torch.ones(1, 4))
    assert gc.isenabled()
    assert tracer.failed_in.name == "1"
    for module in model.modules():
        hooks = (module._forward_pre_hooks, module._forward_pre_hooks_with_kwargs,
                 module._forward_hooks, module._forward_hooks_with_kwargs)
        expected = [own.id] if module is model[0] else []
        assert [list(d) for d in hooks] == [[], [], expected, []]


def test_the_trace_sees_what_forward_sees_after_the_modules_own_hooks():
    """A float32 island casts its input in a pre-hook: the trace records the cast input."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model[0].register_forward_pre_hook(lambda module, args: (args[0].float(),))
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.ones(1, 4, dtype=torch.float16))
    linear = next(c for c in tracer.calls if c.name == "0")
    assert [t.dtype for t in linear.inputs] == ["float32"]
    assert tracer.calls[0].inputs[0].dtype == "float16"  # the Sequential's own input


class Replicates(torch.nn.Module):
    """Runs copies of its layer, as nn.DataParallel's replicas and copy.copy make them."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x):
        import copy

        replica = self.layer._replicate_for_data_parallel()
        replica._parameters = dict(self.layer._parameters)
        return copy.deepcopy(self.layer)(copy.copy(self.layer)(replica(x)))


def test_copies_of_a_module_made_during_the_pass_are_traced_not_broken():
    from fp16studio.core.run.compare import OutputRecorder

    model = Replicates()
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.ones(1, 4))
    # Shallow copies share the original's hook dicts and its name; a deep copy is not the
    # model's module: it runs, unwatched.
    assert [c.name for c in tracer.calls] == ["", "layer", "layer"]
    with torch.no_grad(), OutputRecorder(model) as recorder:
        model(torch.ones(1, 4))
    assert [row["name"] for row in recorder.calls] == ["", "layer", "layer"]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl


def test_garbage_collection_pauses_nest_and_may_end_in_any_order(automatic_collection):
    import gc

    from fp16studio.core.common.gc_pause import gc_paused

    outer, inner = gc_paused(), gc_paused()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)   # the first one ends first (another thread's pass)
    assert not gc.isenabled()
    inner.__exit__(None, None, None)
    assert gc.isenabled()
