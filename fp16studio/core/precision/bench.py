"""Precision comparison (`fp16studio bench`, the Compare tab): each precision variant of the
user's pipeline on the same batch — throughput, latency, memory, and drift from float32.

All variants are loaded first (through the same loading and batch building a diagnosis uses,
so transformers keeps its own fp32 modules; the autocast variants share the float32 weights),
then timed in interleaved rounds (A B C A B C ...) in the calling thread (autocast and
inference mode are thread-local, and the GUI calls this on its worker), so a burst of other
load hits them alike, and the spread across rounds says whether it did. A variant that cannot
run here is reported with its error (decided before loading where the device says so); the
others run.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from dataclasses import dataclass, field

from ..common import dtypes
from ..common.codec import Document
from ..common.errors import (Cancelled, InputError, check_cancel, first_line, raise_if_disk_full,
                             report_progress)
from ..diagnostics.findings import Finding
from ..diagnostics.rules.ranges import variant_not_finite
from ..run.distance import nonfinite_count, reference_copy
from ..spec.value import PipelineSpec
from .device import peak_gb_per_s, peak_tflops, variant_support
from .measure import (Limits, MemoryProbe, count_flops, device_busy_ms, drift, gemm_dims,
                      make_timer, output_summary, tf32_settings, time_interleaved,
                      weights_bytes, with_tf32)
from .verdict import Step, judge

# tf32: the float32 model with float32 matmuls and convolutions run as TF32 (NVIDIA GPUs of
# compute capability 8.0 and newer), the one speed-up that keeps the float32 weights and range.
VARIANTS = ("float32", "tf32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16")

CPU_NOTE = ("Measured on a CPU: what half precision does to speed here depends on this CPU's "
            "kernels (bfloat16 and float16 matrix instructions such as AVX512-BF16 or AMX) and "
            "says little about a GPU; judge speed on the device you deploy on. Half precision "
            "halves the weights' memory everywhere.")


def variant_spec(spec: PipelineSpec, name: str) -> PipelineSpec:
    """The user's spec running in one precision variant.

    The data-side casts (`map_dtype`, `format_dtype`) are dropped, the batch is torch tensors
    on the model's device, cast right before the forward pass, floating tensors only: this
    measures the precision, not the pipeline's casting and placement mistakes (`diagnose`
    finds those). `keep_fp32` stays as the user set it.
    """
    # The user's own casts after loading and autocast device go too: a float32 variant of a
    # model.half() pipeline must run in float32.
    common = {"map_dtype": None, "format_dtype": None, "format": "torch",
              "input_cast": "floating", "input_device": "model", "model_cast": None,
              "autocast_device": None}
    if name in ("float32", "tf32"):  # one model: TF32 is a setting around the calls
        return spec.replace(model_dtype="float32", input_dtype=None, autocast=None, **common)
    if name in dtypes.HALF_NAMES:
        return spec.replace(model_dtype=name, input_dtype=name, autocast=None, **common)
    if name.startswith("autocast-") and name[len("autocast-"):] in dtypes.HALF_NAMES:
        return spec.replace(model_dtype="float32", input_dtype=None,
                            autocast=name[len("autocast-"):], **common)
    raise InputError(f"bench: unknown variant {name!r} (use {', '.join(VARIANTS)})")


def parse_variants(variants) -> list[str]:
    """Variant names in the canonical order (float32 first: it is the accuracy reference).
    Accepts None (all), a list, or a comma-separated string as `--variants` gives it."""
    if variants is None:
        return list(VARIANTS)
    if isinstance(variants, str):
        variants = [v for v in variants.split(",") if v.strip()]
    names = {canonical_variant(v) for v in variants}
    if not names:
        raise InputError("bench: no variant to run")
    return [v for v in VARIANTS if v in names]


def canonical_variant(name: str, command: str = "bench", choices=VARIANTS) -> str:
    """A variant's canonical name among `choices`; its dtype may be written fp16, half, bf16
    as in a spec."""
    text = str(name).strip().lower()
    autocast = text.startswith("autocast-")
    try:
        dtype = dtypes.normalize(text.removeprefix("autocast-"))
    except InputError:
        dtype = text
    variant = f"autocast-{dtype}" if autocast else dtype
    if variant not in choices:
        raise InputError(f"{command}: unknown variant {name!r} (use {', '.join(choices)})")
    return variant


@dataclass
class Latency(Document):
    """A variant's milliseconds per call over its timed calls."""

    p50: float | None = None
    p90: float | None = None
    min: float | None = None


@dataclass
class BatchInfo(Document):
    """The batch every variant ran on (of the float32 variant's build)."""

    size: int = 0
    shapes: dict[str, list[int]] = field(default_factory=dict)
    tokens: int | None = None    # the real tokens of a text batch


@dataclass
class Tf32Settings(Document):
    """Whether float32 matmuls and convolutions could run as TF32: the float32 baseline's
    settings (measure.tf32_settings)."""

    cuda_matmul_allow_tf32: bool = False
    cudnn_allow_tf32: bool = False
    float32_matmul_precision: str | None = None


@dataclass
class VariantResult(Document):
    """One precision variant's measurement (`bench --json`'s `variants`)."""

    # The CONTRACT §3 keys first, in its order; the rest are additions.
    name: str
    ok: bool = False
    samples_per_s: float | None = None
    latency_ms: Latency | None = None
    peak_memory_bytes: int | None = None
    weights_bytes: int | None = None
    max_abs_diff_vs_float32: float | None = None
    top1_agreement: float | None = None
    error: str | None = None
    # None: a document from before the spread across rounds was measured (nothing to say).
    stable: bool | None = None
    spread: float | None = None
    support: str | None = None
    support_note: str | None = None
    flops_per_sample: int | None = None
    tflops: float | None = None
    peak_fraction: float | None = None
    # Why it is as fast as it is (core.precision.verdict): the device's busy time per call and
    # the rest of the step, what bounds it, float32's busy time over this one's, in words.
    busy_ms: float | None = None
    overhead_ms: float | None = None
    bound: str | None = None
    kernel_speedup: float | None = None
    verdict: str | None = None
    tokens_per_s: float | None = None
    first_call_ms: float | None = None
    iterations: int = 0
    rounds: int = 0
    memory_kind: str | None = None
    reserved_memory_bytes: int | None = None
    nvml_used_bytes: int | None = None
    cosine_vs_float32: float | None = None
    nonfinite_outputs: int | None = None
    # The primary output compared: {"name", "dtype", "shape"}.
    output: dict | None = None


@dataclass
class BenchResult(Document):
    """The `bench --json` document (CONTRACT §3)."""

    device: str = ""    # a saved document without one is still read
    variants: list[VariantResult] = field(default_factory=list)
    device_name: str = ""
    # None: a document that does not say (the baseline's settings are not known).
    tf32: Tf32Settings | None = None
    batch: BatchInfo | None = None
    limits: dict = field(default_factory=dict)
    note: str | None = None
    # Why there is no float32 reference, when float32 was not asked for and could not run.
    reference_error: str | None = None
    # One sentence: does half precision pay here, and if not, why (core.precision.verdict).
    verdict: str | None = None
    # A variant whose output is not finite: `overflow`, judged on that before any speed.
    findings: list[Finding] = field(default_factory=list)

    def vs_float32(self, variant: VariantResult) -> float | None:
        """The variant's throughput over float32's (None without both figures)."""
        base = next((v.samples_per_s for v in self.variants if v.name == "float32" and v.ok),
                    None)
        return variant.samples_per_s / base if base and variant.samples_per_s else None


def benchmark(spec: PipelineSpec, variants=None, progress=None, cancel=None, on_sample=None,
              *, warmup: int = 3, min_iterations: int = 20, min_seconds: float = 1.0,
              max_iterations: int = 10_000, min_rounds: int = 5) -> BenchResult:
    """Measure each variant (default: all of VARIANTS) of `spec` on the same batch.

    progress(stage, message) reports loading and each round (stage "bench");
    on_sample(dict(variant, iteration, latency_ms, samples_per_s)) runs after each timed call;
    cancel.check() runs between calls and raises Cancelled. Until one variant has loaded,
    InputError means the spec itself is bad and propagates; any other failure, or a later
    InputError, is reported in that variant and the others still run.
    """
    names = parse_variants(variants)
    limits = Limits(warmup=warmup, min_iterations=min_iterations, min_seconds=min_seconds,
                    max_iterations=max_iterations, min_rounds=min_rounds)
    device = _device(spec)
    result = BenchResult(device=str(device), device_name=_device_name(device),
                         tf32=Tf32Settings(**tf32_settings()), limits=dataclasses.asdict(limits),
                         note=CPU_NOTE if device.type == "cpu" else None)
    loader, runs = _Loader(progress, cancel), {}
    try:
        reference = None
        if "float32" not in names:
            report_progress(progress, "bench", "float32 reference output")
            try:
                reference = _reference(loader, variant_spec(spec, "float32"), names)
            except (Cancelled, InputError):
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the pipeline is reported
                result.reference_error = describe(exc)
        out = {}
        for i, name in enumerate(names):
            check_cancel(cancel)
            report_progress(progress, "bench", f"loading {name} ({i + 1} of {len(names)})")
            support, note = variant_support(name, device)
            out[name] = VariantResult(name=name, support=support, support_note=note, stable=False)
            if support == "unsupported":
                out[name].error = note
                continue
            try:
                runs[name] = loader.prepare(variant_spec(spec, name))
            except Cancelled:
                raise
            except Exception as exc:  # isolate the variant; the others still run
                if isinstance(exc, InputError) and reference is None and not runs:
                    raise
                out[name].error = describe(exc)
                continue
            if result.batch is None:
                result.batch = batch_info(runs[name].batch)
        steps = _measure(runs, out, reference, device, result.device_name, limits, progress,
                         cancel, on_sample)
        result.verdict = _judge(steps, out, device, runs)
        result.findings = [variant_not_finite(v.name, v.nonfinite_outputs, v.output)
                           for v in out.values() if v.ok and v.nonfinite_outputs]
    finally:  # nothing may hold a model when the memory is given back
        runs.clear()
        loader.clear()
        _free(device)
    result.variants = [out[name] for name in names]
    return result


class _Loader:
    """Loads each variant's model once per set of loading keys (float32 and the autocast
    variants share one), and builds each variant's batch."""

    def __init__(self, progress, cancel):
        self.progress, self.cancel = progress, cancel
        self.models: dict = {}

    def prepare(self, spec):
        from ..run.pipeline import DeviceUnavailable, Prepared, prepare_batch, prepare_model
        from ..run.warm import loading_key

        key = loading_key(spec)
        if key not in self.models:
            try:
                self.models[key] = prepare_model(spec, self.progress)
            except DeviceUnavailable:
                raise InputError(f"device {spec.device!r} is not available on this machine") \
                    from None
        loaded, processor = self.models[key]
        check_cancel(self.cancel)
        build = prepare_batch(spec, loaded, processor, self.progress, self.cancel)
        return Prepared(spec=spec, loaded=loaded, processor=processor, build=build)

    def clear(self):
        self.models.clear()


def _reference(loader, spec, names):
    """float32's primary output on the batch, for runs that do not time float32 itself; its
    model stays loaded only when an autocast variant shares it."""
    from ..run.pipeline import forward

    prepared = loader.prepare(spec)
    output = reference_copy(forward(prepared))
    if not any(name.startswith("autocast-") for name in names):
        del prepared
        loader.clear()
    return output


def _measure(runs, out, reference, device, device_name, limits, progress, cancel, on_sample):
    """Time the prepared variants in interleaved rounds and fill their results in `out`;
    returns the `Step` of each variant that ran, for the verdict."""
    from ..run import pipeline

    steps = []
    if not runs:
        return steps
    probes = {name: MemoryProbe(device) for name in runs}
    sizes = {name: batch_info(run.batch).size for name, run in runs.items()}

    def on_iteration(name, iteration, ms):
        if on_sample is not None:
            on_sample({"variant": name, "iteration": iteration, "latency_ms": ms,
                       "samples_per_s": sizes[name] * 1000.0 / ms if ms > 0 else None})

    def on_block(name, started):
        if started:
            report_progress(progress, "bench", f"timing {name}")
            probes[name].start()
        else:
            probes[name].stop()

    fns = {name: functools.partial(pipeline.forward, run) for name, run in runs.items()}
    if "tf32" in fns:
        fns["tf32"] = with_tf32(fns["tf32"])
    timings, errors = time_interleaved(fns, make_timer(device), limits, cancel, on_iteration,
                                       on_block)
    for name, exc in errors.items():
        out[name].error = describe(exc)
    if "float32" in timings:
        reference = reference_copy(timings["float32"].output)
    flops = None
    for name, timing in timings.items():
        run, variant = runs[name], out[name]
        if output_summary(timing.output) is None:
            variant.error = pipeline.no_tensor(timing.output)
            continue
        if flops is None:  # the same work in every variant: count it once
            flops = count_flops(fns[name])
        size, tokens = sizes[name], batch_info(run.batch).tokens
        latency = Latency(**timing.summary())
        per_s = 1000.0 / latency.p50 if latency.p50 > 0 else None
        variant.ok = True
        variant.samples_per_s = size * per_s if per_s else None
        variant.tokens_per_s = tokens * per_s if per_s and tokens else None
        variant.latency_ms = latency
        variant.first_call_ms = timing.first_call_ms
        variant.iterations = len(timing.latencies_ms)
        variant.rounds = sum(1 for block in timing.rounds if block)
        variant.spread, variant.stable = timing.spread, timing.stable
        variant.weights_bytes = weights_bytes(run.model)
        probes[name].measure(fns[name])  # the CPU's peak: one more call, untimed
        variant.output = output_summary(timing.output)
        copy = reference_copy(timing.output)
        for key, value in {**probes[name].result(variant.weights_bytes),
                           **drift(reference, copy)}.items():
            setattr(variant, key, value)
        variant.nonfinite_outputs = nonfinite_count(copy)   # with or without a reference
        peak = peak_tflops(device, device_name, name)
        if flops and per_s:
            variant.flops_per_sample = flops // size
            variant.tflops = flops * per_s / 1e12
            variant.peak_fraction = variant.tflops / peak if peak else None
        check_cancel(cancel)
        if device.type == "cuda":
            report_progress(progress, "bench", f"GPU busy time of {name}")
        steps.append(Step(name=name, wall_ms=latency.p50,
                          busy_ms=device_busy_ms(fns[name], device), flops=flops,
                          bytes=variant.peak_memory_bytes, peak_tflops=peak,
                          peak_gb_per_s=peak_gb_per_s(device, device_name),
                          support=variant.support, spread=variant.spread,
                          nonfinite=variant.nonfinite_outputs))
    return steps


def _judge(steps, out, device, runs) -> str:
    """Each variant's bound, busy time and verdict in `out`; the whole bench's verdict."""
    import torch

    model = next((run.model for run in runs.values()), None)
    figures, overall = judge(steps, device.type, torch.get_num_threads(),
                             gemm_dims(model) if model is not None else ())
    for name, found in figures.items():
        for key, value in found.items():
            setattr(out[name], key, value)
    return overall


def _device(spec: PipelineSpec):
    from ..hf.loading import resolve_device

    device = resolve_device(spec)
    if device is None:
        raise InputError(f"device {spec.device!r} is not available on this machine")
    return device


def batch_info(batch: dict) -> BatchInfo:
    """Batch size (first dimension of the first tensor), shapes, and real tokens for text."""
    import torch

    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise ValueError("the batch holds no tensors")
    first = next(iter(tensors.values()))
    size = first.shape[0] if first.dim() else 1
    tokens = None
    if "attention_mask" in tensors:
        tokens = int(tensors["attention_mask"].sum())
    elif "input_ids" in tensors:
        tokens = tensors["input_ids"].numel()
    return BatchInfo(size=int(size), shapes={k: list(v.shape) for k, v in tensors.items()},
                     tokens=tokens)


def describe(exc: BaseException) -> str:
    """One line for the report: the type and the first line of the message (a full disk is
    not the variant's failure: DiskFull)."""
    import torch

    raise_if_disk_full(exc)
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "out of memory: " + first_line(exc)
    message = first_line(exc)
    return message if message == type(exc).__name__ else f"{type(exc).__name__}: {message}"


def _free(device):
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def _device_name(device) -> str:
    import platform

    import torch

    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()
