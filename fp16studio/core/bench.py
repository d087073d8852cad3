"""Precision comparison (`fp16studio bench`, the Compare tab): each precision variant of the
user's pipeline on the same batch — throughput, latency, memory, and drift from float32.

Variants run one after another in the calling thread (autocast and inference mode are
thread-local, and the GUI calls this on its worker). Each variant is loaded through the same
`prepare()` a diagnosis uses, so transformers keeps its own fp32 modules, and is freed before
the next one loads. A variant that cannot run here is reported with its error; the others run.
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import dataclass, field

from . import dtypes, units
from .bench_measure import (Limits, MemoryProbe, drift, make_timer, output_summary,
                            reference_copy, tf32_settings, time_calls, weights_bytes)
from .errors import Cancelled, InputError, check_cancel, first_line, report_progress
from .spec import PipelineSpec

VARIANTS = ("float32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16")

CPU_NOTE = ("Measured on a CPU: in general no speed-up is expected here. float16 usually runs "
            "slower than float32 on CPUs; bfloat16 is faster only on CPUs with bfloat16 matrix "
            "instructions (AVX512-BF16, AMX). Half precision still halves the weights' memory. "
            "Judge speed on the GPU you deploy on.")


def variant_spec(spec: PipelineSpec, name: str) -> PipelineSpec:
    """The user's spec running in one precision variant.

    The data-side casts (`map_dtype`, `format_dtype`) are dropped, the batch is torch tensors
    on the model's device, cast right before the forward pass, floating tensors only: this
    measures the precision, not the pipeline's casting and placement mistakes (`diagnose`
    finds those). `keep_fp32` stays as the user set it.
    """
    common = {"map_dtype": None, "format_dtype": None, "format": "torch",
              "input_cast": "floating", "input_device": "model"}
    if name == "float32":
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
    names = {v.strip().lower() for v in variants}
    unknown = sorted(names - set(VARIANTS))
    if unknown or not names:
        raise InputError(f"bench: unknown variant {unknown[0]!r} (use {', '.join(VARIANTS)})"
                         if unknown else "bench: no variant to run")
    return [v for v in VARIANTS if v in names]


@dataclass
class VariantResult:
    # The CONTRACT §3 keys first, in its order; the rest are additions.
    name: str
    ok: bool = False
    samples_per_s: float | None = None
    latency_ms: dict | None = None
    peak_memory_bytes: int | None = None
    weights_bytes: int | None = None
    max_abs_diff_vs_float32: float | None = None
    top1_agreement: float | None = None
    error: str | None = None
    tokens_per_s: float | None = None
    first_call_ms: float | None = None
    iterations: int = 0
    memory_kind: str | None = None
    reserved_memory_bytes: int | None = None
    nvml_used_bytes: int | None = None
    cosine_vs_float32: float | None = None
    nonfinite_outputs: int | None = None
    # The primary output compared: {"name", "dtype", "shape"}.
    output: dict | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class BenchResult:
    device: str
    variants: list = field(default_factory=list)
    device_name: str = ""
    tf32: dict = field(default_factory=dict)
    # {"size", "shapes": {name: [..]}, "tokens"} of the float32 batch.
    batch: dict | None = None
    limits: dict = field(default_factory=dict)
    note: str | None = None
    # Why there is no float32 reference, when float32 was not asked for and could not run.
    reference_error: str | None = None

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["variants"] = [v.to_json() for v in self.variants]
        return out


def benchmark(spec: PipelineSpec, variants=None, progress=None, cancel=None, on_sample=None,
              *, warmup: int = 3, min_iterations: int = 10, min_seconds: float = 1.0,
              max_iterations: int = 10_000) -> BenchResult:
    """Measure each variant (default: all of VARIANTS) of `spec` on the same batch.

    progress(stage, message) reports each variant (stage "bench") and its loading;
    on_sample(dict(variant, iteration, latency_ms, samples_per_s)) runs after each timed call;
    cancel.check() runs between calls and raises Cancelled. Until one variant has loaded,
    InputError means the spec itself is bad and propagates; any other failure, or a later
    InputError, is reported in that variant and the others still run.
    """
    names = parse_variants(variants)
    limits = Limits(warmup=warmup, min_iterations=min_iterations, min_seconds=min_seconds,
                    max_iterations=max_iterations)
    device = _device(spec)
    result = BenchResult(device=str(device), device_name=_device_name(device),
                         tf32=tf32_settings(), limits=dataclasses.asdict(limits),
                         note=CPU_NOTE if device.type == "cpu" else None)
    reference = None
    if "float32" not in names:
        report_progress(progress, "bench", "float32 reference output")
        try:
            reference = _reference(spec, progress, cancel)
        except (Cancelled, InputError):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the pipeline is reported
            result.reference_error = describe(exc)
        _free(device)
    for i, name in enumerate(names):
        check_cancel(cancel)
        report_progress(progress, "bench", f"{name} ({i + 1} of {len(names)})")
        run = _VariantRun(name, variant_spec(spec, name), device, limits, progress, cancel,
                          on_sample)
        try:
            variant = run.measure(reference)
        except Cancelled:
            raise
        except Exception as exc:
            spec_proven = reference is not None or result.batch is not None
            if isinstance(exc, InputError) and not spec_proven:
                raise
            variant = VariantResult(name=name, error=describe(exc))
        if name == "float32" and variant.ok:
            reference = run.reference
        if result.batch is None:
            result.batch = run.batch_info
        del run
        _free(device)
        result.variants.append(variant)
    return result


class _VariantRun:
    """One variant: load, time, measure, compare. Holds nothing heavy once `measure` returns."""

    def __init__(self, name, spec, device, limits, progress, cancel, on_sample):
        self.name, self.spec, self.device, self.limits = name, spec, device, limits
        self.progress, self.cancel, self.on_sample = progress, cancel, on_sample
        # Set as the run goes: the float32 output copy, and the batch once prepare() succeeded.
        self.reference = None
        self.batch_info = None

    def measure(self, reference) -> VariantResult:
        from .pipeline import forward, prepare

        unsupported = unsupported_reason(self.name, self.device)
        if unsupported:
            return VariantResult(name=self.name, error=unsupported)
        prepared = prepare(self.spec, self.progress, self.cancel)
        self.batch_info = batch_info(prepared.batch)
        size = self.batch_info["size"]
        probe = MemoryProbe(prepared.device)
        probe.start()

        def on_iteration(iteration, ms):
            probe.sample()
            if self.on_sample is not None:
                self.on_sample({"variant": self.name, "iteration": iteration, "latency_ms": ms,
                                "samples_per_s": size * 1000.0 / ms if ms > 0 else None})

        timing = time_calls(lambda: forward(prepared), make_timer(prepared.device), self.limits,
                            self.cancel, on_iteration)
        probe.sample()
        own = reference_copy(timing.output)
        if self.name == "float32":
            self.reference = reference = own
        calls = len(timing.latencies_ms)
        tokens = self.batch_info["tokens"]
        return VariantResult(
            name=self.name, ok=True,
            samples_per_s=size * calls / timing.total_s,
            latency_ms=timing.summary(),
            weights_bytes=weights_bytes(prepared.model),
            tokens_per_s=tokens * calls / timing.total_s if tokens else None,
            first_call_ms=timing.first_call_ms,
            iterations=calls,
            output=output_summary(timing.output),
            **probe.result(),
            **drift(reference, own),
        )


def _reference(spec, progress, cancel):
    """float32's primary output on the batch, for runs that do not time float32 itself."""
    from .pipeline import forward, prepare

    prepared = prepare(variant_spec(spec, "float32"), progress, cancel)
    return reference_copy(forward(prepared))


def _device(spec: PipelineSpec):
    from .loading import resolve_device

    device = resolve_device(spec)
    if device is None:
        raise InputError(f"device {spec.device!r} is not available on this machine")
    return device


def unsupported_reason(name: str, device) -> str | None:
    """Why a variant cannot run on this device, known before loading anything."""
    import torch

    if "bfloat16" in name and device.type == "cuda" and torch.cuda.is_available():
        with torch.cuda.device(device):
            if not torch.cuda.is_bf16_supported(including_emulation=False):
                major, minor = torch.cuda.get_device_capability(device)
                return (f"bfloat16 is not supported by {torch.cuda.get_device_name(device)} "
                        f"(compute capability {major}.{minor}; bfloat16 needs 8.0 or newer)")
    return None


def batch_info(batch: dict) -> dict:
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
    return {"size": int(size), "shapes": {k: list(v.shape) for k, v in tensors.items()},
            "tokens": tokens}


def describe(exc: BaseException) -> str:
    """One line for the report: the type and the first line of the message."""
    import torch

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



# -- human output -------------------------------------------------------------------------------

def format_table(doc: dict) -> str:
    """The bench document as a table for people (the `--json`-less CLI output)."""
    name = doc.get("device_name")
    lines = [f"device: {doc['device']}" + (f" ({name})" if name else "")]
    tf32 = doc.get("tf32") or {}
    if tf32 and doc["device"].startswith("cuda"):
        on = {True: "on", False: "off"}
        lines.append(f"float32 baseline: TF32 matmul {on[bool(tf32.get('cuda_matmul_allow_tf32'))]}"
                     f", cuDNN TF32 {on[bool(tf32.get('cudnn_allow_tf32'))]}"
                     f", float32 matmul precision {tf32.get('float32_matmul_precision')}")
    batch = doc.get("batch")
    if batch:
        lines.append(f"batch: {batch['size']} samples"
                     + (f", {batch['tokens']} tokens" if batch.get("tokens") else ""))
    base = next((v["samples_per_s"] for v in doc["variants"]
                 if v["name"] == "float32" and v["ok"]), None)
    header = ("variant", "samples/s", "vs fp32", "p50 ms", "p90 ms", "min ms", "peak mem",
              "weights", "max |diff|", "cosine", "top-1")
    rows = [header]
    failures = []
    for v in doc["variants"]:
        if not v["ok"]:
            rows.append((v["name"], "failed") + ("",) * (len(header) - 2))
            failures.append(f"  {v['name']}: {v.get('error') or 'failed'}")
            continue
        lat = v["latency_ms"]
        rows.append((v["name"], f"{v['samples_per_s']:.1f}",
                     f"{v['samples_per_s'] / base:.2f}x" if base else "-",
                     f"{lat['p50']:.2f}", f"{lat['p90']:.2f}", f"{lat['min']:.2f}",
                     format_bytes(v["peak_memory_bytes"]), format_bytes(v["weights_bytes"]),
                     _num(v["max_abs_diff_vs_float32"], "{:.3g}", v.get("nonfinite_outputs")),
                     _num(v.get("cosine_vs_float32"), "{:.6f}"),
                     _num(v["top1_agreement"], "{:.1%}")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines.append("")
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    memory_kinds = {v.get("memory_kind") for v in doc["variants"] if v["ok"]}
    if "process-rss" in memory_kinds:
        lines.append("peak mem: the process's resident memory (CPU), sampled between calls")
    elif "cuda-max-allocated" in memory_kinds:
        lines.append("peak mem: torch.cuda.max_memory_allocated (tensors); the JSON also has "
                     "reserved and NVML device-wide figures")
    if failures:
        lines.append("failed:")
        lines.extend(failures)
    if doc.get("reference_error"):
        lines.append(f"no float32 reference: {doc['reference_error']}")
    if doc.get("note"):
        lines.append(f"note: {doc['note']}")
    return "\n".join(lines)


def format_bytes(value) -> str:
    return "-" if value is None else units.format_bytes(value)


def _num(value, fmt, nonfinite=None):
    if nonfinite:
        return f"{nonfinite} inf/NaN"
    return "-" if value is None else fmt.format(value)
