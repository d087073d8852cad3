"""bench: the measuring machinery on a plain module, and benchmark() on tiny pipelines.

No timing asserts: figures are checked for shape and sanity, never for speed.
"""

import json

import pytest
import torch

from fp16studio.core import bench, bench_measure
from fp16studio.core.bench_measure import Limits
from fp16studio.core.errors import CancelToken, Cancelled, InputError

FAST = {"warmup": 1, "min_iterations": 2, "min_seconds": 0.0}


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.calls


def test_time_calls_warms_up_then_meets_both_minimums():
    fn, seen = Counter(), []
    timing = bench_measure.time_calls(fn, bench_measure.make_timer(torch.device("cpu")),
                                      Limits(warmup=3, min_iterations=4, min_seconds=0.0),
                                      on_iteration=lambda i, ms: seen.append(i))
    assert fn.calls == 3 + 4
    assert timing.output == 1  # the first call's result is kept for the accuracy check
    assert seen == [1, 2, 3, 4]
    assert len(timing.latencies_ms) == 4 and timing.first_call_ms >= 0
    summary = timing.summary()
    assert summary["min"] <= summary["p50"] <= summary["p90"]


def test_time_calls_runs_until_min_seconds_but_not_past_max_iterations():
    fn = Counter()
    limits = Limits(warmup=1, min_iterations=1, min_seconds=0.05, max_iterations=10_000)
    timing = bench_measure.time_calls(lambda: torch.ones(64, 64) @ torch.ones(64, 64),
                                      bench_measure.make_timer(torch.device("cpu")), limits)
    assert timing.total_s > 0 and len(timing.latencies_ms) > 1
    capped = Limits(warmup=1, min_iterations=1, min_seconds=60.0, max_iterations=3)
    assert len(bench_measure.time_calls(fn, bench_measure.make_timer(torch.device("cpu")),
                                        capped).latencies_ms) == 3


def test_time_calls_stops_when_cancelled():
    token = CancelToken()

    def on_iteration(i, ms):
        if i == 2:
            token.cancel()

    with pytest.raises(Cancelled):
        bench_measure.time_calls(Counter(), bench_measure.make_timer(torch.device("cpu")),
                                 Limits(warmup=1, min_iterations=100, min_seconds=0.0),
                                 cancel=token, on_iteration=on_iteration)


def test_limits_reject_nonsense():
    with pytest.raises(ValueError):
        Limits(min_iterations=10, max_iterations=5)
    with pytest.raises(ValueError):
        Limits(warmup=0)


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


def test_cpu_memory_probe_reports_resident_memory():
    probe = bench_measure.MemoryProbe(torch.device("cpu"))
    probe.start()
    figures = probe.result()
    assert figures["memory_kind"] == "process-rss"
    assert figures["peak_memory_bytes"] > 10 * 2**20
    assert figures["reserved_memory_bytes"] is None and figures["nvml_used_bytes"] is None


def test_drift_against_float32():
    torch.manual_seed(0)
    logits = torch.randn(8, 5)
    ref = bench_measure.reference_copy({"logits": logits})
    same = bench_measure.drift(ref, bench_measure.reference_copy({"logits": logits.half()}))
    assert 0 < same["max_abs_diff_vs_float32"] < 1e-2
    assert same["cosine_vs_float32"] == pytest.approx(1.0, abs=1e-5)
    assert same["top1_agreement"] == 1.0 and same["nonfinite_outputs"] == 0

    flipped = logits.clone()
    flipped[0] = -flipped[0]  # one row of eight now picks another class
    worse = bench_measure.drift(ref, bench_measure.reference_copy({"logits": flipped}))
    assert worse["top1_agreement"] == pytest.approx(7 / 8)
    assert worse["cosine_vs_float32"] < 1.0

    hidden = bench_measure.drift(bench_measure.reference_copy({"last_hidden_state": logits}),
                                 bench_measure.reference_copy({"last_hidden_state": logits}))
    assert hidden["max_abs_diff_vs_float32"] == 0.0 and hidden["top1_agreement"] is None

    overflow = logits.clone()
    overflow[1, 2] = float("inf")
    broken = bench_measure.drift(ref, bench_measure.reference_copy({"logits": overflow}))
    assert broken["nonfinite_outputs"] == 1
    assert broken["max_abs_diff_vs_float32"] is None and broken["top1_agreement"] is None


def test_tf32_settings_name_the_float32_baseline():
    settings = bench_measure.tf32_settings()
    assert settings["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert isinstance(settings["cuda_matmul_allow_tf32"], bool)


# -- variants -------------------------------------------------------------------------------------

def test_variant_specs(tmp_path):
    from fp16studio.core.spec import PipelineSpec

    spec = PipelineSpec(model=str(tmp_path), dataset="synthetic", model_dtype="float16",
                        input_dtype="float16", input_cast="all", format_dtype="float16",
                        format="python", input_device="cpu", keep_fp32=["classifier"])
    fp32 = bench.variant_spec(spec, "float32")
    assert (fp32.model_dtype, fp32.input_dtype, fp32.autocast) == ("float32", None, None)
    half = bench.variant_spec(spec, "bfloat16")
    assert (half.model_dtype, half.input_dtype, half.input_cast) == ("bfloat16", "bfloat16",
                                                                      "floating")
    amp = bench.variant_spec(spec, "autocast-float16")
    assert (amp.model_dtype, amp.input_dtype, amp.autocast) == ("float32", None, "float16")
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


def test_every_variant_runs_on_a_tiny_resnet_and_streams_samples():
    from fp16studio.core.demo import demo_spec

    samples, stages = [], []
    result = bench.benchmark(demo_spec("healthy"), on_sample=samples.append,
                             progress=lambda stage, message: stages.append(stage), **FAST)
    doc = json.loads(json.dumps(result.to_json(), allow_nan=False))  # strict JSON
    assert doc["device"] == "cpu" and "no speed-up is expected" in doc["note"]
    assert set(doc["tf32"]) == {"cuda_matmul_allow_tf32", "cudnn_allow_tf32",
                                "float32_matmul_precision"}
    assert [v["name"] for v in doc["variants"]] == list(bench.VARIANTS)
    for v in doc["variants"]:
        assert CONTRACT_KEYS <= set(v), v["name"]
        assert v["ok"], v["error"]
        assert set(v["latency_ms"]) == {"p50", "p90", "min"}
        assert v["samples_per_s"] > 0 and v["iterations"] == 2
        assert v["memory_kind"] == "process-rss" and v["peak_memory_bytes"] > 0
        assert 0.99 < v["cosine_vs_float32"] <= 1.0 + 1e-9
        assert v["top1_agreement"] is not None  # logits of a classifier
    by_name = {v["name"]: v for v in doc["variants"]}
    assert by_name["float32"]["max_abs_diff_vs_float32"] == 0.0
    assert by_name["float16"]["weights_bytes"] < by_name["float32"]["weights_bytes"]
    assert by_name["autocast-float16"]["weights_bytes"] == by_name["float32"]["weights_bytes"]
    assert by_name["float16"]["output"]["dtype"] == "float16"
    assert by_name["float16"]["max_abs_diff_vs_float32"] > 0
    assert {s["variant"] for s in samples} == set(bench.VARIANTS)
    assert [s["iteration"] for s in samples if s["variant"] == "float32"] == [1, 2]
    assert all(s["latency_ms"] > 0 and s["samples_per_s"] > 0 for s in samples)
    assert "bench" in stages and "model" in stages  # prepare()'s own stages pass through
    table = bench.format_table(doc)
    assert "autocast-bfloat16" in table and "no speed-up is expected" in table


def test_float16_overflow_shows_as_nonfinite_drift_and_bfloat16_does_not():
    from fp16studio.core.demo import demo_spec

    doc = bench.benchmark(demo_spec("overflow"), variants="float32,float16,bfloat16",
                          **FAST).to_json()
    fp16, bf16 = doc["variants"][1], doc["variants"][2]
    assert doc["batch"]["tokens"] > 0 and fp16["tokens_per_s"] > 0
    assert fp16["ok"] and fp16["nonfinite_outputs"] > 0
    assert fp16["max_abs_diff_vs_float32"] is None and fp16["top1_agreement"] is None
    assert bf16["nonfinite_outputs"] == 0 and bf16["max_abs_diff_vs_float32"] is not None
    assert "inf/NaN" in bench.format_table(doc)


def test_without_float32_in_the_list_drift_still_compares_with_float32():
    from fp16studio.core.demo import demo_spec

    doc = bench.benchmark(demo_spec("blind-half"), variants=["bfloat16"], **FAST).to_json()
    [v] = doc["variants"]
    assert v["ok"] and v["max_abs_diff_vs_float32"] > 0 and doc["reference_error"] is None


def test_a_failing_variant_is_reported_and_the_others_still_run(monkeypatch):
    from fp16studio.core import pipeline
    from fp16studio.core.demo import demo_spec

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
    assert "bfloat16: RuntimeError" in bench.format_table(doc)


def test_a_spec_that_cannot_load_is_bad_input(tmp_path):
    from fp16studio.core.spec import PipelineSpec

    spec = PipelineSpec(model=str(tmp_path / "missing"), dataset="synthetic", device="cpu")
    with pytest.raises(InputError):
        bench.benchmark(spec, variants="float32", **FAST)


def test_cancel_stops_the_run():
    from fp16studio.core.demo import demo_spec

    token = CancelToken()
    with pytest.raises(Cancelled):
        bench.benchmark(demo_spec("healthy"), cancel=token,
                        on_sample=lambda sample: token.cancel(), **FAST)


def test_bfloat16_on_a_gpu_without_it_is_reported_before_loading(monkeypatch):
    import contextlib

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    gpu = torch.device("cuda", 0)
    reason = bench.unsupported_reason("autocast-bfloat16", gpu)
    assert "Tesla T4" in reason and "7.5" in reason
    assert bench.unsupported_reason("float16", gpu) is None
    assert bench.unsupported_reason("bfloat16", torch.device("cpu")) is None


def test_format_table_of_a_cuda_document_names_tf32_and_memory_kind():
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
    table = bench.format_table(doc)
    assert "TF32 matmul on" in table and "precision high" in table
    assert "max_memory_allocated" in table and "3.0 GiB" in table
    assert "bfloat16: out of memory" in table


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_memory_comes_from_the_allocator_and_timing_from_events():
    from fp16studio.core.demo import demo_spec

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
    assert "max_memory_allocated" in bench.format_table(doc)
