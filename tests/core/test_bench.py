"""bench: the measuring machinery on a plain module, and benchmark() on tiny pipelines.

No timing asserts: figures are checked for shape and sanity, never for speed.
"""

import json
import math

import pytest
import torch

from fp16studio.core.common.errors import Cancelled, CancelToken, InputError
from fp16studio.core.precision import bench
from fp16studio.core.precision import measure as bench_measure
from fp16studio.core.precision.measure import Limits
from fp16studio.core.present.terminal import format_bench
from fp16studio.core.run.distance import (SQNR_CEILING_DB, distance_sums, distances,
                                          reference_copy)

FAST = {"warmup": 1, "min_iterations": 2, "min_seconds": 0.0, "min_rounds": 2}


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.calls


CPU_TIMER = bench_measure.make_timer(torch.device("cpu"))


@pytest.fixture(autouse=True)
def float32_matmuls_restored():
    """Each test starts with float32 matmuls as torch starts them (precision "highest") and
    leaves the TF32 settings as it found them, whatever it changed. Tests set them directly:
    monkeypatch's undo deletes the attribute of torch's cuBLAS module where reading it failed."""
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.allow_tf32 = saved[1]


class FakeTimer:
    """A timer for a device whose every call takes `call_ms` and every block `overhead_ms` more
    (its synchronise): calls `fn` as the real one does, and records the block sizes."""

    def __init__(self, call_ms=1.0, overhead_ms=0.0):
        self.call_ms, self.overhead_ms, self.blocks = call_ms, overhead_ms, []

    def __call__(self, fn, calls=1):
        result = None
        for _ in range(calls):
            result = fn()
        self.blocks.append(calls)
        return self.overhead_ms + self.call_ms * calls, result


def test_variants_take_turns_after_warming_up_until_every_minimum_is_met():
    a, b, order = Counter(), Counter(), []
    limits = Limits(warmup=3, min_iterations=6, min_seconds=0.0, min_rounds=3)
    timings, errors = bench_measure.time_interleaved(
        {"a": a, "b": b}, FakeTimer(), limits,
        on_iteration=lambda name, i, ms: order.append((name, i)))
    # A negligible synchronise: blocks of one call, A B A B A B in rounds of 2 calls each.
    assert not errors and a.calls == b.calls == 3 + 1 + 6  # warm-up, block sizing, timed
    assert [name for name, _ in order] == ["a", "a", "b", "b"] * 3
    assert [i for name, i in order if name == "a"] == [1, 2, 3, 4, 5, 6]
    assert timings["a"].output == 1  # the first call's result is kept for the accuracy check
    assert [len(block) for block in timings["a"].rounds] == [2, 2, 2]
    summary = timings["b"].summary()
    assert summary["min"] <= summary["p50"] <= summary["p90"]


def test_blocks_grow_until_the_synchronise_is_negligible_and_report_time_per_call():
    """A device whose synchronise costs 0.05 ms and whose call 1 ms: blocks of 64 calls (the
    synchronise then 0.08% of a block), each figure per call; a block is never longer than a
    round's share of min_seconds."""
    fn, timer, seen = Counter(), FakeTimer(call_ms=1.0, overhead_ms=0.05), []
    limits = Limits(warmup=1, min_iterations=100, min_seconds=0.0, min_rounds=2)
    timings, _ = bench_measure.time_interleaved({"f": fn}, timer, limits,
                                                on_iteration=lambda n, i, ms: seen.append((i, ms)))
    timing = timings["f"]
    assert timing.block_size == 64 and timer.blocks[-1] == 64
    assert timing.calls == 128 and [i for i, _ in seen] == [64, 128]
    assert all(ms == pytest.approx(1.0 + 0.05 / 64) for _, ms in seen)
    assert timing.total_s == pytest.approx(128 * (1.0 + 0.05 / 64) / 1000)
    short = Limits(warmup=1, min_iterations=2, min_seconds=0.016, min_rounds=2)  # 8 ms a round
    timings, _ = bench_measure.time_interleaved({"f": Counter()}, FakeTimer(1.0, 0.05), short)
    assert timings["f"].block_size == 8


def test_a_block_is_back_to_back_calls_closed_by_one_synchronise(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    device = torch.device("cuda", 0)
    fn = Counter()
    ms, result = bench_measure.make_timer(device)(fn, 5)
    assert fn.calls == 5 and result == 5 and ms >= 0
    assert syncs == [device, device]  # one before the block (nothing earlier counted), one after


def test_rounds_run_until_min_seconds_but_not_past_max_iterations():
    limits = Limits(warmup=1, min_iterations=2, min_seconds=0.05, max_iterations=10_000,
                    min_rounds=2)
    timings, _ = bench_measure.time_interleaved(
        {"mm": lambda: torch.ones(64, 64) @ torch.ones(64, 64)}, CPU_TIMER, limits)
    assert timings["mm"].total_s >= 0.05 and len(timings["mm"].rounds) >= 2
    capped = Limits(warmup=1, min_iterations=1, min_seconds=60.0, max_iterations=3)
    timings, _ = bench_measure.time_interleaved({"c": Counter()}, CPU_TIMER, capped)
    assert timings["c"].calls == 3


def test_without_warmup_the_first_call_is_timed():
    fn = Counter()
    timings, _ = bench_measure.time_interleaved(
        {"f": fn}, CPU_TIMER, Limits(warmup=0, min_iterations=4, min_seconds=0.0, min_rounds=2))
    assert fn.calls == 4 and len(timings["f"].latencies_ms) == 4
    assert timings["f"].latencies_ms[0] == timings["f"].first_call_ms


def test_a_callable_that_fails_is_dropped_and_the_others_go_on():
    def broken():
        raise RuntimeError("no kernel")

    timings, errors = bench_measure.time_interleaved(
        {"ok": Counter(), "broken": broken}, CPU_TIMER, Limits(warmup=1, min_iterations=2,
                                                               min_seconds=0.0, min_rounds=2))
    assert set(timings) == {"ok"} and str(errors["broken"]) == "no kernel"


def test_time_interleaved_stops_when_cancelled():
    token = CancelToken()

    def on_iteration(name, i, ms):
        if i >= 2:
            token.cancel()

    with pytest.raises(Cancelled):
        bench_measure.time_interleaved({"c": Counter()}, CPU_TIMER,
                                       Limits(warmup=1, min_iterations=100, min_seconds=0.0),
                                       cancel=token, on_iteration=on_iteration)


def test_spread_across_rounds_decides_stable():
    steady = bench_measure.Timing(first_call_ms=1.0, rounds=[[10.0, 10.1], [10.2], [9.9, 10.0]])
    assert steady.spread == pytest.approx((10.2 - 9.95) / 10.05) and steady.stable
    busy = bench_measure.Timing(first_call_ms=1.0, rounds=[[10.0], [14.0], [10.1]])
    assert busy.spread == pytest.approx(4.0 / 10.1) and not busy.stable
    assert bench_measure.Timing(first_call_ms=1.0, rounds=[[10.0]]).stable is False


def test_limits_reject_nonsense():
    with pytest.raises(ValueError):
        Limits(min_iterations=10, max_iterations=5)
    with pytest.raises(ValueError):
        Limits(warmup=-1)
    with pytest.raises(ValueError):
        Limits(min_rounds=0)
    assert Limits(warmup=0).warmup == 0


def test_busy_time_is_the_union_of_the_device_intervals():
    assert bench_measure.covered_ns([(0, 10), (5, 12), (20, 25), (21, 22)]) == 17
    assert bench_measure.covered_ns([]) == 0
    assert bench_measure.device_busy_ms(Counter(), torch.device("cpu")) is None  # a GPU figure


def test_gemm_dims_are_the_layers_widths():
    model = torch.nn.Sequential(torch.nn.Linear(768, 30522), torch.nn.Conv2d(3, 64, 3))
    assert bench_measure.gemm_dims(model) == [3, 64, 768, 30522]


def test_flops_of_a_matmul_are_counted():
    a, b = torch.ones(8, 16), torch.ones(16, 4)
    assert bench_measure.count_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    assert bench_measure.count_flops(lambda: a + 1) is None  # no counted work


def test_percentile_matches_linear_interpolation():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert bench_measure.percentile(values, 50) == 3.0
    assert bench_measure.percentile(values, 90) == pytest.approx(7.6)
    assert bench_measure.percentile([5.0], 90) == 5.0


def test_weights_bytes_counts_parameters_and_buffers_once():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    # Linear 4*3+3, BatchNorm weight+bias 3+3 (float32), running mean/var 3+3 (float32),
    # num_batches_tracked one int64.
    assert bench_measure.weights_bytes(model) == (15 + 6 + 6) * 4 + 8
    model.half()
    assert bench_measure.weights_bytes(model) == (15 + 6 + 6) * 2 + 8
    tied = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    tied[1].weight = tied[0].weight
    assert bench_measure.weights_bytes(tied) == 16 * 4


def test_cpu_memory_is_the_weights_plus_the_forward_pass_tensors_at_their_peak():
    """Counted by torch, not the process's resident memory: a float32 stack of Linear layers
    holds two activations at once at its peak, bfloat16 half of that."""
    layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    x = torch.randn(32, 256)
    activation = 32 * 256 * 4
    figures = {}
    for dtype in (torch.float32, torch.bfloat16):
        model, batch = layers.to(dtype), x.to(dtype)
        probe = bench_measure.MemoryProbe(torch.device("cpu"))
        with torch.no_grad():
            probe.measure(lambda: model(batch))
        figures[dtype] = probe.result(bench_measure.weights_bytes(model))
        assert figures[dtype]["memory_kind"] == "cpu-live-tensors"
        assert figures[dtype]["reserved_memory_bytes"] is None and figures[dtype]["nvml_used_bytes"] is None
    weights = bench_measure.weights_bytes(layers.float())
    assert figures[torch.float32]["peak_memory_bytes"] == weights + 2 * activation
    assert figures[torch.bfloat16]["peak_memory_bytes"] == (weights + 2 * activation) // 2


def test_drift_against_float32():
    torch.manual_seed(0)
    logits = torch.randn(8, 5)
    ref = reference_copy({"logits": logits})
    same = bench_measure.drift(ref, reference_copy({"logits": logits.half()}))
    assert 0 < same["max_abs_diff_vs_float32"] < 1e-2
    assert same["cosine_vs_float32"] == pytest.approx(1.0, abs=1e-5)
    assert same["top1_agreement"] == 1.0 and same["nonfinite_outputs"] == 0

    flipped = logits.clone()
    flipped[0] = -flipped[0]  # one row of eight now picks another class
    worse = bench_measure.drift(ref, reference_copy({"logits": flipped}))
    assert worse["top1_agreement"] == pytest.approx(7 / 8)
    assert worse["cosine_vs_float32"] < 1.0

    hidden = bench_measure.drift(reference_copy({"last_hidden_state": logits}),
                                 reference_copy({"last_hidden_state": logits}))
    assert hidden["max_abs_diff_vs_float32"] == 0.0 and hidden["top1_agreement"] is None

    overflow = logits.clone()
    overflow[1, 2] = float("inf")
    broken = bench_measure.drift(ref, reference_copy({"logits": overflow}))
    assert broken["nonfinite_outputs"] == 1
    assert broken["max_abs_diff_vs_float32"] is None and broken["top1_agreement"] is None


def test_distances_are_over_the_whole_tensor_and_exact_near_identity():
    """bench's figures are drift's (`run.distance`): over the flattened tensor. A float16
    copy's 1 - cosine (2e-8) is under float32's rounding of a dot product, and still right."""
    torch.manual_seed(0)
    logits = torch.randn(64, 1000) * 3
    half = logits.half()
    ref, out = logits.double().reshape(-1), half.double().reshape(-1)
    figures = bench_measure.drift(reference_copy({"logits": logits}),
                                  reference_copy({"logits": half}))
    assert figures["cosine_vs_float32"] == pytest.approx(
        float(ref @ out / (ref.norm() * out.norm())), abs=1e-10)
    assert figures["max_abs_diff_vs_float32"] == float((out - ref).abs().max())
    sqnr = distances(distance_sums(logits, half).tolist())["sqnr_db"]
    assert sqnr == pytest.approx(10 * math.log10(float(ref @ ref / ((out - ref) @ (out - ref)))),
                                 abs=1e-4)
    zero, one = torch.zeros(3), torch.ones(3)
    assert distances(distance_sums(zero, zero).tolist()) == {
        "max_abs_diff": 0.0, "cosine": 1.0, "sqnr_db": SQNR_CEILING_DB}
    assert distances(distance_sums(zero, one).tolist()) == {
        "max_abs_diff": 1.0, "cosine": 0.0, "sqnr_db": -SQNR_CEILING_DB}
    assert distances(distance_sums(one, -one).tolist())["cosine"] == -1.0
    assert distance_sums(zero, torch.zeros(4)) is None  # not the same tensor


def test_tf32_settings_name_the_float32_baseline():
    settings = bench_measure.tf32_settings()
    assert settings["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert isinstance(settings["cuda_matmul_allow_tf32"], bool)


def test_the_tf32_variant_allows_tf32_during_its_calls_only():
    torch.backends.cudnn.allow_tf32 = False
    before = bench_measure.tf32_settings()
    assert not before["cuda_matmul_allow_tf32"]
    during = bench_measure.with_tf32(bench_measure.tf32_settings)()
    assert during == {"cuda_matmul_allow_tf32": True, "cudnn_allow_tf32": True,
                      "float32_matmul_precision": "high"}
    assert bench_measure.tf32_settings() == before

    def fails():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError):
        bench_measure.with_tf32(fails)()
    assert bench_measure.tf32_settings() == before


# -- variants -------------------------------------------------------------------------------------

def test_variant_specs(tmp_path):
    from fp16studio.core.spec.value import PipelineSpec

    spec = PipelineSpec(model=str(tmp_path), dataset="synthetic", model_dtype="float16",
                        input_dtype="float16", input_cast="all", format_dtype="float16",
                        format="python", input_device="cpu", keep_fp32=["classifier"])
    fp32 = bench.variant_spec(spec, "float32")
    assert (fp32.model_dtype, fp32.input_dtype, fp32.autocast) == ("float32", None, None)
    half = bench.variant_spec(spec, "bfloat16")
    assert (half.model_dtype, half.input_dtype, half.input_cast) == ("bfloat16", "bfloat16",
                                                                      "floating")
    assert bench.variant_spec(spec, "tf32") == fp32  # the same model: TF32 is a setting
    amp = bench.variant_spec(spec, "autocast-float16")
    assert (amp.model_dtype, amp.input_dtype, amp.autocast) == ("float32", None, "float16")
    # A model.half() pipeline's float32 variant runs in float32; its autocast names the model's
    # own device type.
    cast = spec.replace(model_cast="float16", autocast_device="cuda")
    assert bench.variant_spec(cast, "float32").model_cast is None
    assert bench.variant_spec(cast, "autocast-bfloat16").autocast_device is None
    assert all(v.keep_fp32 == ("classifier",) and v.format_dtype is None
               and (v.format, v.input_device) == ("torch", "model") for v in (fp32, half, amp))
    with pytest.raises(InputError):
        bench.variant_spec(spec, "float8")


def test_parse_variants():
    assert bench.parse_variants(None) == list(bench.VARIANTS)
    assert bench.parse_variants("bfloat16, float32") == ["float32", "bfloat16"]
    assert bench.parse_variants(["autocast-bfloat16"]) == ["autocast-bfloat16"]
    with pytest.raises(InputError, match="fp8"):
        bench.parse_variants("float32,fp8")
    with pytest.raises(InputError):
        bench.parse_variants("")


# -- benchmark() on the built-in tiny demos -------------------------------------------------------

CONTRACT_KEYS = {"name", "ok", "samples_per_s", "latency_ms", "peak_memory_bytes",
                 "weights_bytes", "max_abs_diff_vs_float32", "top1_agreement"}


def test_every_variant_runs_on_a_tiny_resnet_and_streams_samples(monkeypatch):
    from fp16studio.core.demo.pipelines import demo_spec
    from fp16studio.core.common import precision as cpu_facts

    monkeypatch.setattr(cpu_facts, "cpu_flags", frozenset)  # a CPU without half instructions
    samples, stages = [], []
    result = bench.benchmark(demo_spec("healthy"), on_sample=samples.append,
                             progress=lambda stage, message: stages.append(stage),
                             **{**FAST, "min_iterations": 3, "min_rounds": 3})
    doc = json.loads(json.dumps(result.to_json(), allow_nan=False))  # strict JSON
    assert doc["device"] == "cpu" and "says little about a GPU" in doc["note"]
    assert "GPU" not in doc["verdict"] and "threads" in doc["verdict"]
    assert set(doc["tf32"]) == {"cuda_matmul_allow_tf32", "cudnn_allow_tf32",
                                "float32_matmul_precision"}
    assert [v["name"] for v in doc["variants"]] == list(bench.VARIANTS)
    by_name = {v["name"]: v for v in doc["variants"]}
    tf32 = by_name.pop("tf32")  # a GPU mode: named, not run
    assert (tf32["ok"], tf32["support"]) == (False, "unsupported") and "GPU" in tf32["error"]
    for v in by_name.values():
        assert CONTRACT_KEYS <= set(v), v["name"]
        assert v["ok"], v["error"]
        assert set(v["latency_ms"]) == {"p50", "p90", "min"}
        assert v["samples_per_s"] > 0 and v["iterations"] >= 3 and v["rounds"] == 3
        # On a CPU: no busy time (a GPU figure); the verdict is about this CPU.
        assert v["busy_ms"] is v["overhead_ms"] is v["bound"] is v["kernel_speedup"] is None
        assert v["verdict"].startswith(v["name"]) and "CPU" in v["verdict"]
        # samples/s from the median latency and the batch size
        assert v["samples_per_s"] == pytest.approx(doc["batch"]["size"] * 1000
                                                   / v["latency_ms"]["p50"])
        assert isinstance(v["stable"], bool) and v["spread"] >= 0
        assert v["support"] in ("native", "emulated")
        assert v["flops_per_sample"] > 0 and v["tflops"] > 0 and v["peak_fraction"] is None
        assert v["memory_kind"] == "cpu-live-tensors" and v["peak_memory_bytes"] > v["weights_bytes"]
        assert 0.99 < v["cosine_vs_float32"] <= 1.0 + 1e-9
        assert v["top1_agreement"] is not None  # logits of a classifier
    assert by_name["float32"]["max_abs_diff_vs_float32"] == 0.0
    assert by_name["float16"]["weights_bytes"] < by_name["float32"]["weights_bytes"]
    assert by_name["autocast-float16"]["weights_bytes"] == by_name["float32"]["weights_bytes"]
    assert by_name["float16"]["output"]["dtype"] == "float16"
    assert by_name["float16"]["max_abs_diff_vs_float32"] > 0
    assert by_name["float16"]["support"] == "emulated"  # a CPU without float16 instructions
    assert by_name["float16"]["flops_per_sample"] == by_name["float32"]["flops_per_sample"]
    assert {s["variant"] for s in samples} == set(bench.VARIANTS) - {"tf32"}
    counts = [s["iteration"] for s in samples if s["variant"] == "float32"]
    assert counts == sorted(counts) and counts[-1] == by_name["float32"]["iterations"]
    assert all(s["latency_ms"] > 0 and s["samples_per_s"] > 0 for s in samples)
    assert "bench" in stages and "model" in stages  # prepare()'s own stages pass through
    table = format_bench(bench.BenchResult.from_json(doc))
    assert "autocast-bfloat16" in table and "says little about a GPU" in table
    assert f"verdict: {doc['verdict'][:40]}" in table


def test_float16_overflow_shows_as_nonfinite_drift_and_bfloat16_does_not():
    from fp16studio.core.demo.pipelines import demo_spec

    doc = bench.benchmark(demo_spec("overflow"), variants="float32,float16,bfloat16",
                          **FAST).to_json()
    fp16, bf16 = doc["variants"][1], doc["variants"][2]
    assert doc["batch"]["tokens"] > 0 and fp16["tokens_per_s"] > 0
    assert fp16["ok"] and fp16["nonfinite_outputs"] > 0
    assert fp16["max_abs_diff_vs_float32"] is None and fp16["top1_agreement"] is None
    assert bf16["nonfinite_outputs"] == 0 and bf16["max_abs_diff_vs_float32"] is not None
    assert "inf/NaN" in format_bench(bench.BenchResult.from_json(doc))


def test_without_float32_in_the_list_drift_still_compares_with_float32():
    from fp16studio.core.demo.pipelines import demo_spec

    doc = bench.benchmark(demo_spec("blind-half"), variants=["bfloat16"], **FAST).to_json()
    [v] = doc["variants"]
    assert v["ok"] and v["max_abs_diff_vs_float32"] > 0 and doc["reference_error"] is None


def test_a_failing_variant_is_reported_and_the_others_still_run(monkeypatch):
    from fp16studio.core.run import pipeline
    from fp16studio.core.demo.pipelines import demo_spec

    real_forward = pipeline.forward

    def forward(prepared):
        if prepared.spec.model_dtype == "bfloat16":
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'BFloat16\'\nmore detail')
        return real_forward(prepared)

    monkeypatch.setattr(pipeline, "forward", forward)
    doc = bench.benchmark(demo_spec("healthy"), variants="float32,bfloat16,autocast-float16",
                          **FAST).to_json()
    fp32, bf16, amp = doc["variants"]
    assert fp32["ok"] and amp["ok"]
    assert not bf16["ok"] and bf16["samples_per_s"] is None and bf16["latency_ms"] is None
    assert bf16["error"] == "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'BFloat16'"
    assert "bfloat16: RuntimeError" in format_bench(bench.BenchResult.from_json(doc))


def test_a_spec_that_cannot_load_is_bad_input(tmp_path):
    from fp16studio.core.spec.value import PipelineSpec

    spec = PipelineSpec(model=str(tmp_path / "missing"), dataset="synthetic", device="cpu")
    with pytest.raises(InputError):
        bench.benchmark(spec, variants="float32", **FAST)


def test_cancel_stops_the_run():
    from fp16studio.core.demo.pipelines import demo_spec

    token = CancelToken()
    with pytest.raises(Cancelled):
        bench.benchmark(demo_spec("healthy"), cancel=token,
                        on_sample=lambda sample: token.cancel(), **FAST)


def fake_gpu(monkeypatch, name, capability, bf16_emulated=False):
    import contextlib

    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation and bf16_emulated)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    return torch.device("cuda", 0)


def test_support_is_decided_from_the_device_before_running(monkeypatch):
    from fp16studio.core.common import precision as cpu_facts
    from fp16studio.core.precision.device import variant_support

    t4 = fake_gpu(monkeypatch, "Tesla T4", (7, 5))
    support, why = variant_support("autocast-bfloat16", t4)
    assert support == "unsupported" and "Tesla T4" in why and "7.5" in why
    assert variant_support("float16", t4) == ("native", None)
    fake_gpu(monkeypatch, "Tesla V100", (7, 0), bf16_emulated=True)
    assert variant_support("bfloat16", t4)[0] == "emulated"
    fake_gpu(monkeypatch, "Tesla P40", (6, 1))
    assert variant_support("float16", t4)[0] == "emulated"
    fake_gpu(monkeypatch, "NVIDIA A100", (8, 0))
    assert variant_support("bfloat16", t4) == ("native", None)
    assert variant_support("tf32", t4)[0] == "native"
    torch.backends.cuda.matmul.allow_tf32 = True
    assert "TF32" in variant_support("float32", t4)[1]
    fake_gpu(monkeypatch, "Tesla T4", (7, 5))
    support, why = variant_support("tf32", t4)
    assert support == "unsupported" and "T4" in why and "8.0" in why
    cpu = torch.device("cpu")
    assert variant_support("tf32", cpu)[0] == "unsupported"
    monkeypatch.setattr(cpu_facts, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    support, why = variant_support("float16", cpu)
    assert support == "emulated" and "AVX512-FP16" in why and "slower" not in why
    assert variant_support("bfloat16", cpu) == ("native", None)
    monkeypatch.setattr(cpu_facts, "cpu_flags", lambda: {"avx512_fp16", "amx_fp16"})
    assert variant_support("float16", cpu) == ("native", None)
    assert variant_support("bfloat16", cpu)[0] == "emulated"
    assert variant_support("float32", cpu) == ("native", None)


def test_unsupported_variant_is_reported_without_loading(monkeypatch):
    from fp16studio.core.precision import device as bench_device
    from fp16studio.core.demo.pipelines import demo_spec

    monkeypatch.setattr(bench, "variant_support", lambda name, device: (
        ("unsupported", "no bfloat16 here") if "bfloat16" in name else ("native", None)))
    loads = []
    monkeypatch.setattr(bench._Loader, "prepare",
                        lambda self, spec, real=bench._Loader.prepare: loads.append(
                            spec.model_dtype) or real(self, spec))
    doc = bench.benchmark(demo_spec("healthy"), variants="float32,bfloat16", **FAST).to_json()
    fp32, bf16 = doc["variants"]
    assert fp32["ok"] and not bf16["ok"] and bf16["error"] == "no bfloat16 here"
    assert bf16["support"] == "unsupported" and loads == ["float32"]
    table = format_bench(bench.BenchResult.from_json(doc))
    assert "bfloat16: unsupported, no bfloat16 here" in table and "failed" not in table
    assert any(line.split()[:2] == ["bfloat16", "unsupported"] for line in table.splitlines())
    assert bench_device.compute_dtype("autocast-float16") == "float16"


def test_tf32_runs_its_calls_with_tf32_allowed_and_float32_as_the_user_set_it(monkeypatch):
    from fp16studio.core.run import pipeline
    from fp16studio.core.demo.pipelines import demo_spec

    monkeypatch.setattr(bench, "variant_support", lambda name, device: ("native", None))
    seen, forward = set(), pipeline.forward
    monkeypatch.setattr(pipeline, "forward", lambda run: seen.add(
        torch.get_float32_matmul_precision()) or forward(run))
    doc = bench.benchmark(demo_spec("healthy"), variants="tf32,float32", **FAST).to_json()
    assert [(v["name"], v["ok"]) for v in doc["variants"]] == [("float32", True), ("tf32", True)]
    assert seen == {"highest", "high"} and torch.get_float32_matmul_precision() == "highest"


def test_peak_fraction_only_on_a_known_gpu(monkeypatch):
    from fp16studio.core.precision.device import peak_tflops

    gpu = fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3", (9, 0))
    torch.backends.cuda.matmul.allow_tf32 = False
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    assert peak_tflops(gpu, "NVIDIA H100 80GB HBM3", "float32") == 67.0
    assert peak_tflops(gpu, "NVIDIA H200", "autocast-bfloat16") == 989.0
    assert peak_tflops(gpu, "NVIDIA H100 PCIe", "float16") == 756.0
    assert peak_tflops(gpu, "NVIDIA H100 80GB HBM3", "tf32") == 495.0
    torch.backends.cuda.matmul.allow_tf32 = True
    assert peak_tflops(gpu, "NVIDIA H100 80GB HBM3", "float32") == 495.0
    assert peak_tflops(gpu, "NVIDIA L4", "float16") is None
    assert peak_tflops(torch.device("cpu"), "x86_64", "float32") is None


def test_format_bench_of_a_cuda_document_names_tf32_and_memory_kind():
    doc = {"device": "cuda:0", "device_name": "NVIDIA H100", "note": None,
           "tf32": {"cuda_matmul_allow_tf32": True, "cudnn_allow_tf32": True,
                    "float32_matmul_precision": "high"},
           "variants": [
               {"name": "float32", "ok": True, "samples_per_s": 100.0,
                "latency_ms": {"p50": 40.0, "p90": 41.0, "min": 39.5},
                "peak_memory_bytes": 3 * 2**30, "weights_bytes": 2**30,
                "max_abs_diff_vs_float32": 0.0, "top1_agreement": 1.0,
                "memory_kind": "cuda-max-allocated"},
               {"name": "bfloat16", "ok": False, "error": "out of memory: CUDA out of memory"}]}
    table = format_bench(bench.BenchResult.from_json(doc))
    assert "TF32 matmul on" in table and "precision high" in table
    assert "max_memory_allocated" in table and "3.0 GiB" in table
    assert "bfloat16: out of memory" in table


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_memory_comes_from_the_allocator_and_timing_from_events():
    from fp16studio.core.demo.pipelines import demo_spec

    doc = bench.benchmark(demo_spec("overflow").replace(device="cuda"), **FAST).to_json()
    assert doc["device"].startswith("cuda") and doc["note"] is None
    for v in doc["variants"]:
        if not v["ok"]:  # only bfloat16 may be missing, and only on pre-Ampere GPUs
            assert "bfloat16" in v["name"] and "compute capability" in v["error"]
            continue
        assert v["memory_kind"] == "cuda-max-allocated"
        assert v["peak_memory_bytes"] >= v["weights_bytes"] > 0
        assert v["reserved_memory_bytes"] >= v["peak_memory_bytes"]
        assert v["latency_ms"]["min"] > 0
    assert "max_memory_allocated" in format_bench(bench.BenchResult.from_json(doc))


# -- the command line -----------------------------------------------------------------------------

QUICK = ["--min-iterations", "2", "--min-seconds", "0", "--min-rounds", "2"]


def test_cli_bench_without_warmup_runs(demo_dir, capsys):
    from fp16studio import cli

    assert cli.main(["bench", "demo:healthy", "--variants", "float32,bfloat16", "--warmup", "0",
                     "--min-iterations", "2", "--min-seconds", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["limits"]["warmup"] == 0
    for v in doc["variants"]:
        assert v["ok"] and v["iterations"] == 2 and v["rounds"] == 2  # no more rounds than calls
        assert {"stable", "spread", "support", "flops_per_sample", "tflops"} <= set(v)


def test_cli_bench_table_shows_the_spread_and_flags_unstable_figures(demo_dir, capsys,
                                                                    monkeypatch):
    from fp16studio import cli
    from fp16studio.core.common import precision as cpu_facts

    monkeypatch.setattr(cpu_facts, "cpu_flags", frozenset)  # a CPU without half instructions
    assert cli.main(["bench", "demo:healthy", "--variants", "float32,float16", *QUICK]) == 0
    out = capsys.readouterr().out
    assert "Spread" in out and "TFLOP/s" in out and "float16: emulated" in out
    assert "verdict: " in out and max(map(len, out.splitlines())) <= 120
    doc = {"device": "cpu", "variants": [
        {"name": "float32", "ok": True, "samples_per_s": 10.0, "stable": False, "spread": 0.4,
         "latency_ms": {"p50": 400.0, "p90": 500.0, "min": 300.0}, "peak_memory_bytes": None,
         "weights_bytes": None, "max_abs_diff_vs_float32": 0.0, "top1_agreement": None},
        {"name": "bfloat16", "ok": True, "samples_per_s": 20.0, "stable": True, "spread": 0.01,
         "latency_ms": {"p50": 200.0, "p90": 210.0, "min": 190.0}, "peak_memory_bytes": None,
         "weights_bytes": None, "max_abs_diff_vs_float32": 0.1, "top1_agreement": None}]}
    table = format_bench(bench.BenchResult.from_json(doc)).splitlines()
    rows = {line.split()[0]: line for line in table if line.startswith(("float32", "bfloat16"))}
    assert "40.0%" in rows["float32"] and rows["float32"].split()[1] == "!"
    assert "!" not in rows["bfloat16"]
    assert any(line.startswith("! UNSTABLE (float32)") for line in table)


def test_the_table_of_every_figure_fits_120_columns_with_details_and_verdicts_under_it():
    """A GPU document with every figure: the busy time and the bound are columns, the rest
    (overhead, kernels' speed-up, p90, TFLOP/s, cosine) and each verdict lines under it."""
    figures = {"samples_per_s": 12345.6, "stable": True, "spread": 0.012,
               "latency_ms": {"p50": 2.59, "p90": 2.7, "min": 2.5}, "peak_memory_bytes": 15 * 2**30,
               "weights_bytes": 2 * 2**30, "max_abs_diff_vs_float32": 0.0123,
               "top1_agreement": 0.999, "tflops": 123.0, "peak_fraction": 0.124,
               "cosine_vs_float32": 0.99999, "nonfinite_outputs": 0, "tokens_per_s": 3.2e6,
               "first_call_ms": 1500.0, "support": "native", "memory_kind": "cuda-max-allocated"}
    doc = {"device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3",
           "verdict": "autocast-bfloat16 pays: 4.95x float32's throughput but launch-bound.",
           "variants": [{"name": "float32", "ok": True, **figures, "busy_ms": 36.0,
                         "overhead_ms": 0.3, "bound": "math", "kernel_speedup": 1.0,
                         "verdict": "float32; math-bound at 60% of the GPU's float32 peak."},
                        {"name": "autocast-bfloat16", "ok": True, **figures, "stable": False,
                         "busy_ms": 1.2, "overhead_ms": 1.39, "bound": "launch",
                         "kernel_speedup": 30.0, "verdict": "autocast-bfloat16 runs " + "x" * 150}]}
    table = format_bench(bench.BenchResult.from_json(doc))
    lines = table.splitlines()
    assert max(map(len, lines)) <= 120
    header = next(line for line in lines if line.startswith("Variant"))
    assert "Busy ms" in header and "Bound" in header and "Overhead" not in header
    assert any("launch" in line.split() for line in lines if line.startswith("autocast-bfloat16 !"))
    assert "overhead 1.39 ms" in table and "kernels 30.00× float32's" in table
    assert "verdict: autocast-bfloat16 pays" in table and "  autocast-bfloat16 runs xxx" in table


def test_cli_bench_rejects_nonsense_limits_with_exit_2(demo_dir, capsys):
    from fp16studio import cli

    assert cli.main(["bench", "demo:healthy", "--min-rounds", "0"]) == 2
    assert "--min-rounds >= 1" in capsys.readouterr().err


def test_nothing_holds_a_model_when_bench_gives_memory_back(monkeypatch):
    import weakref

    from fp16studio.core.demo.pipelines import demo_spec

    refs, alive = [], []
    prepare = bench._Loader.prepare

    def spy(self, spec):
        prepared = prepare(self, spec)
        refs.append(weakref.ref(prepared.model))
        return prepared

    monkeypatch.setattr(bench._Loader, "prepare", spy)
    monkeypatch.setattr(bench, "_free", lambda device: alive.append(
        [ref() is not None for ref in refs]))
    bench.benchmark(demo_spec("healthy"), variants="float32,bfloat16,autocast-bfloat16", **FAST)
    assert len(refs) == 3 and alive == [[False, False, False]]
