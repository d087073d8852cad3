"""Why half precision pays or does not: what bounds each variant's step, and one sentence each.

Pure functions over recorded figures (no torch), so the reasoning is tested on recorded timings
of each kind. On a GPU a step is launch-bound when the device idles most of it waiting for the
interpreter to enqueue kernels (busy time well under the wall time: faster kernels do not shorten
it), else memory- or math-bound by which of the device's peaks (bandwidth, FLOP/s) its busy time
comes closer to. On a CPU nothing is asynchronous: the verdict is about the CPU's own kernels and
threads, never a GPU's words.
"""

from __future__ import annotations

from dataclasses import dataclass

from .measure import STABLE_SPREAD

# Busy less than this share of the wall time: launch-bound.
LAUNCH_BUSY_SHARE = 0.5
# A speed-up over float32 below this does not pay (within a measurement's noise of 1).
PAYS = 1.1
# Tensor cores take float16/bfloat16 GEMMs at full speed when their dimensions are multiples of 8.
TENSOR_CORE_MULTIPLE = 8
REMEDY = "a larger batch, CUDA graphs or torch.compile"


@dataclass(frozen=True)
class Step:
    """One variant's measured step."""

    name: str
    wall_ms: float                  # synchronised wall-clock time per call
    busy_ms: float | None = None    # the device's busy time per call (None: not measured)
    flops: int | None = None        # floating-point operations per call
    bytes: int | None = None        # bytes a call moves at least (weights, activation peak)
    peak_tflops: float | None = None
    peak_gb_per_s: float | None = None
    support: str | None = "native"
    spread: float | None = None     # how far its rounds' medians lay apart (measure.Timing.spread)
    nonfinite: int = 0              # inf/NaN values in its output: a broken variant, not a speed

    @property
    def broken(self) -> bool:
        return self.nonfinite > 0

    @property
    def stable(self) -> bool:
        return self.spread is None or self.spread <= STABLE_SPREAD

    @property
    def dtype(self) -> str:
        return self.name.removeprefix("autocast-")

    @property
    def busy_share(self) -> float | None:
        return self.busy_ms / self.wall_ms if self.busy_ms is not None and self.wall_ms else None

    def math_fraction(self) -> float | None:
        if not (self.flops and self.busy_ms and self.peak_tflops):
            return None
        return self.flops / (self.busy_ms * 1e-3) / (self.peak_tflops * 1e12)

    def memory_fraction(self) -> float | None:
        if not (self.bytes and self.busy_ms and self.peak_gb_per_s):
            return None
        return self.bytes / (self.busy_ms * 1e-3) / (self.peak_gb_per_s * 1e9)


def bound(step: Step) -> str | None:
    """"launch", "memory", "math", or None where the busy time or the device's peaks are
    unknown."""
    share = step.busy_share
    if share is None:
        return None
    if share < LAUNCH_BUSY_SHARE:
        return "launch"
    math, memory = step.math_fraction(), step.memory_fraction()
    if math is None or memory is None:
        return None
    return "math" if math >= memory else "memory"


def misaligned(dims) -> list[int]:
    """The GEMM dimensions that keep float16/bfloat16 matmuls off the tensor cores' fast path."""
    return sorted({d for d in dims if d % TENSOR_CORE_MULTIPLE})


def judge(steps: list[Step], device_type: str, threads: int | None = None,
          gemm_dims=()) -> tuple[dict, str]:
    """({name: {"busy_ms", "overhead_ms", "bound", "kernel_speedup", "verdict"}}, the verdict
    of the whole bench). `steps` are the variants that ran, float32 (the reference) among them
    where it ran; `gemm_dims` the model's matmul dimensions (its layers' widths)."""
    ref = next((s for s in steps if s.name == "float32"), None)
    gpu = device_type == "cuda"
    odd = misaligned(gemm_dims) if gpu else []
    # A variant whose output is not finite is judged on that first: no speed is said of it, and
    # nothing is said against a float32 reference that is itself broken.
    judged = ref if ref is not None and not ref.broken else None
    figures = {}
    for step in steps:
        speed = judged.wall_ms / step.wall_ms if judged and step.wall_ms else None
        kernels = (judged.busy_ms / step.busy_ms if judged and judged.busy_ms and step.busy_ms
                   else None)
        if step.broken:
            words = broken_words(step)
        else:
            words = (_gpu_words(step, ref, speed, kernels, odd) if step.busy_ms is not None
                     else _cpu_words(step, ref, speed, threads))
        figures[step.name] = {
            "busy_ms": step.busy_ms,
            "overhead_ms": (step.wall_ms - step.busy_ms) if step.busy_ms is not None else None,
            "bound": bound(step), "kernel_speedup": None if step.broken else kernels,
            "verdict": words}
    return figures, " ".join(_sentences(steps, ref, threads, figures))


def broken_words(step: Step) -> str:
    return (f"{step.name}'s output holds {step.nonfinite} inf/NaN values: it is broken here, so "
            "its speed is not judged.")


def _sentences(steps, ref, threads, figures) -> list[str]:
    """The whole bench's verdict: whether the figures are steady enough to rank (float32's
    and the fastest variant's spread within the bound), which variants are broken, and only
    then the ranking."""
    broken = [s for s in steps if s.broken]
    if ref is not None and ref.broken:
        return [f"float32's own output holds {ref.nonfinite} inf/NaN values, so no variant is "
                "ranked against it: look for a NaN or inf in the weights or the inputs."]
    best = _fastest([s for s in steps if not s.broken], ref)
    compared = [ref, best] if ref is not None and best is not None else []
    unsteady = [s for s in compared if not s.stable]
    said = []
    if unsteady:
        # Said as measured: the cause (other load, clocks, Python's own jitter) is not known.
        where = "" if best.busy_ms is not None else \
            f" on this CPU ({threads} threads)" if threads else " on this CPU"
        said.append(f"The figures{where} are not stable enough to rank: "
                    f"{' and '.join(s.name for s in unsteady)} varied "
                    f"{' and '.join(f'{s.spread:,.0%}' for s in unsteady)} between rounds (more "
                    f"than {STABLE_SPREAD:.0%}); measure again, for longer or on a quieter machine.")
    if broken:
        said.append(f"{_names(broken)} {'is' if len(broken) == 1 else 'are'} not ranked: "
                    f"{'its' if len(broken) == 1 else 'their'} output holds inf/NaN values.")
    if not unsteady and not (broken and best is None):
        said.append(_overall(steps, ref, best, figures, threads))
    return said


def _names(steps) -> str:
    names = [s.name for s in steps]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _fastest(steps, ref):
    others = [s for s in steps if s is not ref]
    return min(others, key=lambda s: s.wall_ms) if others else None


def _gpu_words(step, ref, speed, kernels, odd) -> str:
    kind, share = bound(step), step.busy_share
    if step is ref or speed is None:
        lead = f"{step.name}"
    else:
        lead = f"{step.name} runs {speed:.2f}x float32's speed"
        if kernels is not None:
            lead += f" (its kernels alone {kernels:.2f}x)"
    if kind == "launch":
        text = (f"{lead}; launch-bound: the GPU is busy {share:.0%} of each step and waits for "
                "Python to enqueue kernels the rest")
        if step is not ref:
            text += f", so {REMEDY} would turn faster kernels into speed"
    elif kind == "memory":
        text = (f"{lead}; memory-bound: {step.memory_fraction():.0%} of the GPU's bandwidth, so "
                "fewer bytes per value is what speeds it up")
    elif kind == "math":
        text = f"{lead}; math-bound at {step.math_fraction():.0%} of the GPU's {step.dtype} peak"
    else:
        text = (f"{lead}; the GPU is busy {share:.0%} of each step (no peak figures for this GPU "
                "to say whether memory or math bounds it)")
    if odd and kind != "launch" and step.dtype in ("float16", "bfloat16"):
        text += (f"; GEMM dimensions {', '.join(map(str, odd[:4]))} are not multiples of "
                 f"{TENSOR_CORE_MULTIPLE}, which slows {step.dtype} tensor-core matmuls: pad them")
    if step.support == "emulated":
        text += f"; this GPU has no native {step.dtype} units (emulated)"
    return text + "."


def _cpu_words(step, ref, speed, threads) -> str:
    where = f"this CPU ({threads} threads)" if threads else "this CPU"
    if step is ref or speed is None:
        return f"{step.name} on {where}: the reference."
    if speed >= PAYS:
        return f"{step.name} runs {speed:.2f}x float32's speed on {where}."
    if speed > 1 / PAYS:
        return f"{step.name} runs about float32's speed ({speed:.2f}x) on {where}."
    if step.support == "emulated":
        why = (f"it has no native {step.dtype} kernels for most operators, which convert to "
               "float32 and back")
    else:
        why = f"its {step.dtype} kernels are no faster than float32's for this model"
    if step.name.startswith("autocast-"):
        why += ", and autocast casts around each operator"
    return f"{step.name} runs {speed:.2f}x float32's speed on {where}: {why}."


def _overall(steps, ref, best, figures, threads) -> str:
    if not steps:
        return "Nothing ran: see each variant's error."
    if ref is None or best is None:
        return ("No float32 figure to compare with." if ref is None
                else "Only float32 ran: nothing to compare it with.")
    speed, fig = ref.wall_ms / best.wall_ms, figures[best.name]
    if best.busy_ms is None:  # a CPU
        where = f"this CPU ({threads} threads)" if threads else "this CPU"
        if speed >= PAYS:
            return (f"On {where} {best.name} is the fastest at {speed:.2f}x float32; judge "
                    "speed on the device you deploy on.")
        return (f"Half precision does not pay on {where}: the fastest, {best.name}, runs "
                f"{speed:.2f}x float32 (it still halves the weights' memory).")
    launch = fig["bound"] == "launch"
    kernels = fig["kernel_speedup"]
    more = (f", its kernels alone {kernels:.2f}x: {REMEDY} would turn them into speed"
            if launch and kernels else "")
    if speed >= PAYS:
        return f"{best.name} pays: {speed:.2f}x float32's throughput{' but launch-bound' if launch else ''}{more}."
    if launch:
        return (f"Half precision does not pay here: the fastest, {best.name}, runs {speed:.2f}x "
                f"float32 because the step is launch-bound{more}.")
    bounded = f" ({fig['bound']}-bound)" if fig["bound"] else ""
    return (f"Half precision does not pay here: the fastest, {best.name}, runs {speed:.2f}x "
            f"float32{bounded}.")


# The verdict's figures as bench table columns, in core.present.vocabulary's form: (header, raw
# value of a variant, its text, shown when absent).
def _fmt(pattern):
    return lambda x: "" if x is None else pattern.format(x)


VERDICT_COLUMNS = (
    ("Busy ms", lambda v: v.busy_ms, _fmt("{:.2f}"), False),
    ("Overhead ms", lambda v: v.overhead_ms, _fmt("{:.2f}"), False),
    ("Bound", lambda v: v.bound, lambda x: x or "", False),
    ("Kernels vs fp32", lambda v: v.kernel_speedup, _fmt("{:.2f}×"), False),
)
