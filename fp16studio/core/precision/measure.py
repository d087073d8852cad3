"""How `bench` measures one variant: timing, memory and drift against float32.

Plain functions over a callable, a module and tensors, so they can be tested (and reused by
benchmarks/bench_vs_plain.py) without loading a pipeline. torch is imported inside the work:
importing `fp16studio.core` stays cheap.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from itertools import chain

from ..common.errors import Cancelled, check_cancel
from ..run.distance import output_distance


@dataclass(frozen=True)
class Limits:
    """How long each variant is timed: at least `min_iterations` calls and `min_seconds`, spread
    over at least `min_rounds` interleaved rounds (A B C A B C ...; fewer only when fewer calls
    are asked for), never more than `max_iterations` calls. `warmup` untimed calls first (0: the
    first call is timed too)."""

    warmup: int = 3
    min_iterations: int = 20
    min_seconds: float = 1.0
    max_iterations: int = 10_000
    min_rounds: int = 5

    def __post_init__(self):
        if (self.warmup < 0 or self.min_iterations < 1 or self.min_rounds < 1
                or self.max_iterations < self.min_iterations or self.min_seconds < 0):
            raise ValueError(f"bench limits: need warmup >= 0, min_rounds >= 1, min_seconds >= 0 "
                             f"and 1 <= min_iterations <= max_iterations, got {self}")

    @property
    def rounds(self) -> int:
        return min(self.min_rounds, self.min_iterations)

    @property
    def block_calls(self) -> int:
        """Calls per variant per round, at least."""
        return -(-self.min_iterations // self.rounds)

    @property
    def block_seconds(self) -> float:
        return self.min_seconds / self.rounds


# Above this spread across rounds a figure is flagged unstable: other load moved it.
STABLE_SPREAD = 0.05


@dataclass
class Timing:
    first_call_ms: float
    # Timed calls, one list per round.
    rounds: list = field(default_factory=list)
    # The result of the first call, kept for the accuracy comparison.
    output: object = None

    @property
    def latencies_ms(self) -> list:
        return [ms for block in self.rounds for ms in block]

    @property
    def total_s(self) -> float:
        return sum(self.latencies_ms) / 1000.0

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        return {"p50": percentile(lat, 50), "p90": percentile(lat, 90), "min": lat[0]}

    @property
    def spread(self) -> float | None:
        """(slowest - fastest) / median of the rounds' median latencies: how much the figure
        moved while the variants took turns. None with fewer than two rounds."""
        medians = sorted(percentile(sorted(block), 50) for block in self.rounds if block)
        if len(medians) < 2:
            return None
        return (medians[-1] - medians[0]) / percentile(medians, 50)

    @property
    def stable(self) -> bool:
        return self.spread is not None and self.spread <= STABLE_SPREAD


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


def time_interleaved(fns: dict, timer, limits: Limits, cancel=None, on_iteration=None,
                     on_block=None):
    """Time several callables in turns, so that a burst of other load hits them alike.

    Each is warmed up (its first call reported apart: lazy init, autotuning, caches; its result
    kept), then the rounds run each in turn for a block of at least `limits.block_calls` calls
    and `limits.block_seconds`, until every one has its minimum calls, time and rounds.
    `on_iteration(name, i, ms)` runs after each timed call and `on_block(name, started)` around
    each block, both outside the timed region; `cancel.check()` runs between calls. A callable
    that raises is dropped. Returns ({name: Timing}, {name: exception}).
    """
    timings, errors = {}, {}
    for name, fn in fns.items():
        check_cancel(cancel)
        try:
            first_ms, output = timer(fn)
            for _ in range(limits.warmup - 1):
                check_cancel(cancel)
                timer(fn)
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - this variant fails, the others still run
            errors[name] = exc
            continue
        timings[name] = Timing(first_call_ms=first_ms, output=output)
        if limits.warmup == 0:  # nothing was untimed: the first call counts
            timings[name].rounds.append([first_ms])
    round_no = 0
    while True:
        round_no += 1
        active = [name for name, timing in timings.items() if name not in errors
                  and _wants_more(timing, limits)]
        if not active:
            return {n: t for n, t in timings.items() if n not in errors}, errors
        for name in active:
            timing = timings[name]
            if len(timing.rounds) < round_no:
                timing.rounds.append([])
            block, started = timing.rounds[-1], time.perf_counter()
            if on_block is not None:
                on_block(name, True)
            try:
                while len(block) < limits.block_calls or (
                        time.perf_counter() - started < limits.block_seconds
                        and len(timing.latencies_ms) < limits.max_iterations):
                    check_cancel(cancel)
                    ms, _ = timer(fns[name])
                    block.append(ms)
                    if on_iteration is not None:
                        on_iteration(name, len(timing.latencies_ms), ms)
            except Cancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory later on
                errors[name] = exc
            if on_block is not None:
                on_block(name, False)


def _wants_more(timing: Timing, limits: Limits) -> bool:
    calls = len(timing.latencies_ms)
    if calls >= limits.max_iterations:
        return False
    return (calls < limits.min_iterations or timing.total_s < limits.min_seconds
            or sum(1 for block in timing.rounds if block) < limits.rounds)


# -- memory -------------------------------------------------------------------------------------

def weights_bytes(model) -> int:
    """Bytes held by parameters and buffers (tied weights counted once). `model.dtype` names only
    the first parameter, and fp32-kept modules make fp16 weights more than half of fp32."""
    return sum(t.numel() * t.element_size() for t in chain(model.parameters(), model.buffers()))


class MemoryProbe:
    """Peak memory of one variant: its weights plus the most its forward pass holds at once.

    CUDA: the most its calls added to the caching allocator's live tensors
    (`max_memory_allocated` over each timed block, less what was allocated when the block
    began: the other variants' weights stay loaded meanwhile); `max_memory_reserved` (allocator
    cache) and NVML's device-wide used memory (every process, CUDA context included) are
    reported beside it, labelled, because users confuse them.
    CPU: the peak of the live tensors torch allocates during one untimed call (`measure`, read
    from the profiler's memory events). The process's resident memory would include the
    interpreter, torch and every loaded variant, the same for all of them: it hides what half
    precision saves.
    """

    def __init__(self, device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.peak_added = 0
        self.peak_reserved = 0
        self._baseline = 0

    @property
    def kind(self) -> str:
        return "cuda-max-allocated" if self.cuda else "cpu-live-tensors"

    def start(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._baseline = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def stop(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak_added = max(self.peak_added,
                                  torch.cuda.max_memory_allocated(self.device) - self._baseline)
            self.peak_reserved = max(self.peak_reserved,
                                     torch.cuda.max_memory_reserved(self.device))

    def measure(self, fn):
        """On the CPU, one untimed call of `fn` under the profiler: the peak of its live tensors."""
        if not self.cuda:
            self.peak_added = live_tensor_peak(fn)

    def result(self, weights: int = 0) -> dict:
        return {"peak_memory_bytes": weights + self.peak_added, "memory_kind": self.kind,
                "reserved_memory_bytes": self.peak_reserved if self.cuda else None,
                "nvml_used_bytes": nvml_used_bytes(self.device) if self.cuda else None}


def live_tensor_peak(fn) -> int:
    """The most bytes of CPU tensors alive at once while `fn` runs, counted from what torch
    allocates and frees (its output included, its inputs not: they were there before)."""
    from torch.profiler import ProfilerActivity, profile

    with _native_stderr_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # An operator's own allocations less its frees, and the frees outside any operator
    # ("[memory]" events), in the order they happened.
    steps = sorted((event.time_range.start,
                    event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage)
                   for event in prof.events())
    live = peak = 0
    for _, amount in steps:
        live += amount
        peak = max(peak, live)
    return peak


@contextlib.contextmanager
def _native_stderr_quiet():
    """The profiler's native code writes a start and a stop line to the process's stderr, under
    the command's output; for its few milliseconds, fd 2 goes to /dev/null."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


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


def with_tf32(fn):
    """`fn` with float32 matmuls and convolutions allowed to run as TF32, the settings given
    back after each call: the variants around it run as the user set them."""
    import torch

    def call():
        precision, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        try:
            return fn()
        finally:
            torch.set_float32_matmul_precision(precision)
            torch.backends.cudnn.allow_tf32 = cudnn

    return call


# -- accuracy -----------------------------------------------------------------------------------

def output_summary(output) -> dict | None:
    """{"name", "dtype", "shape"} of the primary output, as the model returned it."""
    from ..run.pipeline import primary_output

    name, tensor = primary_output(output)
    if tensor is None:
        return None
    return {"name": name, "dtype": str(tensor.dtype).replace("torch.", ""),
            "shape": list(tensor.shape)}


def drift(reference, copy) -> dict:
    """bench's accuracy figures: how far a variant's primary output is from float32's on the
    same batch (both taken with `reference_copy`), as `run.distance` defines the distances."""
    found = output_distance(reference, copy)
    return {"max_abs_diff_vs_float32": found["max_abs_diff"],
            "cosine_vs_float32": found["cosine"], "top1_agreement": found["top1_agreement"],
            "nonfinite_outputs": found["nonfinite"]}


# -- work ---------------------------------------------------------------------------------------

def count_flops(fn) -> int | None:
    """Floating-point operations of one call of `fn`, as torch.utils.flop_counter counts them
    (matmuls, convolutions, attention: the work that dominates). None when it cannot count."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with FlopCounterMode(display=False) as counter:
            fn()
    except Exception:  # noqa: BLE001 - an extra figure, never a reason to fail the variant
        return None
    return int(counter.get_total_flops()) or None
