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
    first call is timed too, and every call is a block of its own)."""

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


# Above this spread across rounds a figure is flagged unstable: something moved it (other
# load, clocks; on an idle H100 a launch-bound step's rounds varied 14-26%).
STABLE_SPREAD = 0.05

# A timed block's synchronise and clock reads are at most this share of its time. (torch's
# Timer.blocked_autorange asks 1e-4 of a longer run; here a block is a round's share.)
BLOCK_OVERHEAD = 1e-3


@dataclass
class Timing:
    first_call_ms: float
    # Per round, the time per call of each of its blocks (a block: back-to-back calls closed by
    # one device synchronise).
    rounds: list = field(default_factory=list)
    # The result of the first call, kept for the accuracy comparison.
    output: object = None
    # Calls per block; the calls and seconds timed so far, and the calls of the last round.
    block_size: int = 1
    calls: int = 0
    total_s: float = 0.0
    round_calls: int = 0

    @property
    def latencies_ms(self) -> list:
        """Time per call of every block."""
        return [ms for block in self.rounds for ms in block]

    def start_round(self):
        self.rounds.append([])
        self.round_calls = 0

    def add(self, ms_per_call: float, calls: int):
        self.rounds[-1].append(ms_per_call)
        self.calls += calls
        self.round_calls += calls
        self.total_s += ms_per_call * calls / 1000.0

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        return {"p50": percentile(lat, 50), "p90": percentile(lat, 90), "min": lat[0]}

    @property
    def spread(self) -> float | None:
        """(slowest - fastest) / median of the rounds' median times per call: how much the
        figure moved while the variants took turns. None with fewer than two rounds."""
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
    """A function `timer(fn, calls) -> (milliseconds, last result)`: the wall-clock time of
    `calls` back-to-back calls of `fn`, closed by a device synchronise: what the user's loop gets.

    CUDA and MPS launches are asynchronous: the interpreter enqueues the next call's kernels
    while the device runs this one's, and a step is as slow as the slower of the two. Events
    around each call would see only the device's part; a synchronise after every call would
    add the queue's fill and drain to each. So calls run back to back and the block ends with
    one synchronise (and starts with one, so no earlier work is counted). On a CPU a call
    returns when its work is done.
    """
    import torch

    sync = {"cuda": lambda: torch.cuda.synchronize(device),
            "mps": torch.mps.synchronize}.get(device.type)

    def timer(fn, calls=1):
        result = None
        if sync is not None:
            sync()
        started = time.perf_counter()
        for _ in range(calls):
            result = fn()
        if sync is not None:
            sync()
        return (time.perf_counter() - started) * 1000.0, result

    return timer


def block_size(fn, timer, limits: Limits) -> int:
    """Calls per timed block, as `Timer.blocked_autorange` sizes its blocks: doubled from one
    until an empty block's synchronise and clock reads are at most BLOCK_OVERHEAD of the block,
    or the block takes a round's share of `min_seconds` (or of `max_iterations`). The calls made
    here warm up too."""
    overhead = percentile(sorted(timer(_nothing, 0)[0] for _ in range(5)), 50)
    calls, most = 1, max(1, limits.max_iterations // limits.rounds)
    while calls * 2 <= most:
        ms, _ = timer(fn, calls)
        if overhead <= BLOCK_OVERHEAD * ms or 0 < limits.block_seconds * 1000.0 <= ms:
            break
        calls *= 2
    return calls


def _nothing():
    return None


def time_interleaved(fns: dict, timer, limits: Limits, cancel=None, on_iteration=None,
                     on_block=None):
    """Time several callables in turns, so that a burst of other load hits them alike.

    Each is warmed up (its first call timed apart: lazy init, autotuning, caches; its result
    kept) and its block size found (`block_size`), then the rounds run each in turn for blocks
    of back-to-back calls, at least `limits.block_calls` calls and `limits.block_seconds` per
    round, until every one has its minimum calls, time and rounds. `on_iteration(name, calls,
    ms)` runs after each block (`ms` per call) and `on_block(name, started)` around each turn,
    both outside the timed region; `cancel.check()` runs between blocks. A callable that raises
    is dropped. Returns ({name: Timing}, {name: exception}).
    """
    timings, errors = {}, {}
    for name, fn in fns.items():
        check_cancel(cancel)
        try:
            first_ms, output = timer(fn)
            for _ in range(limits.warmup - 1):
                check_cancel(cancel)
                timer(fn)
            size = block_size(fn, timer, limits) if limits.warmup else 1
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - this variant fails, the others still run
            errors[name] = exc
            continue
        timings[name] = Timing(first_call_ms=first_ms, output=output, block_size=size)
        if limits.warmup == 0:  # nothing was untimed: the first call counts
            timings[name].start_round()
            timings[name].add(first_ms, 1)
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
                timing.start_round()
            started = time.perf_counter()
            if on_block is not None:
                on_block(name, True)
            try:
                while timing.round_calls < limits.block_calls or (
                        time.perf_counter() - started < limits.block_seconds
                        and timing.calls < limits.max_iterations):
                    check_cancel(cancel)
                    calls = max(1, min(timing.block_size, limits.max_iterations - timing.calls))
                    ms, _ = timer(fns[name], calls)
                    timing.add(ms / calls, calls)
                    if on_iteration is not None:
                        on_iteration(name, timing.calls, ms / calls)
            except Cancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory later on
                errors[name] = exc
            if on_block is not None:
                on_block(name, False)


def _wants_more(timing: Timing, limits: Limits) -> bool:
    if timing.calls >= limits.max_iterations:
        return False
    return (timing.calls < limits.min_iterations or timing.total_s < limits.min_seconds
            or sum(1 for block in timing.rounds if block) < limits.rounds)


def device_busy_ms(fn, device, calls: int = 3) -> float | None:
    """How long the GPU is busy per call of `fn`: the time in which it ran any of the call's
    kernels, copies or memsets (overlapping ones counted once), from the profiler's CUDA
    activity over `calls` untimed calls. None off CUDA, or when the profiler saw no activity."""
    if device.type != "cuda":
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with _native_stderr_quiet(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    cuda = torch._C._autograd.DeviceType.CUDA
    intervals = [(event.start_ns(), event.end_ns())
                 for event in prof.profiler.kineto_results.events()
                 if event.device_type() == cuda]
    busy = covered_ns(intervals)
    return busy / calls / 1e6 if busy else None


def covered_ns(intervals) -> int:
    """The length of the union of (start, end) intervals."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


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

def gemm_dims(model) -> list[int]:
    """The matmul dimensions the model's weights fix: linear layers' input and output widths
    (transformers' Conv1D too) and convolutions' channels, each once."""
    import torch

    dims = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            dims.update((module.in_features, module.out_features))
        elif isinstance(module, torch.nn.modules.conv._ConvNd):
            dims.update((module.in_channels, module.out_channels))
        elif type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
            dims.update(module.weight.shape)
    return sorted(dims)


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
