"""How `bench` measures one variant: timing, memory and drift against float32.

Plain functions over a callable, a module and tensors, so they can be tested (and reused by
benchmarks/bench_vs_plain.py) without loading a pipeline. torch is imported inside the work:
importing `fp16studio.core` stays cheap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import chain

from .errors import check_cancel


@dataclass(frozen=True)
class Limits:
    """When the timed loop stops: after both `min_iterations` calls and `min_seconds` have passed
    (as pytest-benchmark and torch.utils.benchmark do), never after more than `max_iterations`."""

    warmup: int = 3
    min_iterations: int = 10
    min_seconds: float = 1.0
    max_iterations: int = 10_000

    def __post_init__(self):
        if self.warmup < 1 or self.min_iterations < 1 or self.max_iterations < self.min_iterations:
            raise ValueError(f"bench limits: need warmup >= 1 and 1 <= min_iterations <= "
                             f"max_iterations, got {self}")


@dataclass
class Timing:
    first_call_ms: float
    latencies_ms: list = field(default_factory=list)
    # The result of the first call, kept for the accuracy comparison.
    output: object = None

    @property
    def total_s(self) -> float:
        return sum(self.latencies_ms) / 1000.0

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        return {"p50": percentile(lat, 50), "p90": percentile(lat, 90), "min": lat[0]}


def percentile(sorted_values: list, q: float) -> float:
    """Linear interpolation between closest ranks (NumPy's default method)."""
    pos = (len(sorted_values) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def make_timer(device):
    """A function `timer(fn) -> (milliseconds, fn())` right for the device.

    CUDA launches are asynchronous, so wall-clock time around a call measures the launch only:
    time it between CUDA events on the current stream and wait for the end event. MPS is
    asynchronous too and has no per-stream events here: synchronise, then read perf_counter.
    On a CPU the call returns when the work is done.
    """
    import torch

    if device.type == "cuda":
        def cuda_timer(fn):
            with torch.cuda.device(device):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                result = fn()
                end.record()
                end.synchronize()
                return start.elapsed_time(end), result

        return cuda_timer

    sync = torch.mps.synchronize if device.type == "mps" else None

    def wall_timer(fn):
        started = time.perf_counter()
        result = fn()
        if sync is not None:
            sync()
        return (time.perf_counter() - started) * 1000.0, result

    return wall_timer


def time_calls(fn, timer, limits: Limits, cancel=None, on_iteration=None) -> Timing:
    """Warm up (the first call is reported apart: it pays for lazy init, autotuning, caches),
    then call `fn` until the limits are met. `on_iteration(i, ms)` is called after each timed
    call, outside the timed region; `cancel.check()` runs between calls."""
    first_ms, output = timer(fn)
    timing = Timing(first_call_ms=first_ms, output=output)
    for _ in range(limits.warmup - 1):
        check_cancel(cancel)
        timer(fn)
    started = time.perf_counter()
    while len(timing.latencies_ms) < limits.max_iterations and (
            len(timing.latencies_ms) < limits.min_iterations
            or time.perf_counter() - started < limits.min_seconds):
        check_cancel(cancel)
        ms, _ = timer(fn)
        timing.latencies_ms.append(ms)
        if on_iteration is not None:
            on_iteration(len(timing.latencies_ms), ms)
    return timing



# -- memory -------------------------------------------------------------------------------------

def weights_bytes(model) -> int:
    """Bytes held by parameters and buffers (tied weights counted once). `model.dtype` names only
    the first parameter, and fp32-kept modules make fp16 weights more than half of fp32."""
    return sum(t.numel() * t.element_size() for t in chain(model.parameters(), model.buffers()))


class MemoryProbe:
    """Peak memory while one variant runs.

    CUDA: the caching allocator's peaks since `start()`: `max_memory_allocated` (live tensors) is
    the figure; `max_memory_reserved` (allocator cache) and NVML's device-wide used memory (every
    process, CUDA context included) are reported beside it, labelled, because users confuse them.
    CPU: the process's resident set, sampled between iterations (activations freed inside a
    forward pass are not seen; the process's own baseline is included).
    """

    def __init__(self, device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.peak_rss = 0

    @property
    def kind(self) -> str:
        return "cuda-max-allocated" if self.cuda else "process-rss"

    def start(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.sample()

    def sample(self):
        if not self.cuda:
            import psutil

            self.peak_rss = max(self.peak_rss, psutil.Process().memory_info().rss)

    def result(self) -> dict:
        import torch

        if not self.cuda:
            return {"peak_memory_bytes": self.peak_rss, "memory_kind": self.kind,
                    "reserved_memory_bytes": None, "nvml_used_bytes": None}
        return {"peak_memory_bytes": torch.cuda.max_memory_allocated(self.device),
                "memory_kind": self.kind,
                "reserved_memory_bytes": torch.cuda.max_memory_reserved(self.device),
                "nvml_used_bytes": nvml_used_bytes(self.device)}


def nvml_used_bytes(device) -> int | None:
    """The device's used memory as nvidia-smi sees it (every process, CUDA contexts included),
    through torch's NVML reading, which maps CUDA_VISIBLE_DEVICES to the right GPU. None when
    nvidia-ml-py is not installed or the driver does not answer: it is an extra figure, never
    a reason to fail the variant."""
    import torch

    try:
        return int(torch.cuda.device_memory_used(device))
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, NVMLError, old torch: all mean unknown
        return None


def tf32_settings() -> dict:
    """Whether float32 matmuls and convolutions may run as TF32 on Ampere and newer GPUs: it
    changes the float32 baseline, so the report says which one it ran with."""
    import torch

    return {"cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


# -- accuracy -----------------------------------------------------------------------------------

def primary_output(output):
    """(name, tensor) that stands for the model's answer, as the diagnosis reports it."""
    from .pipeline import primary_output

    name, tensor = primary_output(output)
    return None if tensor is None else (name, tensor)


def reference_copy(output):
    """The primary output detached to the CPU in float32, so a variant's model can be freed."""
    found = primary_output(output)
    if found is None:
        return None
    name, tensor = found
    return name, tensor.detach().float().cpu()


def output_summary(output) -> dict | None:
    """{"name", "dtype", "shape"} of the primary output, as the model returned it."""
    found = primary_output(output)
    if found is None:
        return None
    name, tensor = found
    return {"name": name, "dtype": str(tensor.dtype).replace("torch.", ""),
            "shape": list(tensor.shape)}


def drift(reference, copy) -> dict:
    """How far a variant's primary output is from float32's on the same batch (both taken with
    `reference_copy`).

    max abs difference over all values; cosine similarity per sample (flattened), averaged;
    top-1 agreement only for logits (the share of rows whose argmax is unchanged). Non-finite
    values make the distances meaningless: they are counted and the distances left null.
    """
    import torch

    empty = {"max_abs_diff_vs_float32": None, "cosine_vs_float32": None,
             "top1_agreement": None, "nonfinite_outputs": None}
    if reference is None or copy is None:
        return empty
    (ref_name, ref), (name, out) = reference, copy
    if ref_name != name or ref.shape != out.shape:
        return empty
    nonfinite = int((~torch.isfinite(out)).sum())
    if nonfinite:
        return {**empty, "nonfinite_outputs": nonfinite}
    ref64, out64 = ref.double(), out.double()
    rows = max(ref.shape[0], 1) if ref.dim() else 1
    cosine = torch.nn.functional.cosine_similarity(
        out64.reshape(rows, -1), ref64.reshape(rows, -1), dim=1)
    top1 = None
    if name == "logits" and ref.dim() >= 1 and ref.shape[-1] > 1:
        top1 = float((out.argmax(-1) == ref.argmax(-1)).double().mean())
    return {"max_abs_diff_vs_float32": float((out64 - ref64).abs().max()) if ref.numel() else 0.0,
            "cosine_vs_float32": float(cosine.mean()),
            "top1_agreement": top1,
            "nonfinite_outputs": 0}
